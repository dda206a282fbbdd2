//! Streaming lists (WatchList: a watch with `sendInitialEvents=true`), used where the API server
//! offers them and paged LISTs where it does not, decided per server by asking it.
//!
//! A streamed list sends the initial objects one by one on the watch that follows them, ending with a
//! bookmark annotated `k8s.io/initial-events-end`, so the API server never builds a whole list in
//! memory and the informer never holds a page of 500. kube-apiserver v1.32 serves it by default (the
//! `WatchList` feature is beta and on); older servers, or servers with the feature off, refuse the
//! parameters (422) or ignore them (no such bookmark). [`server_streams_lists`] asks once, with a watch
//! that matches no object, and only an answer that carries the bookmark counts as yes.
//!
//! The initial list must be a consistent read, as a LIST with `resourceVersion` unset is: a new
//! leader's cache must show every write that finished before its term began. kube-runtime's streaming
//! mode asks for `resourceVersion=0` (any version the server's cache holds, possibly older); the
//! fleet's Kubernetes clients take that parameter out of streaming watches
//! (`flotilla_common::consistent_watch_lists`).

use std::time::Duration;

use flotilla_common::ResourceKind;
use futures::{AsyncBufReadExt, TryStreamExt};
use kube::api::{DynamicObject, WatchParams};

/// The annotation of the bookmark that ends a streamed list.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How long the probe waits for the API server to end its (empty) streamed list.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether the API server streams lists: a watch of `kind` with `sendInitialEvents=true` that matches
/// no object must answer with the bookmark that ends the initial events. Any error, a stream that
/// ends or stays silent for [`PROBE_TIMEOUT`] without it, means no. A namespaced kind is asked in the
/// `default` namespace only: a server may read every object of the collection to find that none
/// matches, and one namespace keeps that small however large the cluster.
pub(crate) async fn server_streams_lists(client: &kube::Client, kind: &ResourceKind) -> bool {
    let namespace = kind.namespaced.then_some("default");
    let url = <DynamicObject as kube::Resource>::url_path(&kind.api_resource(), namespace);
    // Timeouts fit a u32 of seconds.
    let params = WatchParams::streaming_lists()
        .fields("metadata.name=flotilla-watch-list-probe")
        .timeout(PROBE_TIMEOUT.as_secs() as u32);
    let probe = async {
        let request = kube::core::Request::new(url).watch(&params, "").ok()?;
        let lines = client.request_stream(request).await.ok()?.lines();
        futures::pin_mut!(lines);
        while let Some(line) = lines.try_next().await.ok()? {
            if ends_initial_events(&line) {
                return Some(());
            }
        }
        None
    };
    let streams = tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .ok()
        .flatten()
        .is_some();
    tracing::info!(%kind, streams, "asked the API server whether it streams lists (WatchList)");
    streams
}

/// Whether a watch event line is the bookmark that ends the initial events.
fn ends_initial_events(line: &str) -> bool {
    let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
        return false;
    };
    event["type"] == "BOOKMARK"
        && event["object"]["metadata"]["annotations"][INITIAL_EVENTS_END] == "true"
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bookmark_that_ends_the_initial_events_counts() {
        assert!(ends_initial_events(
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#
        ));
        assert!(!ends_initial_events(
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#
        ));
        assert!(!ends_initial_events(
            r#"{"type":"ADDED","object":{"metadata":{"annotations":{"k8s.io/initial-events-end":"true"}}}}"#
        ));
        assert!(!ends_initial_events("not json"));
    }
}
