//! ResourceQuota for pod counts: the admission check of pod creates against `spec.hard.pods` /
//! `spec.hard["count/pods"]` (upstream's `ResourceQuota` admission plugin with the pod evaluator), and a
//! task that keeps each quota's `status.hard` and `status.used` current (upstream's quota controller).
//!
//! # Simplifications
//! * Only pod counts are enforced and reported. Other hard limits (cpu, memory, `count/<kind>`, ...) are
//!   stored and copied to `status.hard`, but neither checked nor counted in `status.used`.
//! * Admission counts the namespace's pods live instead of charging `status.used`, so a quota admits pods
//!   at once (upstream refuses creates until the quota controller has filled in the status). Creates of
//!   pods in a namespace with a pod-count quota are serialised per namespace ([`NamespaceLocks`]), so
//!   concurrent creates cannot overshoot the limit.
//! * `status.used` is recomputed on every pod or quota change in the namespace; a pod that stops counting
//!   only because its deletion grace ran out is noticed at the next change, not on a timer.
//! * Scopes and scope selectors are ignored: every quota applies to every pod of its namespace.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::meta;
use super::objects::internal;
use super::state::ApiState;
use super::status::{ApiError, Gr};
use super::watch_cache::Event;

const QUOTA_PREFIX: &str = "/registry/resourcequotas/";
const POD_PREFIX: &str = "/registry/pods/";

/// The quota resources a pod is charged against, in upstream's print order (sorted).
const POD_RESOURCES: [&str; 2] = ["count/pods", "pods"];

/// One async mutex per namespace, held across "count the pods" and "store the new pod" so that two
/// creates cannot both see room for one more pod. Entries live as long as the server: one small mutex
/// per namespace that ever had a pod created under a pod-count quota.
#[derive(Default)]
pub struct NamespaceLocks {
    locks: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl NamespaceLocks {
    /// Waits for the namespace's lock; the create must keep the guard until its write is stored.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future before it resolves takes nothing.
    async fn lock(&self, namespace: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .locks
            .lock()
            .entry(namespace.to_string())
            .or_default()
            .clone();
        lock.lock_owned().await
    }
}

/// Held by a pod create that passed the quota check until its object is stored (or the create failed).
pub type Admitted = Option<tokio::sync::OwnedMutexGuard<()>>;

/// Quota create (upstream's `PrepareForCreate`): the status is the quota controller's to write.
pub fn prepare_create(quota: &mut Value) {
    if let Some(m) = quota.as_object_mut() {
        m.remove("status");
    }
}

/// Checks a new pod `name` in `namespace` against the namespace's pod-count quotas.
///
/// Returns a guard the caller must hold until the pod is stored, so that no other pod create of the
/// namespace counts in between; `None` when no quota limits pods there.
///
/// # Errors
/// 403 Forbidden with upstream's `exceeded quota: ...` message when one more pod would exceed a quota
/// (the first such quota by name is reported); 500 on etcd trouble.
pub async fn admit_pod(st: &ApiState, namespace: &str, name: &str) -> Result<Admitted, ApiError> {
    if pod_quotas(st, namespace).await?.is_empty() {
        return Ok(None);
    }
    let guard = st.quota_locks.lock(namespace).await;
    // Read again under the lock: a quota changed while we waited counts.
    let quotas = pod_quotas(st, namespace).await?;
    let used = count_pods(st, namespace).await?;
    for quota in &quotas {
        let exceeded: Vec<(&str, &str)> = POD_RESOURCES
            .iter()
            .filter_map(|resource| {
                let hard = quota["spec"]["hard"][*resource].as_str()?;
                let limit = parse_quantity(hard)?;
                ((used + 1) as f64 > limit).then_some((*resource, hard))
            })
            .collect();
        if exceeded.is_empty() {
            continue;
        }
        let print = |value: &dyn Fn(&str, &str) -> String| {
            exceeded
                .iter()
                .map(|(resource, hard)| format!("{resource}={}", value(resource, hard)))
                .collect::<Vec<_>>()
                .join(",")
        };
        let why = format!(
            "exceeded quota: {}, requested: {}, used: {}, limited: {}",
            meta::name(quota),
            print(&|_, _| "1".to_string()),
            print(&|_, _| used.to_string()),
            print(&|_, hard| hard.to_string()),
        );
        return Err(ApiError::forbidden(
            Gr {
                group: "",
                resource: "pods",
            },
            name,
            &why,
            Vec::new(),
        ));
    }
    Ok(Some(guard))
}

/// The namespace's quotas that limit pods, by name.
async fn pod_quotas(st: &ApiState, namespace: &str) -> Result<Vec<Value>, ApiError> {
    let page = st
        .storage
        .list(&format!("{QUOTA_PREFIX}{namespace}/"), None, None)
        .await
        .map_err(internal)?;
    Ok(page
        .items
        .into_iter()
        .map(|s| s.value)
        .filter(|q| {
            POD_RESOURCES
                .iter()
                .any(|r| q["spec"]["hard"].get(*r).is_some())
        })
        .collect())
}

/// How many of the namespace's pods count against quota.
async fn count_pods(st: &ApiState, namespace: &str) -> Result<u64, ApiError> {
    let page = st
        .storage
        .list(&format!("{POD_PREFIX}{namespace}/"), None, None)
        .await
        .map_err(internal)?;
    Ok(page.items.iter().filter(|s| charged(&s.value)).count() as u64)
}

/// Upstream's `QuotaV1Pod`: a pod is charged unless it is terminal (Succeeded/Failed) or past its
/// deletion grace (deletionTimestamp + deletionGracePeriodSeconds is in the past).
fn charged(pod: &Value) -> bool {
    if matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    let deletion = pod["metadata"]["deletionTimestamp"].as_str();
    let grace = pod["metadata"]["deletionGracePeriodSeconds"].as_i64();
    match (deletion.and_then(meta::age_secs), grace) {
        (Some(age), Some(grace)) => age <= grace,
        _ => true,
    }
}

/// A resource.Quantity's value as a number (`3`, `1.5k`, `2Ki`, `500m`, `1e3`); `None` when it is not one.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor)
}

/// The status a quota should have: `hard` copied from the spec, `used` the pod count for every pod
/// resource the spec limits.
fn desired_status(quota: &Value, used: u64) -> Value {
    let hard = quota["spec"]["hard"].clone();
    let mut counted = serde_json::Map::new();
    for resource in POD_RESOURCES {
        if hard.get(resource).is_some() {
            counted.insert(resource.into(), json!(used.to_string()));
        }
    }
    let mut status = serde_json::Map::new();
    if hard.as_object().is_some_and(|h| !h.is_empty()) {
        status.insert("hard".into(), hard);
    }
    if !counted.is_empty() {
        status.insert("used".into(), Value::Object(counted));
    }
    Value::Object(status)
}

/// The namespace of a pod or quota key, if `key` is one.
fn namespace_of(key: &str) -> Option<(&str, bool)> {
    for (prefix, is_quota) in [(QUOTA_PREFIX, true), (POD_PREFIX, false)] {
        if let Some(rest) = key.strip_prefix(prefix) {
            return rest.split('/').next().map(|ns| (ns, is_quota));
        }
    }
    None
}

/// Rewrites the status of every quota in `namespace` that differs from what it should be. Returns
/// whether the namespace still has quotas.
async fn refresh(st: &ApiState, namespace: &str) -> Result<bool, ApiError> {
    let page = st
        .storage
        .list(&format!("{QUOTA_PREFIX}{namespace}/"), None, None)
        .await
        .map_err(internal)?;
    if page.items.is_empty() {
        return Ok(false);
    }
    let used = count_pods(st, namespace).await?;
    for stored in page.items {
        let want = desired_status(&stored.value, used);
        if stored.value.get("status").unwrap_or(&Value::Null) == &want
            || (want.as_object().is_some_and(serde_json::Map::is_empty)
                && stored.value.get("status").is_none())
        {
            continue;
        }
        let mut new = stored.value;
        new["status"] = want;
        // A lost race is fine: the competing write's event brings us back here.
        st.storage
            .update(&stored.key, &new, stored.rev)
            .await
            .map_err(internal)?;
    }
    Ok(true)
}

/// Keeps quota statuses current from the watch cache's events until `cancel`.
///
/// Only namespaces known to hold a quota are recomputed on pod events, so pod churn elsewhere costs
/// nothing.
pub async fn sync(st: ApiState, mut rx: Receiver<Arc<Event>>, cancel: CancellationToken) {
    let mut with_quotas: BTreeSet<String> = BTreeSet::new();
    match st.storage.list(QUOTA_PREFIX, None, None).await {
        Ok(page) => with_quotas.extend(
            page.items
                .iter()
                .map(|s| meta::namespace(&s.value).to_string()),
        ),
        Err(err) => tracing::warn!(error = %err, "cannot list resource quotas"),
    }
    for namespace in with_quotas.clone() {
        refresh_logged(&st, &namespace, &mut with_quotas).await;
    }
    loop {
        let event = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            event = rx.recv() => event,
        };
        match event {
            Ok(event) => {
                let Some((namespace, is_quota)) = namespace_of(&event.key) else {
                    continue;
                };
                if is_quota || with_quotas.contains(namespace) {
                    let namespace = namespace.to_string();
                    with_quotas.insert(namespace.clone());
                    refresh_logged(&st, &namespace, &mut with_quotas).await;
                }
            }
            // Events were missed: recompute everything we know of.
            Err(RecvError::Lagged(_)) => {
                for namespace in with_quotas.clone() {
                    refresh_logged(&st, &namespace, &mut with_quotas).await;
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

async fn refresh_logged(st: &ApiState, namespace: &str, with_quotas: &mut BTreeSet<String>) {
    match refresh(st, namespace).await {
        Ok(true) => {}
        Ok(false) => {
            with_quotas.remove(namespace);
        }
        Err(err) => {
            tracing::warn!(namespace, error = %err, "cannot update resource quota status");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_resources_are_in_upstreams_print_order() {
        // Upstream prints the resources of an exceeded quota sorted by name.
        assert!(POD_RESOURCES.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn quantities_parse_with_decimal_binary_and_exponent_suffixes() {
        assert_eq!(parse_quantity("3"), Some(3.0));
        assert_eq!(parse_quantity("1.5k"), Some(1500.0));
        assert_eq!(parse_quantity("2Ki"), Some(2048.0));
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("lots"), None);
        assert_eq!(parse_quantity("3x"), None);
    }

    #[test]
    fn terminal_pods_and_pods_past_their_grace_are_not_charged() {
        assert!(charged(&json!({"status": {"phase": "Running"}})));
        assert!(!charged(&json!({"status": {"phase": "Succeeded"}})));
        assert!(!charged(&json!({"status": {"phase": "Failed"}})));
        let past = json!({"metadata": {"deletionTimestamp": "2000-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30}});
        assert!(!charged(&past));
        let within = json!({"metadata": {"deletionTimestamp": meta::now_plus(30), "deletionGracePeriodSeconds": 30}});
        assert!(charged(&within));
    }

    #[test]
    fn the_status_copies_hard_and_counts_only_pod_resources() {
        let quota = json!({"spec": {"hard": {"pods": "3", "count/pods": "5", "cpu": "2"}}});
        assert_eq!(
            desired_status(&quota, 2),
            json!({"hard": {"pods": "3", "count/pods": "5", "cpu": "2"}, "used": {"count/pods": "2", "pods": "2"}})
        );
        assert_eq!(desired_status(&json!({"spec": {}}), 2), json!({}));
    }

    #[test]
    fn keys_of_pods_and_quotas_name_their_namespace() {
        assert_eq!(namespace_of("/registry/pods/a/p"), Some(("a", false)));
        assert_eq!(
            namespace_of("/registry/resourcequotas/b/q"),
            Some(("b", true))
        );
        assert_eq!(namespace_of("/registry/configmaps/a/c"), None);
    }
}
