//! HTTP watch streams: initial events, resume from a resourceVersion through the watch cache, selectors with
//! match transitions, bookmarks, timeouts, 410 as an ERROR event — newline-delimited JSON like upstream.
//! Events that are ready together go out in one write, as upstream flushes only once its queue is empty.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::objects::{Target, parse_rv, selectors};
use super::render::Render;
use super::state::ApiState;
use super::status::ApiError;
use super::watch_cache::{Event, EventKind};

/// Events already queued are written together up to this many bytes.
const COALESCE_BYTES: usize = 64 * 1024;

/// Appends `{"type":<kind>,"object":<object_json>}` and a newline: the watch event as upstream writes it.
fn push_line(buf: &mut Vec<u8>, kind: &str, object_json: &[u8]) {
    buf.reserve(object_json.len() + kind.len() + 22);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(kind.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    buf.extend_from_slice(object_json);
    buf.extend_from_slice(b"}\n");
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut b = Vec::new();
    push_line(
        &mut b,
        kind,
        &serde_json::to_vec(object).unwrap_or_default(),
    );
    Bytes::from(b)
}

/// An object of the initial events, rendered for the watch (whole objects without a copy).
fn rendered_json(render: &Render, info: &super::registry::ResourceInfo, obj: &Value) -> Vec<u8> {
    match render {
        Render::Full => serde_json::to_vec(obj),
        _ => serde_json::to_vec(&render.object(info, obj)),
    }
    .unwrap_or_default()
}

/// Starts a watch response.
///
/// # Errors
/// 400 for bad parameters, 422 for sendInitialEvents without resourceVersionMatch=NotOlderThan.
pub async fn watch(st: &ApiState, t: &Target, render: Render) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(t)?;
    let q = &t.query;
    let send_initial = q.get("sendInitialEvents").map(|v| v == "true");
    let bookmarks = q.flag("allowWatchBookmarks");
    let rv_param = q.get("resourceVersion").unwrap_or("").to_string();
    if send_initial.is_some() && q.get("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![super::status::Cause::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled and resourceVersionMatch is set to NotOlderThan",
            )],
        ));
    }
    let from = if rv_param.is_empty() || rv_param == "0" {
        None
    } else {
        Some(parse_rv(&rv_param)?)
    };
    let initial = match send_initial {
        Some(b) => b,
        None => from.is_none(),
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let prefix = t.info.collection_prefix(t.namespace.as_deref());
    let pinned = t.name.clone();
    let info = t.info.clone();
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let st2 = st.clone();
    let matches = move |o: &Value| {
        labels.matches(o)
            && fields.matches(o)
            && pinned.as_deref().is_none_or(|n| super::meta::name(o) == n)
    };

    // Initial state and the subscription are taken before the response starts so a too-old revision is known.
    let mut initial_items = Vec::new();
    let start_rev;
    if initial || from.is_none() {
        let page = st
            .storage
            .list(&prefix, None, None)
            .await
            .map_err(super::objects::internal)?;
        start_rev = page.rev.max(from.unwrap_or(0));
        if initial {
            initial_items = page
                .items
                .into_iter()
                .map(|s| s.value)
                .filter(|v| matches(v))
                .collect();
        }
    } else {
        start_rev = from.unwrap_or(0);
    }
    let sub = st.cache.subscribe(&prefix, start_rev);
    let bookmark_every = st.bookmark_interval;
    let cancel = st.cancel.child_token();
    tokio::spawn(async move {
        let send = |b: Bytes| {
            let tx = tx.clone();
            async move { tx.send(Ok(b)).await.is_ok() }
        };
        let mut sub = match sub {
            Ok(s) => s,
            Err(too_old) => {
                let status = ApiError::expired(too_old.to_string()).status_json();
                let _ = send(line("ERROR", &status)).await;
                return;
            }
        };
        for obj in &initial_items {
            let mut b = Vec::new();
            push_line(&mut b, "ADDED", &rendered_json(&render, &info, obj));
            if !send(Bytes::from(b)).await {
                return;
            }
        }
        if send_initial == Some(true) && bookmarks {
            let bm = json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": {"resourceVersion": start_rev.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
            if !send(line("BOOKMARK", &bm)).await {
                return;
            }
        }
        let mut last = start_rev;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + bookmark_every, bookmark_every);
        let backlog: Vec<Arc<Event>> = std::mem::take(&mut sub.backlog);
        let mut buf = Vec::new();
        for e in backlog {
            convert(&mut buf, &e, &prefix, last, &matches, &render, &info);
            last = last.max(e.rev);
            if buf.len() >= COALESCE_BYTES && !send(Bytes::from(std::mem::take(&mut buf))).await {
                return;
            }
        }
        if !buf.is_empty() && !send(Bytes::from(buf)).await {
            return;
        }
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = &mut deadline => return,
                _ = tx.closed() => return,
                _ = tick.tick(), if bookmarks => {
                    let rev = st2.cache.revision().max(last);
                    let bm = json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": {"resourceVersion": rev.to_string()}});
                    if !send(line("BOOKMARK", &bm)).await {
                        return;
                    }
                }
                ev = sub.live.recv() => match ev {
                    Some(e) => {
                        // This event and those queued behind it, in one write.
                        let mut buf = Vec::new();
                        convert(&mut buf, &e, &prefix, last, &matches, &render, &info);
                        last = last.max(e.rev);
                        while buf.len() < COALESCE_BYTES {
                            let Ok(e) = sub.live.try_recv() else { break };
                            convert(&mut buf, &e, &prefix, last, &matches, &render, &info);
                            last = last.max(e.rev);
                        }
                        if !buf.is_empty() && !send(Bytes::from(buf)).await {
                            return;
                        }
                    }
                    None if sub.lagged() => {
                        let status = ApiError::expired(format!("too old resource version: {last} ({})", last + 1)).status_json();
                        let _ = send(line("ERROR", &status)).await;
                        return;
                    }
                    None => return,
                },
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut resp = Response::new(Body::from_stream(stream));
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

/// Appends the line `e` makes for this watcher, if any: its type follows the selector transition, and
/// a whole object is the event's shared encoding.
fn convert(
    buf: &mut Vec<u8>,
    e: &Event,
    prefix: &str,
    last: i64,
    matches: &impl Fn(&Value) -> bool,
    render: &Render,
    info: &super::registry::ResourceInfo,
) {
    if !e.key.starts_with(prefix) || e.rev <= last {
        return;
    }
    let now = matches(&e.object);
    let before = e.prev.as_deref().is_some_and(matches);
    let kind = match e.kind {
        EventKind::Deleted if before || now => "DELETED",
        EventKind::Deleted => return,
        EventKind::Added if now => "ADDED",
        EventKind::Modified if now && before => "MODIFIED",
        EventKind::Modified if now => "ADDED",
        EventKind::Modified if before => "DELETED",
        _ => return,
    };
    match render {
        Render::Full => push_line(buf, kind, e.object_json()),
        _ => push_line(
            buf,
            kind,
            &serde_json::to_vec(&render.object(info, &e.object)).unwrap_or_default(),
        ),
    }
}
