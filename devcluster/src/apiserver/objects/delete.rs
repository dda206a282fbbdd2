//! DELETE of one object and of a collection. A delete is planned from the stored object and the
//! request's options — preconditions (uid, resourceVersion), the namespace lifecycle, a bound pod's
//! grace period, the propagation policy's finalizer — into one of: nothing to do, mark the object
//! (deletionTimestamp, finalizers) and keep it, or remove it; the plan is then written with a
//! compare-and-swap on the revision read and re-planned when another writer wins.

use serde_json::{Value, json};

use super::get_list::selectors;
use super::{
    MAX_ATTEMPTS, Target, after_removal, bump_generation, internal, namespace_spec_finalizers,
    reorder_metadata, strip_for_list, too_many_conflicts,
};
use crate::apiserver::query::Query;
use crate::apiserver::registry::{GcDefault, ResourceInfo};
use crate::apiserver::state::ApiState;
use crate::apiserver::status::{ApiError, Cause};
use crate::apiserver::storage::Stored;
use crate::apiserver::{crd, meta};

/// DELETE options from the query and the optional DeleteOptions body.
#[derive(Debug, Clone)]
pub struct DeleteOptions {
    propagation: Option<String>,
    grace: Option<i64>,
    uid: Option<String>,
    rv: Option<String>,
}

impl DeleteOptions {
    /// Reads options from the query and body (body wins for preconditions, query for the rest when both).
    ///
    /// # Errors
    /// 400 for an unparsable body, 422 for an unknown propagation policy.
    pub fn parse(q: &Query, body: &[u8]) -> Result<Self, ApiError> {
        let b: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
        };
        let orphan = q
            .get("orphanDependents")
            .map(|v| v == "true")
            .or_else(|| b["orphanDependents"].as_bool());
        let propagation = q
            .get("propagationPolicy")
            .map(String::from)
            .or_else(|| b["propagationPolicy"].as_str().map(String::from))
            .or_else(|| orphan.map(|o| if o { "Orphan" } else { "Background" }.to_string()));
        if let Some(p) = &propagation
            && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
        {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                vec![Cause::not_supported(
                    "propagationPolicy",
                    &json!(p),
                    &["Foreground", "Background", "Orphan", "nil"],
                )],
            ));
        }
        let grace = q
            .get("gracePeriodSeconds")
            .and_then(|g| g.parse().ok())
            .or_else(|| b["gracePeriodSeconds"].as_i64());
        Ok(DeleteOptions {
            propagation,
            grace,
            uid: b["preconditions"]["uid"].as_str().map(String::from),
            rv: b["preconditions"]["resourceVersion"]
                .as_str()
                .map(String::from),
        })
    }

    /// The `preconditions.resourceVersion`, if any.
    pub fn resource_version(&self) -> Option<&str> {
        self.rv.as_deref()
    }

    /// The same options with `preconditions.resourceVersion` set to `rv` (the eviction subresource
    /// pins the pod it checked this way).
    pub fn with_resource_version(mut self, rv: String) -> Self {
        self.rv = Some(rv);
        self
    }

    /// The `preconditions.uid`, if any.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }
}

/// DELETE of one object: preconditions, finalizers, propagation policy, graceful pods, namespace lifecycle.
/// Returns the body to send (the object when it is only marked or graceful, else a Success Status).
///
/// # Errors
/// 404 when absent, 409 on failed preconditions or too many lost races.
pub async fn delete(st: &ApiState, t: &Target, opts: &DeleteOptions) -> Result<Value, ApiError> {
    let info = &t.info;
    let name = t.object_name();
    let key = t.key();
    for _ in 0..MAX_ATTEMPTS {
        let Some(cur) = st.storage.get(&key).await.map_err(internal)? else {
            return Err(ApiError::not_found(info.gr(), &name));
        };
        check_preconditions(info, &name, opts, &cur)?;
        let plan = if info.namespace_lifecycle {
            plan_namespace(&cur.value)
        } else if info.group == "apiextensions.k8s.io"
            && info.resource == "customresourcedefinitions"
        {
            return crd::delete(st, t, &key, cur.value, cur.rev).await;
        } else {
            plan_object(info, opts, &cur.value)
        };
        if let Some(answer) = carry_out(st, t, &key, &cur, plan).await? {
            return Ok(answer);
        }
    }
    Err(too_many_conflicts(info, &name))
}

/// The body's `preconditions`: the stored uid and resourceVersion must be the ones given (409).
fn check_preconditions(
    info: &ResourceInfo,
    name: &str,
    opts: &DeleteOptions,
    cur: &Stored,
) -> Result<(), ApiError> {
    let have_uid = cur.value["metadata"]["uid"].as_str();
    if let Some(uid) = &opts.uid
        && have_uid != Some(uid)
    {
        return Err(ApiError::conflict(
            info.gr(),
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                have_uid.unwrap_or("")
            ),
        ));
    }
    if let Some(rv) = &opts.rv
        && *rv != cur.rev.to_string()
    {
        return Err(ApiError::conflict(
            info.gr(),
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                cur.rev
            ),
        ));
    }
    Ok(())
}

/// What a delete does to the stored object.
enum Plan {
    /// Nothing: the object is already marked as this delete would mark it (answered with it).
    Unchanged,
    /// Store the marked object (deletionTimestamp, grace period, finalizers) and keep it.
    Mark(Value),
    /// Remove the object from storage.
    Remove,
    /// Store the grace-0 mark, then remove it (pods: watchers see MODIFIED, then DELETED).
    MarkThenRemove(Value),
}

/// A namespace: the first delete marks it Terminating; a later one removes it once no finalizer
/// (metadata or spec) is left, else changes nothing.
fn plan_namespace(current: &Value) -> Plan {
    if !meta::deleting(current) {
        let mut new = current.clone();
        meta::set(&mut new, "deletionTimestamp", json!(meta::now()));
        meta::set(&mut new, "deletionGracePeriodSeconds", json!(0));
        new["status"]["phase"] = json!("Terminating");
        Plan::Mark(new)
    } else if !namespace_spec_finalizers(current) && meta::finalizers(current).is_empty() {
        Plan::Remove
    } else {
        Plan::Unchanged
    }
}

/// Any other object: a bound pod with a grace period is marked for later; an object with
/// finalizers (its own or the propagation policy's) is marked; anything else is removed.
fn plan_object(info: &ResourceInfo, opts: &DeleteOptions, current: &Value) -> Plan {
    let grace = grace_period(info, opts, current);
    let fins = finalizers_after(info, opts, current);
    let mut new = current.clone();
    if grace > 0 {
        let already = meta::deleting(current)
            && current["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .is_some_and(|g| g <= grace);
        if already {
            return Plan::Unchanged;
        }
        meta::set(&mut new, "deletionTimestamp", json!(meta::now_plus(grace)));
        meta::set(&mut new, "deletionGracePeriodSeconds", json!(grace));
        if !fins.is_empty() {
            meta::set(&mut new, "finalizers", json!(fins));
        }
        return Plan::Mark(new);
    }
    if !fins.is_empty() {
        if meta::deleting(current)
            && meta::finalizers(current) == fins
            && current["metadata"]["deletionGracePeriodSeconds"] == json!(0)
        {
            return Plan::Unchanged;
        }
        if !meta::deleting(current) {
            meta::set(&mut new, "deletionTimestamp", json!(meta::now()));
        }
        meta::set(&mut new, "deletionGracePeriodSeconds", json!(0));
        meta::set(&mut new, "finalizers", json!(fins));
        return Plan::Mark(new);
    }
    if !info.graceful_delete {
        return Plan::Remove;
    }
    if !meta::deleting(current) {
        meta::set(&mut new, "deletionTimestamp", json!(meta::now()));
    }
    meta::set(&mut new, "deletionGracePeriodSeconds", json!(0));
    Plan::MarkThenRemove(new)
}

/// The grace period of this delete: the request's, else the pod's `terminationGracePeriodSeconds`
/// (default 30), for a kind with graceful deletion whose object is bound to a node; else 0.
fn grace_period(info: &ResourceInfo, opts: &DeleteOptions, current: &Value) -> i64 {
    let bound = current["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    if !(info.graceful_delete && bound) {
        return 0;
    }
    opts.grace
        .unwrap_or_else(|| {
            current["spec"]["terminationGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(30)
        })
        .max(0)
}

/// The object's finalizers with the propagation policy's (`foregroundDeletion` or `orphan`; the
/// kind's default policy when the request names none). Switching policy replaces the other
/// propagation finalizer, as upstream does.
fn finalizers_after(info: &ResourceInfo, opts: &DeleteOptions, current: &Value) -> Vec<String> {
    let mut fins = meta::finalizers(current);
    let policy = opts
        .propagation
        .clone()
        .unwrap_or_else(|| match info.gc_default {
            GcDefault::Orphan => "Orphan".to_string(),
            GcDefault::Background => "Background".to_string(),
        });
    let wanted = match policy.as_str() {
        "Foreground" => Some("foregroundDeletion"),
        "Orphan" => Some("orphan"),
        _ => None,
    };
    if let Some(f) = wanted {
        if !fins.iter().any(|x| x == f) {
            fins.push(f.to_string());
        }
        fins.retain(|x| x == f || (x != "foregroundDeletion" && x != "orphan"));
    }
    fins
}

/// Writes `plan` over the object read as `cur`. Returns the answer, or None when another writer
/// won a compare-and-swap (the caller re-reads and re-plans).
async fn carry_out(
    st: &ApiState,
    t: &Target,
    key: &str,
    cur: &Stored,
    plan: Plan,
) -> Result<Option<Value>, ApiError> {
    let info = &t.info;
    let current = &cur.value;
    match plan {
        Plan::Unchanged => Ok(Some(current.clone())),
        Plan::Mark(new) if t.dry_run() => Ok(Some(new)),
        Plan::Mark(mut new) => {
            bump_generation(info, current, &mut new);
            reorder_metadata(&mut new);
            match st
                .storage
                .update(key, &new, cur.rev)
                .await
                .map_err(internal)?
            {
                Some(rev) => {
                    meta::set(&mut new, "resourceVersion", json!(rev.to_string()));
                    Ok(Some(new))
                }
                None => Ok(None),
            }
        }
        Plan::Remove if t.dry_run() => Ok(Some(success_status(info, current))),
        Plan::Remove => match st.storage.delete(key, cur.rev).await.map_err(internal)? {
            Some(_) => {
                after_removal(st, info, current).await;
                Ok(Some(if info.namespace_lifecycle {
                    current.clone()
                } else {
                    success_status(info, current)
                }))
            }
            None => Ok(None),
        },
        Plan::MarkThenRemove(new) if t.dry_run() => Ok(Some(new)),
        Plan::MarkThenRemove(mut new) => {
            let Some(marked) = st
                .storage
                .update(key, &new, cur.rev)
                .await
                .map_err(internal)?
            else {
                return Ok(None);
            };
            let Some(deleted) = st.storage.delete(key, marked).await.map_err(internal)? else {
                return Ok(None);
            };
            // The answer carries the deletion's revision, as upstream's does (fixtures kcm/40, 44):
            // a client waiting for its delete to be seen waits for the DELETED event, not the
            // grace-0 mark.
            meta::set(&mut new, "resourceVersion", json!(deleted.to_string()));
            reorder_metadata(&mut new);
            Ok(Some(new))
        }
    }
}

/// The Success Status a removal answers with.
fn success_status(info: &ResourceInfo, obj: &Value) -> Value {
    let mut details = json!({"name": meta::name(obj)});
    if !info.group.is_empty() {
        details["group"] = json!(info.group);
    }
    details["kind"] = json!(info.resource);
    details["uid"] = obj["metadata"]["uid"].clone();
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

/// DELETE on a collection: deletes every object matching the selectors (each like a single DELETE;
/// one deleted meanwhile is skipped). Answers the list of the objects as they were before.
///
/// # Errors
/// 400 for bad selectors, 500 on etcd trouble, the first failing delete's error.
pub async fn delete_collection(
    st: &ApiState,
    t: &Target,
    opts: &DeleteOptions,
) -> Result<Value, ApiError> {
    let info = &t.info;
    let (labels, fields) = selectors(t)?;
    let page = st
        .storage
        .list(&info.collection_prefix(t.namespace.as_deref()), None, None)
        .await
        .map_err(internal)?;
    let mut items = Vec::new();
    for s in page
        .items
        .into_iter()
        .filter(|s| labels.matches(&s.value) && fields.matches(&s.value))
    {
        let one = Target::new(
            info.clone(),
            Some(meta::namespace(&s.value).to_string()).filter(|n| !n.is_empty()),
            Some(meta::name(&s.value).to_string()),
            t.query.clone(),
            t.manager.clone(),
        );
        match delete(st, &one, opts).await {
            Ok(_) => items.push(strip_for_list(info, s.value)),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(
        json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": {"resourceVersion": page.rev.to_string()}, "items": items}),
    )
}
