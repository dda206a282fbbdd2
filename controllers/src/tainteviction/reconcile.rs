//! One reconcile of a node's key: read the node's `NoExecute` taints, decide each of its pods
//! ([`super::verdict`]), evict those due, record the evictions called off, and come back exactly
//! when the next pending one is due.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Pod};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, Request};
use futures::StreamExt;

use super::eviction::{EvictionError, already_evicted, evict, pod_key, record_cancelled};
use super::memory::Memory;
use super::tolerations::no_execute;
use super::verdict::{TimedTaint, Verdict, verdict};

/// The cache's built-in index of pods by `spec.nodeName`.
const NODE_NAME_INDEX: &str = "node-name";

/// How many pods of one node are evicted at once: a node holds about a hundred pods, and the
/// worker's API rate limiter paces them either way.
const PARALLEL_EVICTIONS: usize = 16;

/// Errors of one reconcile; the key is retried with the fleet's rate limiter, which decides every
/// pod again (an eviction is idempotent: a pod already evicted is skipped, see
/// [`already_evicted`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache could not list the node's pods.
    #[error("cannot list the pods of node {node}")]
    Cache {
        /// The node.
        node: String,
        /// Why.
        source: CacheError,
    },
    /// Some pods could not be evicted (the first failure; the others are logged).
    #[error("{failed} pod(s) could not be evicted")]
    Eviction {
        /// How many.
        failed: usize,
        /// The first failure.
        source: EvictionError,
    },
}

/// Decides every pod of the node `request` names.
///
/// # Errors
/// [`Error`] when the pods cannot be listed or some eviction failed.
pub async fn reconcile(
    request: Request<Node>,
    ctx: Context,
    memory: Arc<Memory>,
) -> Result<Action, Error> {
    let name = request.name().to_owned();
    let Some(node) = request.object() else {
        memory.forget(&name);
        return Ok(Action::await_change());
    };
    let now = Timestamp::now();
    let taints = no_execute(
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default(),
    );
    let since = memory.since(&name, &taints, now);
    if taints.is_empty() {
        // Upstream's short cut: every pending eviction is called off, nothing is listed.
        for pod in memory.settle(&name, BTreeSet::new(), &BTreeSet::new()) {
            record_cancelled(&ctx, &pod);
        }
        return Ok(Action::await_change());
    }
    let timed: Vec<TimedTaint<'_>> = taints
        .iter()
        .zip(since)
        .map(|(taint, since)| TimedTaint { taint, since })
        .collect();
    let pods: Vec<Pod> = ctx
        .cache()
        .list(&CacheQuery::all().index(NODE_NAME_INDEX, &name))
        .await
        .map_err(|source| Error::Cache {
            node: name.clone(),
            source,
        })?;

    let plan = Plan::of(&timed, &pods, now);
    for pod in memory.settle(&name, plan.pending, &plan.fired) {
        record_cancelled(&ctx, &pod);
    }
    evict_all(&ctx, plan.evict, now).await?;
    Ok(match plan.next {
        Some(next) => {
            Action::requeue(Duration::try_from(now.duration_until(next)).unwrap_or(Duration::ZERO))
        }
        None => Action::await_change(),
    })
}

/// What one reconcile does with a node's pods.
#[derive(Debug, Default)]
struct Plan<'a> {
    /// The pods to evict now.
    evict: Vec<&'a Pod>,
    /// Those of them whose time came (their timed eviction fires, so it is not called off).
    fired: BTreeSet<String>,
    /// The pods with a timed eviction pending.
    pending: BTreeSet<String>,
    /// When the first pending one is due.
    next: Option<Timestamp>,
}

impl<'a> Plan<'a> {
    fn of(taints: &[TimedTaint<'_>], pods: &'a [Pod], now: Timestamp) -> Self {
        let mut plan = Plan::default();
        for pod in pods {
            if already_evicted(pod) {
                continue;
            }
            match verdict(taints, pod, now) {
                Verdict::Keep => {}
                Verdict::Untolerated => plan.evict.push(pod),
                Verdict::Due => {
                    plan.fired.insert(pod_key(pod));
                    plan.evict.push(pod);
                }
                Verdict::At(at) => {
                    plan.pending.insert(pod_key(pod));
                    plan.next = Some(plan.next.map_or(at, |n| n.min(at)));
                }
            }
        }
        plan
    }
}

/// Evicts `pods`, a bounded number at once.
///
/// # Errors
/// [`Error::Eviction`] with the first failure, once every eviction was tried.
async fn evict_all(ctx: &Context, pods: Vec<&Pod>, now: Timestamp) -> Result<(), Error> {
    let owned: Vec<Pod> = pods.into_iter().cloned().collect();
    let results: Vec<Result<(), EvictionError>> = futures::stream::iter(owned)
        .map(|pod| {
            let ctx = ctx.clone();
            async move { evict(&ctx, &pod, now).await }
        })
        .buffer_unordered(PARALLEL_EVICTIONS)
        .collect()
        .await;
    let mut failures = results.into_iter().filter_map(Result::err);
    let Some(first) = failures.next() else {
        return Ok(());
    };
    let mut failed = 1;
    for err in failures {
        tracing::warn!(error = %err, cause = %source_of(&err), "eviction failed");
        failed += 1;
    }
    Err(Error::Eviction {
        failed,
        source: first,
    })
}

fn source_of(err: &dyn std::error::Error) -> String {
    err.source().map(ToString::to_string).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Mutex, PoisonError};

    use flotilla_sdk::MemoryCache;
    use flotilla_sdk::k8s_openapi::jiff::SignedDuration;
    use flotilla_sdk::kube::client::Body;
    use http::{Method, Request as HttpRequest, Response};
    use serde_json::{Value, json};

    use super::*;

    /// (method, path, body) of each pod request the mock API answered (Events aside: they are
    /// written in the background).
    type Seen = Arc<Mutex<Vec<(Method, String, Value)>>>;

    fn api(seen: Seen) -> flotilla_sdk::kube::Client {
        let service = tower::service_fn(move |request: HttpRequest<Body>| {
            let seen = seen.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await?;
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                if parts.uri.path().contains("/pods/") {
                    seen.lock().unwrap_or_else(PoisonError::into_inner).push((
                        parts.method.clone(),
                        parts.uri.path().to_owned(),
                        body,
                    ));
                }
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

    fn pod(name: &str, node: &str, tolerations: Value) -> Pod {
        object(json!({
            "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}"),
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node, "containers": [], "tolerations": tolerations},
        }))
    }

    fn tolerating(seconds: Option<i64>) -> Value {
        json!([{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}])
    }

    async fn run(node: Node, cache: MemoryCache) -> (Action, Vec<(Method, String, Value)>) {
        let seen: Seen = Arc::default();
        let ctx = Context::for_test()
            .client(api(seen.clone()))
            .cache(cache)
            .build();
        let name = node.metadata.name.clone().unwrap();
        let request = Request::new(None, &name).with_object(node);
        let action = reconcile(request, ctx, Arc::new(Memory::default()))
            .await
            .unwrap();
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        (action, seen)
    }

    #[tokio::test]
    async fn the_untolerating_pod_goes_now_and_the_key_comes_back_when_the_next_is_due() {
        let added = Timestamp::now() - SignedDuration::from_secs(2);
        let node: Node = object(json!({"metadata": {"name": "n1"}, "spec": {"taints": [
            {"key": "k", "effect": "NoExecute", "timeAdded": added.to_string()},
            {"key": "soft", "effect": "NoSchedule"},
        ]}}));
        let cache = MemoryCache::default()
            .with(&pod("untolerating", "n1", json!([])))
            .with(&pod("soon", "n1", tolerating(Some(60))))
            .with(&pod("forever", "n1", tolerating(None)))
            .with(&pod("elsewhere", "n2", json!([])));
        let (action, seen) = run(node, cache).await;
        let calls: Vec<(Method, &str)> = seen
            .iter()
            .map(|(m, p, _)| (m.clone(), p.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                (
                    Method::PATCH,
                    "/api/v1/namespaces/team/pods/untolerating/status"
                ),
                (Method::DELETE, "/api/v1/namespaces/team/pods/untolerating"),
            ]
        );
        assert_eq!(
            seen[0].2["status"]["conditions"][0]["reason"],
            "DeletionByTaintManager"
        );
        assert_eq!(
            seen[1].2["preconditions"],
            json!({"uid": "uid-untolerating"})
        );
        let after = action.requeue_after().unwrap();
        assert!(
            after > Duration::from_secs(55) && after <= Duration::from_secs(58),
            "requeued for the 60 s toleration's end, not polled: {after:?}"
        );
    }

    #[tokio::test]
    async fn a_node_without_no_execute_taints_lists_nothing_and_waits() {
        let node: Node = object(json!({"metadata": {"name": "n1"}, "spec": {"taints": [
            {"key": "soft", "effect": "NoSchedule"},
        ]}}));
        let cache = MemoryCache::default().with(&pod("untolerating", "n1", json!([])));
        let (action, seen) = run(node, cache).await;
        assert_eq!(action, Action::await_change());
        assert!(seen.is_empty(), "{seen:?}");
    }
}
