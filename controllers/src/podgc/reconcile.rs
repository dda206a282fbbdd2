//! One pass of the pod GC (upstream `gc`), run by the anchor namespace's key: list pods and nodes
//! from the cache, remove the terminated pods over the threshold, the terminating pods of
//! out-of-service nodes, the orphans of nodes gone for a whole quarantine (re-checked live) and the
//! terminating pods never scheduled, then come back after [`PERIOD`] — or sooner, when a quarantine
//! ends first.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_sdk::k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube::api::Api;
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, Request};
use futures::StreamExt;

use super::anchor::{ANCHOR_NAMESPACE, runs_the_pass};
use super::choice::{
    NodeState, missing_nodes, orphaned, terminated_over_threshold, terminating_out_of_service,
    unscheduled_terminating,
};
use super::quarantine::Quarantine;
use super::removal::{Disruption, NODE_GONE, remove};

/// How often the pass runs (upstream's `gcCheckPeriod`).
pub const PERIOD: Duration = Duration::from_secs(20);

/// How many pods of one group are removed at once. Upstream starts them all together; the worker's
/// API rate limiter paces them either way, and a bound keeps a pass over thousands of pods from
/// holding thousands of requests in flight.
const PARALLEL_REMOVALS: usize = 32;

/// Errors of one pass; the key is retried with the fleet's rate limiter. A pod that cannot be
/// removed is not an error of the pass: it is logged and tried again at the next pass, as upstream.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache could not list namespaces, pods or nodes.
    #[error("cannot read the cache")]
    Cache(#[source] CacheError),
}

/// What the pod GC keeps between passes on this worker.
#[derive(Debug)]
pub struct PodGc {
    /// `--terminated-pod-gc-threshold`.
    threshold: i32,
    /// The missing nodes' quarantine; the mutex is never held across an await.
    quarantine: Mutex<Quarantine>,
}

impl PodGc {
    /// A pod GC keeping at most `threshold` terminated pods (0 or less: no limit).
    pub fn new(threshold: i32) -> Self {
        Self {
            threshold,
            quarantine: Mutex::new(Quarantine::default()),
        }
    }

    fn quarantine(&self) -> std::sync::MutexGuard<'_, Quarantine> {
        // A panic elsewhere cannot leave the map half-updated in a way that matters: at worst a node
        // waits one more quarantine.
        self.quarantine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs the pass if `request` is the anchor namespace's key; every other namespace key is done at
/// once.
///
/// # Errors
/// [`Error::Cache`] when the cache cannot be read.
pub async fn reconcile(
    request: Request<Namespace>,
    ctx: Context,
    gc: Arc<PodGc>,
) -> Result<Action, Error> {
    if request.object().is_none() || !is_anchor(&request, &ctx).await? {
        return Ok(Action::await_change());
    }
    let cache = ctx.cache();
    let pods: Vec<Pod> = cache.list(&CacheQuery::all()).await.map_err(Error::Cache)?;
    let nodes: BTreeMap<String, NodeState> = cache
        .list::<Node>(&CacheQuery::all())
        .await
        .map_err(Error::Cache)?
        .iter()
        .filter_map(|n| Some((n.metadata.name.clone()?, NodeState::of(n))))
        .collect();

    let mut pass = Pass::new(&ctx);
    pass.remove(terminated_over_threshold(&pods, gc.threshold), None)
        .await;
    pass.remove(terminating_out_of_service(&pods, &nodes), None)
        .await;
    let due = gc
        .quarantine()
        .observe(&missing_nodes(&pods, &nodes), Instant::now());
    let deleted = deleted_nodes(&ctx, due).await;
    pass.remove(orphaned(&pods, &deleted), Some(NODE_GONE))
        .await;
    pass.remove(unscheduled_terminating(&pods), None).await;

    let next = gc
        .quarantine()
        .next_due(Instant::now())
        .map_or(PERIOD, |due| due.min(PERIOD));
    Ok(Action::requeue(next))
}

/// Whether this namespace's key runs the pass (see [`super::anchor`]).
async fn is_anchor(request: &Request<Namespace>, ctx: &Context) -> Result<bool, Error> {
    if request.name() == ANCHOR_NAMESPACE {
        return Ok(true);
    }
    let cache = ctx.cache();
    let anchor_cached = cache
        .get::<Namespace>(None, ANCHOR_NAMESPACE)
        .await
        .map_err(Error::Cache)?
        .is_some();
    let first = if anchor_cached {
        None
    } else {
        cache
            .list::<Namespace>(&CacheQuery::all())
            .await
            .map_err(Error::Cache)?
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .min()
    };
    Ok(runs_the_pass(
        request.name(),
        anchor_cached,
        first.as_deref(),
    ))
}

/// The nodes among `due` that the API says are gone (upstream `checkIfNodeExists`); a node that
/// cannot be read is left for a later pass.
async fn deleted_nodes(ctx: &Context, due: BTreeSet<String>) -> BTreeSet<String> {
    let nodes: Api<Node> = Api::all(ctx.client());
    let mut deleted = BTreeSet::new();
    for name in due {
        match nodes.get_opt(&name).await {
            Ok(None) => {
                deleted.insert(name);
            }
            Ok(Some(_)) => {}
            Err(err) => tracing::warn!(node = %name, error = %err, "error while getting node"),
        }
    }
    deleted
}

/// The removals of one pass: each pod at most once, though it may qualify in several groups.
struct Pass<'a> {
    ctx: &'a Context,
    now: Timestamp,
    done: BTreeSet<String>,
}

impl<'a> Pass<'a> {
    fn new(ctx: &'a Context) -> Self {
        Self {
            ctx,
            now: Timestamp::now(),
            done: BTreeSet::new(),
        }
    }

    /// Removes `pods` (with the `disruption` condition when given) but those removed earlier in the
    /// pass; failures are logged.
    async fn remove(&mut self, pods: Vec<&Pod>, disruption: Option<Disruption>) {
        let fresh: Vec<&Pod> = pods
            .into_iter()
            .filter(|p| {
                let meta = &p.metadata;
                let key = format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                );
                self.done.insert(key)
            })
            .collect();
        if fresh.is_empty() {
            return;
        }
        tracing::info!(pods = fresh.len(), "garbage collecting pods");
        let client = self.ctx.client();
        let now = self.now;
        futures::stream::iter(fresh)
            .for_each_concurrent(PARALLEL_REMOVALS, |pod| {
                let client = client.clone();
                async move {
                    if let Err(err) = remove(client, pod, disruption, now).await {
                        tracing::warn!(error = %err, cause = %source_of(&err), "pod gc failed");
                    }
                }
            })
            .await;
    }
}

fn source_of(err: &dyn std::error::Error) -> String {
    err.source().map(ToString::to_string).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::MemoryCache;
    use flotilla_sdk::kube::client::Body;
    use http::{Method, Request as HttpRequest, Response};
    use serde_json::{Value, json};

    use super::*;

    /// (method, path, body) of each request the mock API answered.
    type Seen = Arc<Mutex<Vec<(Method, String, Value)>>>;

    /// A mock API that records each request and answers it with a pod.
    fn api(seen: Seen) -> flotilla_sdk::kube::Client {
        let service = tower::service_fn(move |request: HttpRequest<Body>| {
            let seen = seen.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await?;
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                seen.lock().unwrap_or_else(PoisonError::into_inner).push((
                    parts.method.clone(),
                    parts.uri.path().to_owned(),
                    body,
                ));
                let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Response::new(Body::from(
                    serde_json::to_vec(&pod)?,
                )))
            }
        });
        flotilla_sdk::kube::Client::new(service, "default")
    }

    fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
        serde_json::from_value(value).unwrap()
    }

    fn pod(name: &str, second: u32, phase: &str, node: Option<&str>) -> Pod {
        let mut pod = json!({
            "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}"),
                "creationTimestamp": format!("2026-11-26T10:00:0{second}Z")},
            "spec": {"containers": []},
            "status": {"phase": phase},
        });
        match node {
            Some(node) => pod["spec"]["nodeName"] = json!(node),
            None => pod["metadata"]["deletionTimestamp"] = json!("2026-11-26T10:00:09Z"),
        }
        object(pod)
    }

    fn cache() -> MemoryCache {
        let ready = json!({"metadata": {"name": "n1"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        MemoryCache::default()
            .with(&object::<Namespace>(
                json!({"metadata": {"name": "kube-system"}}),
            ))
            .with(&object::<Namespace>(json!({"metadata": {"name": "team"}})))
            .with(&object::<Node>(ready))
            .with(&pod("old", 1, "Succeeded", Some("n1")))
            .with(&pod("mid", 2, "Succeeded", Some("n1")))
            .with(&pod("new", 3, "Failed", Some("n1")))
            .with(&pod("bound", 0, "Running", Some("n1")))
            // Being deleted, never scheduled.
            .with(&pod("stuck", 0, "Pending", None))
    }

    async fn run(namespace: &str) -> (Action, Vec<(Method, String, Value)>) {
        let seen: Seen = Arc::default();
        let cache = cache();
        let ns: Namespace = object(json!({"metadata": {"name": namespace}}));
        let ctx = Context::for_test()
            .client(api(seen.clone()))
            .cache(cache)
            .build();
        let request = Request::new(None, namespace).with_object(ns);
        let action = reconcile(request, ctx, Arc::new(PodGc::new(2)))
            .await
            .unwrap();
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        (action, seen)
    }

    #[tokio::test]
    async fn the_anchor_deletes_the_oldest_terminated_pod_and_fails_then_deletes_a_stuck_one() {
        let (action, seen) = run("kube-system").await;
        assert_eq!(action, Action::requeue(PERIOD));
        let calls: Vec<(Method, &str)> = seen
            .iter()
            .map(|(method, path, _)| (method.clone(), path.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                (Method::DELETE, "/api/v1/namespaces/team/pods/old"),
                (Method::PATCH, "/api/v1/namespaces/team/pods/stuck/status"),
                (Method::DELETE, "/api/v1/namespaces/team/pods/stuck"),
            ]
        );
        assert_eq!(seen[0].2, json!({"gracePeriodSeconds": 0}));
        assert_eq!(
            seen[1].2,
            json!({"metadata": {"uid": "uid-stuck"}, "status": {"phase": "Failed"}})
        );
        assert_eq!(seen[2].2, json!({"gracePeriodSeconds": 0}));
    }

    #[tokio::test]
    async fn any_other_namespace_key_is_done_at_once() {
        let (action, seen) = run("team").await;
        assert_eq!(action, Action::await_change());
        assert!(seen.is_empty(), "{seen:?}");
    }
}
