//! What the replica controllers read from a pod: whether it counts, is ready, is available, and how
//! often it restarted (upstream `podutil`).

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A pod that counts toward the replicas: not being deleted and not finished (upstream
/// `FilterActivePods`).
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Whether the pod's Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|(ready, _)| ready)
}

/// Since when the pod is ready: `Some(None)` when ready at an unknown time, `None` when not ready.
pub fn ready_since(pod: &Pod) -> Option<Option<Timestamp>> {
    match ready_condition(pod) {
        Some((true, since)) => Some(since),
        _ => None,
    }
}

/// Whether the pod has been ready for at least `min_ready_seconds` at `now` (upstream
/// `IsPodAvailable`).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(since)) => since + SignedDuration::from_secs(i64::from(min_ready_seconds)) <= now,
    }
}

/// The most restarts of one regular container, then of one sidecar (an init container with restart
/// policy Always), as upstream's `maxContainerRestarts` compares them.
pub fn restarts(pod: &Pod) -> (i32, i32) {
    let Some(status) = pod.status.as_ref() else {
        return (0, 0);
    };
    let regular = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0);
    let sidecars: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect();
    let sidecar = status
        .init_container_statuses
        .iter()
        .flatten()
        .filter(|c| sidecars.contains(&c.name.as_str()))
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0);
    (regular, sidecar)
}

fn ready_condition(pod: &Pod) -> Option<(bool, Option<Timestamp>)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| {
            (
                c.status == "True",
                c.last_transition_time.as_ref().map(|t| t.0),
            )
        })
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn ready_at(secs: i64) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(Timestamp::from_second(secs).unwrap())),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn a_ready_pod_is_available_only_after_min_ready_seconds() {
        let pod = ready_at(100);
        let at = |s| Timestamp::from_second(s).unwrap();
        assert!(is_available(&pod, 0, at(100)));
        assert!(!is_available(&pod, 10, at(109)));
        assert!(is_available(&pod, 10, at(110)));
    }

    #[test]
    fn finished_or_deleted_pods_do_not_count() {
        let mut pod = ready_at(1);
        assert!(is_active(&pod));
        pod.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(!is_active(&pod));
        let mut done = ready_at(1);
        if let Some(s) = done.status.as_mut() {
            s.phase = Some("Succeeded".into());
        }
        assert!(!is_active(&done));
    }
}
