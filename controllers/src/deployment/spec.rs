//! What the controller reads from a Deployment's spec, with the API's defaults for unset fields
//! (upstream `deploymentutil.MaxSurge`, `MaxUnavailable`, `HasProgressDeadline`, ...).

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, RollingUpdateDeployment};
use flotilla_sdk::k8s_openapi::api::core::v1::PodTemplateSpec;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::fenceposts::resolve;

/// The strategy type that replaces pods a few at a time.
pub const ROLLING_UPDATE: &str = "RollingUpdate";
/// The strategy type that removes every old pod before creating new ones.
pub const RECREATE: &str = "Recreate";

/// `spec.replicas`, 1 when unset (the API's default).
pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// `spec.template`.
pub fn template(d: &Deployment) -> Option<&PodTemplateSpec> {
    d.spec.as_ref().map(|s| &s.template)
}

/// `spec.minReadySeconds`.
pub fn min_ready_seconds(d: &Deployment) -> i32 {
    d.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

/// `spec.paused`.
pub fn paused(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false)
}

/// `spec.strategy.type`, `RollingUpdate` when unset (the API's default).
pub fn strategy(d: &Deployment) -> &str {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or(ROLLING_UPDATE)
}

/// Whether the strategy is RollingUpdate.
pub fn is_rolling_update(d: &Deployment) -> bool {
    strategy(d) == ROLLING_UPDATE
}

/// `spec.progressDeadlineSeconds`, `None` when the deployment has no deadline (unset or `MaxInt32`).
pub fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .filter(|s| *s != i32::MAX)
}

/// `spec.revisionHistoryLimit`, `None` when unlimited.
pub fn revision_history_limit(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.revision_history_limit)
}

fn fenceposts(d: &Deployment) -> (i32, i32) {
    let rolling = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let quarter = || IntOrString::String("25%".into());
    let (surge, unavailable) = match rolling {
        Some(RollingUpdateDeployment {
            max_surge,
            max_unavailable,
        }) => (
            max_surge.clone().unwrap_or_else(quarter),
            max_unavailable.clone().unwrap_or_else(quarter),
        ),
        None => (quarter(), quarter()),
    };
    // A malformed value is caught by validation; like upstream, count it as no room at all.
    resolve(&surge, &unavailable, replicas(d)).unwrap_or((0, 0))
}

/// How many pods above `spec.replicas` a rollout may run; 0 for Recreate.
pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling_update(d) {
        return 0;
    }
    fenceposts(d).0
}

/// How many of `spec.replicas` may be unavailable during a rollout, at most `spec.replicas`; 0 for
/// Recreate and for a deployment of 0 replicas.
pub fn max_unavailable(d: &Deployment) -> i32 {
    let desired = replicas(d);
    if !is_rolling_update(d) || desired == 0 {
        return 0;
    }
    fenceposts(d).1.min(desired)
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A deployment of `replicas` with a RollingUpdate strategy of `surge` / `unavailable`.
    pub(crate) fn rolling(
        replicas: i32,
        surge: serde_json::Value,
        unavailable: serde_json::Value,
    ) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "d-uid", "generation": 1},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                "progressDeadlineSeconds": 600,
                "revisionHistoryLimit": 10,
            }
        }))
        .unwrap()
    }

    #[test]
    fn unavailability_is_capped_at_the_replicas_and_zero_for_zero_replicas() {
        assert_eq!(max_unavailable(&rolling(3, json!(0), json!(5))), 3);
        assert_eq!(max_unavailable(&rolling(0, json!(1), json!(1))), 0);
        assert_eq!(max_surge(&rolling(10, json!("25%"), json!("25%"))), 3);
        assert_eq!(max_unavailable(&rolling(10, json!("25%"), json!("25%"))), 2);
    }

    #[test]
    fn recreate_allows_neither_surge_nor_unavailability() {
        let mut d = rolling(4, json!(2), json!(2));
        if let Some(s) = d.spec.as_mut().and_then(|s| s.strategy.as_mut()) {
            s.type_ = Some(RECREATE.into());
        }
        assert_eq!((max_surge(&d), max_unavailable(&d)), (0, 0));
    }

    #[test]
    fn max_int32_means_no_progress_deadline() {
        let mut d = rolling(1, json!(1), json!(0));
        assert_eq!(progress_deadline(&d), Some(600));
        if let Some(s) = d.spec.as_mut() {
            s.progress_deadline_seconds = Some(i32::MAX);
        }
        assert_eq!(progress_deadline(&d), None);
    }
}
