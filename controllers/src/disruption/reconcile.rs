//! One sync of a PodDisruptionBudget (upstream's `sync` / `trySync` / `failSafe`): read its pods
//! from the cache, count, write the status when it changed, reset stale `DisruptionTarget`
//! conditions of its pods, and requeue for the earliest expiry of an eviction or a pod's mark.

use std::sync::Arc;
use std::time::Duration;

use flotilla_sdk::apimachinery::{LabelSelector, SelectorError};
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube::api::{Api, PostParams};
use flotilla_sdk::kube::{self, ResourceExt};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, EventType, Request};

use super::super::events::publish;
use super::Timeouts;
use super::budget::{self, Counts, ScaleValueError};
use super::scale::{ScaleError, expected_scale};
use super::stale;

/// Errors of one sync. Except for a conflict, the budget's status was set to allow no disruption
/// (the fail-safe) before the key is retried with the fleet's rate limiter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The PDB has no namespace.
    #[error("poddisruptionbudget {0} lacks a namespace")]
    Incomplete(String),
    /// The PDB's selector does not parse.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// The pods could not be listed from the cache.
    #[error("cannot list pods")]
    Pods(#[source] CacheError),
    /// The pods' controllers could not be found or read.
    #[error(transparent)]
    Scale(#[from] ScaleError),
    /// `minAvailable` or `maxUnavailable` is not an int or a percentage.
    #[error(transparent)]
    Value(#[from] ScaleValueError),
    /// The status write failed (a 409 is retried without the fail-safe: the next sync sees the
    /// newer PDB).
    #[error("cannot update the status of poddisruptionbudget {name}")]
    Status {
        /// The PDB's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A stale `DisruptionTarget` condition could not be reset.
    #[error("cannot reset the DisruptionTarget condition of pod {name}")]
    Stale {
        /// The pod's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    fn is_conflict(&self) -> bool {
        matches!(self, Error::Status { source: kube::Error::Api(s), .. } if s.code == 409)
    }
}

/// Syncs one PDB at the wall clock's now.
///
/// # Errors
/// [`Error`]; the status then allows no disruption (see [`Error`]).
pub async fn reconcile(
    request: Request<PodDisruptionBudget>,
    ctx: Context,
    timeouts: Arc<Timeouts>,
) -> Result<Action, Error> {
    let Some(pdb) = request.object() else {
        return Ok(Action::await_change());
    };
    let namespace = request
        .namespace()
        .ok_or_else(|| Error::Incomplete(request.key().to_owned()))?
        .to_owned();
    let now = Timestamp::now();
    let pods = match pods_of(&ctx, &namespace, pdb).await {
        Ok(pods) => pods,
        Err(err) => {
            publish(
                &ctx,
                pdb.as_ref(),
                EventType::Warning,
                "NoPods",
                format!("Failed to get pods: {err}"),
            );
            return Err(fail_safe(&ctx, &namespace, pdb, err, now).await);
        }
    };
    if pods.is_empty() {
        publish(
            &ctx,
            pdb.as_ref(),
            EventType::Normal,
            "NoPods",
            "No matching pods found".to_owned(),
        );
    }
    let recheck = match sync(&ctx, &namespace, pdb, &pods, &timeouts, now).await {
        Ok(recheck) => recheck,
        Err(err) if err.is_conflict() => return Err(err),
        Err(err) => return Err(fail_safe(&ctx, &namespace, pdb, err, now).await),
    };
    let stale = clean_stale(&ctx, &namespace, &pods, &timeouts, now).await?;
    Ok(match earliest(recheck, stale) {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The pods of the PDB's namespace its selector matches (none for a PDB without a selector, every
/// pod for an empty one, as policy/v1 defines).
async fn pods_of(
    ctx: &Context,
    namespace: &str,
    pdb: &PodDisruptionBudget,
) -> Result<Vec<Pod>, Error> {
    let selector = match pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        Some(selector) => LabelSelector::from_label_selector(selector)?,
        None => LabelSelector::nothing(),
    };
    if selector.is_nothing() {
        return Ok(Vec::new());
    }
    let mut query = CacheQuery::all().namespace(namespace);
    if !selector.is_everything() {
        query = query.labels(&selector.to_string());
    }
    let pods: Vec<Pod> = ctx.cache().list(&query).await.map_err(Error::Pods)?;
    Ok(pods
        .into_iter()
        .filter(|p| selector.matches(p.labels()))
        .collect())
}

/// (expected pods, desired healthy, unmanaged pods) as upstream's `getExpectedPodCount`.
async fn expected(
    ctx: &Context,
    namespace: &str,
    pdb: &PodDisruptionBudget,
    pods: &[Pod],
) -> Result<(i32, i32, Vec<String>), Error> {
    let spec = pdb.spec.as_ref();
    let max_unavailable = spec.and_then(|s| s.max_unavailable.as_ref());
    let min_available = spec.and_then(|s| s.min_available.as_ref());
    let client = ctx.client();
    if let Some(max_unavailable) = max_unavailable {
        let (expected, unmanaged) = expected_scale(&client, namespace, pods).await?;
        let max = budget::scaled(max_unavailable, expected, true)?;
        return Ok((expected, (expected - max).max(0), unmanaged));
    }
    match min_available {
        Some(IntOrString::Int(n)) => Ok((count(pods.len()), *n, Vec::new())),
        Some(percent @ IntOrString::String(_)) => {
            let (expected, unmanaged) = expected_scale(&client, namespace, pods).await?;
            Ok((
                expected,
                budget::scaled(percent, expected, true)?,
                unmanaged,
            ))
        }
        None => Ok((0, 0, Vec::new())),
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Counts and writes the status; the time until the earliest recorded eviction expires.
async fn sync(
    ctx: &Context,
    namespace: &str,
    pdb: &Arc<PodDisruptionBudget>,
    pods: &[Pod],
    timeouts: &Timeouts,
    now: Timestamp,
) -> Result<Option<Duration>, Error> {
    let (expected, desired, unmanaged) = match expected(ctx, namespace, pdb, pods).await {
        Ok(counts) => counts,
        Err(err) => {
            publish(
                ctx,
                pdb.as_ref(),
                EventType::Warning,
                "CalculateExpectedPodCountFailed",
                format!("Failed to calculate the number of expected pods: {err}"),
            );
            return Err(err);
        }
    };
    if !unmanaged.is_empty() {
        tracing::debug!(pods = ?unmanaged, "unmanaged pods under a poddisruptionbudget");
        let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
        publish(
            ctx,
            pdb.as_ref(),
            EventType::Warning,
            "UnmanagedPods",
            format!(
                "Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged. \
                 As a result, the status of the PDB cannot be calculated correctly, which may result \
                 in undefined behavior. To account for these pods please set \".spec.minAvailable\" \
                 field of the PDB to an integer value.",
                go_selector(selector)
            ),
        );
    }
    let current = pdb.status.clone().unwrap_or_default();
    let disrupted = budget::disrupted(
        pods,
        current.disrupted_pods.as_ref(),
        now,
        timeouts.deletion,
    );
    for name in &disrupted.not_deleted {
        if let Some(pod) = pods.iter().find(|p| &p.name_any() == name) {
            // Upstream's message names the PDB's namespace twice (`pdb.Namespace, pdb.Namespace`);
            // kept so the Events read the same.
            publish(
                ctx,
                pod,
                EventType::Warning,
                "NotDeleted",
                format!(
                    "Pod was expected by PDB {namespace}/{namespace} to be deleted but it wasn't"
                ),
            );
        }
    }
    let healthy = budget::count_healthy(pods, &disrupted.pods, now, timeouts.deletion);
    let recheck = disrupted
        .recheck
        .map(|at| Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO));
    let counts = Counts {
        current_healthy: healthy,
        desired_healthy: desired,
        expected,
        disrupted: disrupted.pods,
    };
    if let Some(status) = budget::next_status(&current, pdb.metadata.generation, counts, now) {
        write_status(ctx, namespace, pdb, status).await?;
    }
    Ok(recheck)
}

/// Replaces the PDB's status, guarded by the resourceVersion it was read at.
async fn write_status(
    ctx: &Context,
    namespace: &str,
    pdb: &PodDisruptionBudget,
    status: flotilla_sdk::k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus,
) -> Result<(), Error> {
    let mut written = pdb.clone();
    written.status = Some(status);
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client(), namespace);
    api.replace_status(&pdb.name_any(), &PostParams::default(), &written)
        .await
        .map(|_| ())
        .map_err(|source| Error::Status {
            name: pdb.name_any(),
            source,
        })
}

/// Upstream's `failSafe`: no disruption allowed, reason `SyncFailed`; answers the error to retry
/// with (the write's own when it failed too).
async fn fail_safe(
    ctx: &Context,
    namespace: &str,
    pdb: &PodDisruptionBudget,
    err: Error,
    now: Timestamp,
) -> Error {
    tracing::warn!(error = %err, pdb = %pdb.name_any(), "failed to sync poddisruptionbudget");
    let current = pdb.status.clone().unwrap_or_default();
    let status = budget::fail_safe(&current, &err.to_string(), now);
    match write_status(ctx, namespace, pdb, status).await {
        Ok(()) => err,
        Err(write) => write,
    }
}

/// Resets the stale `DisruptionTarget` conditions among `pods`; the time until the next one goes
/// stale.
async fn clean_stale(
    ctx: &Context,
    namespace: &str,
    pods: &[Pod],
    timeouts: &Timeouts,
    now: Timestamp,
) -> Result<Option<Duration>, Error> {
    let mut next = None;
    let api: Api<Pod> = Api::namespaced(ctx.client(), namespace);
    for pod in pods {
        match stale::stale_in(pod, now, timeouts.stale_pod_disruption) {
            None => {}
            Some(wait) if !wait.is_zero() => next = earliest(next, Some(wait)),
            Some(_) => reset_stale(&api, &pod.name_any(), timeouts, now).await?,
        }
    }
    Ok(next)
}

/// Re-reads the pod live and, if its mark is still stale, writes it False, guarded by the
/// resourceVersion read.
async fn reset_stale(
    api: &Api<Pod>,
    name: &str,
    timeouts: &Timeouts,
    now: Timestamp,
) -> Result<(), Error> {
    let stale_error = |source| Error::Stale {
        name: name.to_owned(),
        source,
    };
    let live = match api.get_opt(name).await {
        Ok(Some(live)) => live,
        Ok(None) => return Ok(()),
        Err(source) => return Err(stale_error(source)),
    };
    if stale::stale_in(&live, now, timeouts.stale_pod_disruption) != Some(Duration::ZERO) {
        return Ok(());
    }
    tracing::debug!(pod = name, "resetting a stale DisruptionTarget condition");
    match api
        .replace_status(name, &PostParams::default(), &stale::reset(&live, now))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(stale_error(source)),
    }
}

/// A LabelSelector as Go's generated `String()` prints it (upstream's Events embed it with `%v`).
fn go_selector(selector: Option<&metav1::LabelSelector>) -> String {
    let Some(selector) = selector else {
        return "nil".to_owned();
    };
    let labels: String = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}: {v},"))
        .collect();
    let expressions: String = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|e| {
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                e.key,
                e.operator,
                e.values.clone().unwrap_or_default().join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use flotilla_sdk::MemoryCache;
    use flotilla_sdk::k8s_openapi::jiff::SignedDuration;
    use flotilla_sdk::kube::client::Body;
    use http::{Method, Request as HttpRequest, Response, StatusCode};
    use serde_json::{Value, json};

    use super::*;

    /// (method, path, body) of each request the mock API answered.
    type Seen = Arc<Mutex<Vec<(Method, String, Value)>>>;

    /// A mock API: GETs of pods answer `live_pod`, other GETs 404, writes echo their body.
    fn api(seen: Seen, live_pod: Value) -> kube::Client {
        let service = tower::service_fn(move |request: HttpRequest<Body>| {
            let (seen, live_pod) = (seen.clone(), live_pod.clone());
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await?;
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let path = parts.uri.path().to_owned();
                seen.lock()
                    .unwrap()
                    .push((parts.method.clone(), path.clone(), body.clone()));
                let (code, answer) = match parts.method {
                    Method::GET if path.contains("/pods/") => (StatusCode::OK, live_pod),
                    Method::GET => (
                        StatusCode::NOT_FOUND,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "NotFound", "code": 404, "message": "not found"}),
                    ),
                    _ => (StatusCode::OK, body),
                };
                let mut response = Response::new(Body::from(serde_json::to_vec(&answer)?));
                *response.status_mut() = code;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        kube::Client::new(service, "default")
    }

    fn ago(seconds: i64) -> String {
        Timestamp::now()
            .checked_sub(SignedDuration::from_secs(seconds))
            .unwrap()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    }

    fn pod(name: &str, owner: Option<&str>) -> Value {
        let mut p = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"}, "resourceVersion": "5"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        });
        if let Some(owner) = owner {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": owner, "uid": "rs-uid", "controller": true}]);
        }
        p
    }

    fn budget(min_available: Value, status: Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web-pdb", "namespace": "ns", "generation": 1, "resourceVersion": "9"},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "web"}}},
            "status": status,
        }))
        .unwrap()
    }

    async fn run(
        pdb: PodDisruptionBudget,
        pods: &[Value],
        timeouts: Timeouts,
    ) -> (Result<Action, Error>, Vec<(Method, String, Value)>) {
        let seen: Seen = Arc::default();
        let cache = pods.iter().fold(MemoryCache::default(), |cache, p| {
            cache.with(&serde_json::from_value::<Pod>(p.clone()).unwrap())
        });
        let ctx = Context::for_test()
            .client(api(
                seen.clone(),
                pods.first().cloned().unwrap_or(Value::Null),
            ))
            .cache(cache)
            .build();
        let request = Request::new(Some("ns"), "web-pdb").with_object(pdb);
        let result = reconcile(request, ctx, Arc::new(timeouts)).await;
        let seen = seen.lock().unwrap().clone();
        (result, seen)
    }

    fn status_writes(seen: &[(Method, String, Value)], path: &str) -> Vec<Value> {
        seen.iter()
            .filter(|(m, p, _)| *m == Method::PUT && p == path)
            .map(|(_, _, body)| body["status"].clone())
            .collect()
    }

    const PDB_STATUS: &str = "/apis/policy/v1/namespaces/ns/poddisruptionbudgets/web-pdb/status";

    fn short(deletion: u64, stale: u64) -> Timeouts {
        Timeouts {
            deletion: Duration::from_secs(deletion),
            stale_pod_disruption: Duration::from_secs(stale),
        }
    }

    #[tokio::test]
    async fn a_recent_eviction_keeps_its_pod_uncounted_and_requeues_for_its_expiry() {
        let evicted = ago(1);
        let status = json!({"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 3,
            "desiredHealthy": 2, "expectedPods": 3, "disruptedPods": {"p0": evicted}});
        let pods = [pod("p0", None), pod("p1", None), pod("p2", None)];
        let (result, seen) = run(budget(json!(2), status), &pods, short(10, 120)).await;
        let after = result
            .unwrap()
            .requeue_after()
            .expect("a requeue for the expiry");
        assert!(
            after > Duration::from_secs(7) && after <= Duration::from_secs(9),
            "{after:?}"
        );
        let written = status_writes(&seen, PDB_STATUS);
        assert_eq!(written.len(), 1, "{seen:?}");
        assert_eq!(written[0]["currentHealthy"], 2);
        assert_eq!(written[0]["disruptionsAllowed"], 0);
        assert_eq!(written[0]["disruptedPods"], json!({"p0": evicted}));
        assert_eq!(written[0]["conditions"][0]["reason"], "InsufficientPods");
    }

    #[tokio::test]
    async fn an_eviction_whose_delete_never_came_expires_and_the_pod_counts_again() {
        let status = json!({"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 2,
            "desiredHealthy": 2, "expectedPods": 3, "disruptedPods": {"p0": ago(30)}});
        let pods = [pod("p0", None), pod("p1", None), pod("p2", None)];
        let (result, seen) = run(budget(json!(2), status), &pods, short(10, 120)).await;
        assert_eq!(result.unwrap(), Action::await_change());
        let written = status_writes(&seen, PDB_STATUS);
        assert_eq!(written.len(), 1, "{seen:?}");
        assert_eq!(written[0]["currentHealthy"], 3);
        assert_eq!(written[0]["disruptionsAllowed"], 1);
        assert!(written[0].get("disruptedPods").is_none(), "{}", written[0]);
    }

    #[tokio::test]
    async fn a_stale_disruption_target_is_reset_to_false_through_the_pods_status() {
        let mut marked = pod("p0", None);
        marked["status"]["conditions"] = json!([{"type": "Ready", "status": "True"},
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
             "message": "Eviction API: evicting", "lastTransitionTime": ago(5)}]);
        let status = json!({"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1,
            "desiredHealthy": 1, "expectedPods": 1,
            "conditions": [{"type": "DisruptionAllowed", "status": "False", "observedGeneration": 1,
                "reason": "InsufficientPods", "message": "", "lastTransitionTime": ago(60)}]});
        let (result, seen) = run(budget(json!(1), status), &[marked], short(120, 2)).await;
        assert_eq!(result.unwrap(), Action::await_change());
        let reset = status_writes(&seen, "/api/v1/namespaces/ns/pods/p0/status");
        assert_eq!(reset.len(), 1, "{seen:?}");
        let condition = &reset[0]["conditions"][1];
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "EvictionByEvictionAPI");
    }

    #[tokio::test]
    async fn a_missing_controller_fails_safe_with_sync_failed_and_retries() {
        let status = json!({"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2,
            "desiredHealthy": 1, "expectedPods": 2});
        let pods = [pod("p0", Some("gone")), pod("p1", Some("gone"))];
        let (result, seen) = run(budget(json!("50%"), status), &pods, Timeouts::default()).await;
        let err = result.unwrap_err();
        assert_eq!(err.to_string(), "found no controllers for pod \"p0\"");
        let written = status_writes(&seen, PDB_STATUS);
        assert_eq!(written.len(), 1, "{seen:?}");
        assert_eq!(written[0]["disruptionsAllowed"], 0);
        assert_eq!(
            written[0]["currentHealthy"], 2,
            "the rest of the status is kept"
        );
        let condition = &written[0]["conditions"][0];
        assert_eq!(condition["reason"], "SyncFailed");
        assert_eq!(condition["message"], "found no controllers for pod \"p0\"");
    }

    #[test]
    fn selectors_print_as_gos_label_selector_string() {
        let s: metav1::LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
        }))
        .unwrap();
        assert_eq!(
            go_selector(Some(&s)),
            "&LabelSelector{MatchLabels:map[string]string{app: web,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:tier,Operator:In,Values:[a b],},},}"
        );
    }
}
