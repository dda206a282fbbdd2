//! The read verbs: GET of one object and LIST of a collection. A list filters by label and field
//! selectors, pages with `limit`/`continue` on one consistent etcd revision, and follows upstream's
//! `resourceVersion` rules (`0` ignores `limit`; `resourceVersionMatch=Exact` reads at that revision;
//! a compacted revision is 410 with a continue token to resume from).

use serde_json::{Value, json};

use super::{Target, internal, strip_for_list};
use crate::apiserver::continue_token;
use crate::apiserver::query::Query;
use crate::apiserver::selector::{FieldSelector, LabelSelector};
use crate::apiserver::state::ApiState;
use crate::apiserver::status::ApiError;
use crate::apiserver::storage::{Page, StorageError};

/// GET of one object.
///
/// # Errors
/// 404 when absent.
pub async fn get(st: &ApiState, t: &Target) -> Result<Value, ApiError> {
    match st.storage.get(&t.key()).await.map_err(internal)? {
        Some(s) => Ok(s.value),
        None => Err(ApiError::not_found(
            t.info.gr(),
            t.name.as_deref().unwrap_or(""),
        )),
    }
}

/// Parses the selectors of a list or watch.
///
/// # Errors
/// 400 for malformed selectors.
pub fn selectors(t: &Target) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(t.query.get("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(
        t.query.get("fieldSelector").unwrap_or(""),
        &t.info.field_labels,
    )
    .map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

/// Parses a resourceVersion parameter.
///
/// # Errors
/// 400 for a non-numeric value.
pub fn parse_rv(s: &str) -> Result<i64, ApiError> {
    s.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
        ApiError::bad_request(format!(
            "resourceVersion: Invalid value: \"{s}\": strconv.ParseUint: parsing \"{s}\": invalid syntax"
        ))
    })
}

/// LIST of a collection: selectors, limit/continue on a consistent etcd snapshot, resourceVersion semantics.
///
/// # Errors
/// 400 for bad parameters, 410 for a compacted continue/exact revision.
pub async fn list(st: &ApiState, t: &Target) -> Result<Value, ApiError> {
    let info = &t.info;
    let (labels, fields) = selectors(t)?;
    let prefix = info.collection_prefix(t.namespace.as_deref());
    let prefix_base = prefix.trim_end_matches('/');
    let from = Window::of(t, prefix_base)?;
    let keep = |v: &Value| labels.matches(v) && fields.matches(v);
    let page = match st
        .storage
        .list_page(&prefix, from.start.as_deref(), from.at, from.limit, keep)
        .await
    {
        Ok(p) => p,
        Err(StorageError::Compacted) if t.query.get("continue").is_some() => {
            return Err(continue_expired(&from, prefix_base));
        }
        Err(e) => return Err(internal(e)),
    };
    let filtered = !labels.is_empty() || !fields.is_empty();
    Ok(list_body(t, page, prefix_base, filtered))
}

/// Where a list page starts and what it reads: from the query's `continue`, `resourceVersion`,
/// `resourceVersionMatch` and `limit`.
struct Window {
    /// The etcd key to start at (a continue token's), else the collection's start.
    start: Option<String>,
    /// The revision to read at, else the latest.
    at: Option<i64>,
    /// At most this many items, else all.
    limit: Option<usize>,
}

impl Window {
    fn of(t: &Target, prefix_base: &str) -> Result<Self, ApiError> {
        let mut limit = parse_limit(&t.query)?;
        let rv_param = t.query.get("resourceVersion").unwrap_or("");
        let mut at = None;
        let mut start = None;
        if let Some(c) = t.query.get("continue").filter(|c| !c.is_empty()) {
            let tok = continue_token::decode(c).map_err(ApiError::bad_request)?;
            let rel = if tok.start.starts_with('/') {
                tok.start.clone()
            } else {
                format!("/{}", tok.start)
            };
            start = Some(format!("{prefix_base}{rel}"));
            if tok.rv > 0 {
                at = Some(tok.rv);
            }
        } else if rv_param == "0" {
            // Upstream serves `resourceVersion=0` from its cache and ignores the limit.
            limit = None;
        } else if !rv_param.is_empty() {
            let rv = parse_rv(rv_param)?;
            if t.query.get("resourceVersionMatch") == Some("Exact") {
                at = Some(rv);
            }
        }
        Ok(Window {
            start,
            at,
            limit: limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
        })
    }
}

fn parse_limit(q: &Query) -> Result<Option<i64>, ApiError> {
    match q.get("limit") {
        None | Some("") => Ok(None),
        Some(s) => match s.parse::<i64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            Ok(_) => Ok(None),
            Err(_) => Err(ApiError::bad_request(format!(
                "strconv.ParseInt: parsing \"{s}\": invalid syntax"
            ))),
        },
    }
}

/// 410 for a continue token whose revision is compacted, carrying a token (revision -1) that
/// resumes from the same key at the latest revision, as upstream's.
fn continue_expired(from: &Window, prefix_base: &str) -> ApiError {
    let rel = from
        .start
        .as_deref()
        .unwrap_or("")
        .strip_prefix(prefix_base)
        .unwrap_or("")
        .trim_start_matches('/');
    let token = continue_token::encode(-1, rel);
    ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.").with_metadata(json!({"continue": token}))
}

/// The List object of a page: its revision, a continue token when more follow and, for unfiltered
/// lists only (as upstream), how many remain.
fn list_body(t: &Target, page: Page, prefix_base: &str, filtered: bool) -> Value {
    let info = &t.info;
    let mut md = json!({"resourceVersion": page.rev.to_string()});
    if let Some(more) = &page.more {
        let k = &more.last_key;
        let rel = k.strip_prefix(prefix_base).unwrap_or(k);
        md["continue"] = json!(continue_token::encode(page.rev, &format!("{rel}\u{0}")));
        if !filtered {
            md["remainingItemCount"] = json!(more.remaining);
        }
    }
    let items: Vec<Value> = page
        .items
        .into_iter()
        .map(|s| strip_for_list(info, s.value))
        .collect();
    json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": md, "items": items})
}
