//! What the StatefulSet controller reads from a pod (upstream `stateful_set_utils.go` and
//! `podutil`): its phase, whether it is running and ready, available after `minReadySeconds`, being
//! deleted, and the revision it was made from.

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

use super::super::pod_ready::ready_since;
pub use super::super::pod_ready::{available_at, is_available};
use super::names::REVISION_LABEL;

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// The API server has the pod: it has a phase (upstream `isCreated`; a pod this sync is about to
/// make has none).
pub fn is_created(pod: &Pod) -> bool {
    phase(pod).is_some_and(|p| !p.is_empty())
}

/// Phase Pending.
pub fn is_pending(pod: &Pod) -> bool {
    phase(pod) == Some("Pending")
}

/// Phase Failed or Succeeded: the pod will not run again and is replaced (upstream deletes both, an
/// evicted pod's phase depends on its exit code).
pub fn is_finished(pod: &Pod) -> bool {
    matches!(phase(pod), Some("Failed" | "Succeeded"))
}

/// Being deleted (upstream `isTerminating`).
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Phase Running and Ready (upstream `isRunningAndReady`).
pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == Some("Running") && ready_since(pod).is_some()
}

/// Not available, or being deleted (upstream `isUnavailable`).
pub fn is_unavailable(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    !is_available(pod, min_ready_seconds, now) || is_terminating(pod)
}

/// The revision the pod was made from: its `controller-revision-hash` label ("" without one).
pub fn revision(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map_or("", String::as_str)
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use flotilla_sdk::k8s_openapi::jiff::SignedDuration;

    use super::*;

    fn pod(phase: &str, ready_at: Option<Timestamp>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: ready_at.map(|at| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(at)),
                        ..PodCondition::default()
                    }]
                }),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn a_pod_without_a_phase_is_not_created_yet() {
        assert!(!is_created(&Pod::default()));
        assert!(is_created(&pod("Pending", None)));
    }

    #[test]
    fn availability_waits_min_ready_seconds_after_readiness() {
        let t0 = Timestamp::UNIX_EPOCH;
        let ready = pod("Running", Some(t0));
        let later = |s: i64| t0 + SignedDuration::from_secs(s);
        assert!(is_running_and_ready(&ready));
        assert!(is_available(&ready, 0, t0));
        assert!(!is_available(&ready, 10, later(9)));
        assert!(is_available(&ready, 10, later(10)));
        assert_eq!(available_at(&ready, 10, later(3)), Some(later(10)));
        assert_eq!(available_at(&ready, 10, later(10)), None);
        assert!(!is_running_and_ready(&pod("Pending", Some(t0))));
        assert!(is_unavailable(&pod("Running", None), 0, t0));
    }
}
