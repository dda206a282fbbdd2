//! Stale `DisruptionTarget` conditions (upstream's stale pod disruption handling): a pod marked as
//! about to be disrupted (by an eviction, a preemption, the taint manager) whose deletion never
//! came gets the condition reset to False once it has been True for the timeout, so it is not
//! treated as going away forever.

use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

/// The condition's type.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// The reason the kubelet gives the condition: the kubelet's own terminations may take arbitrarily
/// long before the pod is deleted, so they are never stale.
const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// Upstream's `nonTerminatingPodHasStaleDisruptionCondition`: for a pod not being deleted, not
/// terminal, with `DisruptionTarget=True` not set by the kubelet, how long until the condition is
/// stale (zero: it is stale now); None for any other pod.
pub fn stale_in(pod: &Pod, now: Timestamp, timeout: Duration) -> Option<Duration> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let condition = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_TARGET)?;
    if condition.status != "True" || condition.reason.as_deref() == Some(TERMINATION_BY_KUBELET) {
        return None;
    }
    let since = condition
        .last_transition_time
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    let elapsed = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
    Some(timeout.saturating_sub(elapsed))
}

/// The pod with its `DisruptionTarget` condition False since `now` (reason and message kept, as
/// upstream's server-side apply of type, status and transition time leaves them).
pub fn reset(pod: &Pod, now: Timestamp) -> Pod {
    let mut pod = pod.clone();
    if let Some(conditions) = pod.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        for c in conditions
            .iter_mut()
            .filter(|c| c.type_ == DISRUPTION_TARGET)
        {
            c.status = "False".to_owned();
            c.last_transition_time = Some(Time(now));
        }
    }
    pod
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(status: &str, reason: &str, since: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": phase, "conditions": [{"type": "DisruptionTarget", "status": status,
                "reason": reason, "lastTransitionTime": since}]},
        }))
        .unwrap()
    }

    const TWO_MINUTES: Duration = Duration::from_secs(120);

    #[test]
    fn an_eviction_mark_goes_stale_after_the_timeout_and_is_reset_to_false() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let p = pod(
            "True",
            "EvictionByEvictionAPI",
            "2026-01-01T00:00:00Z",
            "Running",
        );
        assert_eq!(
            stale_in(&p, now, TWO_MINUTES),
            Some(Duration::from_secs(60))
        );
        let later: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        assert_eq!(stale_in(&p, later, TWO_MINUTES), Some(Duration::ZERO));
        let reset = reset(&p, later);
        let c = &reset.status.unwrap().conditions.unwrap()[0];
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some("EvictionByEvictionAPI"));
        assert_eq!(c.last_transition_time.as_ref().unwrap().0, later);
    }

    #[test]
    fn kubelet_marks_terminal_pods_and_false_conditions_are_never_stale() {
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let at = "2026-01-01T00:00:00Z";
        assert_eq!(
            stale_in(
                &pod("True", "TerminationByKubelet", at, "Running"),
                now,
                TWO_MINUTES
            ),
            None
        );
        assert_eq!(
            stale_in(
                &pod("True", "EvictionByEvictionAPI", at, "Failed"),
                now,
                TWO_MINUTES
            ),
            None
        );
        assert_eq!(
            stale_in(
                &pod("False", "EvictionByEvictionAPI", at, "Running"),
                now,
                TWO_MINUTES
            ),
            None
        );
    }
}
