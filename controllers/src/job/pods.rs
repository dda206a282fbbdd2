//! What the job controller reads from a pod (upstream `isPodFailed`, `FilterActivePods`,
//! `CountTerminatingPods`, `getCompletionIndex`, `getFinishedTime`): whether it runs, is being
//! deleted, succeeded or failed, still carries the tracking finalizer, which index it works on and
//! when it finished.

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

pub use super::super::pod_ready::is_ready;
use super::names::{COMPLETION_INDEX, TRACKING_FINALIZER};

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Neither finished nor being deleted: it counts toward `active`.
pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !is_finished_phase(pod)
}

/// Being deleted but not finished: it counts toward `terminating`.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && !is_finished_phase(pod)
}

fn is_finished_phase(pod: &Pod) -> bool {
    matches!(phase(pod), Some("Succeeded" | "Failed"))
}

/// Phase Succeeded.
pub fn is_succeeded(pod: &Pod) -> bool {
    phase(pod) == Some("Succeeded")
}

/// Phase Failed.
pub fn is_failed_phase(pod: &Pod) -> bool {
    phase(pod) == Some("Failed")
}

/// Counts as a failure: phase Failed, or — unless only failed pods are replaced — deleted before it
/// succeeded (an orphan that never reaches Failed must still count, as upstream's `isPodFailed`).
pub fn is_failed(pod: &Pod, only_replace_failed_pods: bool) -> bool {
    if phase(pod) == Some("Failed") {
        return true;
    }
    !only_replace_failed_pods && pod.metadata.deletion_timestamp.is_some() && !is_succeeded(pod)
}

/// Whether the pod still carries the Job's tracking finalizer: it is not counted in the status yet.
pub fn has_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == TRACKING_FINALIZER)
}

/// The pod's completion index from its annotation; `None` when absent or malformed (such a pod is
/// ignored by an Indexed Job's bookkeeping, as upstream's `unknownCompletionIndex`).
pub fn completion_index(pod: &Pod) -> Option<i32> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(COMPLETION_INDEX)?
        .parse::<i32>()
        .ok()
        .filter(|i| *i >= 0)
}

/// The pod's uid, empty when it has none (a pod from the API always has one).
pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// When the pod finished: the latest container termination, else when Ready turned False, else its
/// deletion, else its creation (upstream `getFinishedTime`).
pub fn finished_at(pod: &Pod) -> Option<Timestamp> {
    let status = pod.status.as_ref();
    let containers = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max();
    let not_ready = || {
        status?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready" && c.status == "False")?
            .last_transition_time
            .as_ref()
            .map(|t| t.0)
    };
    containers
        .or_else(not_ready)
        .or_else(|| pod.metadata.deletion_timestamp.as_ref().map(|t| t.0))
        .or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The sum of container restarts: what `backoffLimit` bounds for restartPolicy OnFailure.
pub fn restarts(pod: &Pod) -> i64 {
    pod.status
        .as_ref()
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .map(|c| i64::from(c.restart_count))
        .sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;

    /// A pod of uid `uid` in `phase`, with the tracking finalizer when `tracked`.
    pub(crate) fn pod(uid: &str, phase: &str, tracked: bool) -> Pod {
        let finalizers = if tracked {
            json!([TRACKING_FINALIZER])
        } else {
            json!(null)
        };
        serde_json::from_value(json!({
            "metadata": {"name": format!("p-{uid}"), "uid": uid, "finalizers": finalizers},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn a_deleted_pod_that_did_not_succeed_counts_failed_unless_only_failed_pods_are_replaced() {
        let mut p = pod("a", "Running", true);
        assert!(is_active(&p) && !is_failed(&p, false));
        p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(!is_active(&p) && is_terminating(&p));
        assert!(is_failed(&p, false));
        assert!(!is_failed(&p, true));
        let mut done = pod("b", "Succeeded", true);
        done.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(!is_failed(&done, false) && !is_terminating(&done));
    }

    #[test]
    fn the_completion_index_comes_from_the_annotation_and_garbage_is_no_index() {
        let mut p = pod("a", "Running", true);
        assert_eq!(completion_index(&p), None);
        p.metadata.annotations = Some([(COMPLETION_INDEX.to_owned(), "4".to_owned())].into());
        assert_eq!(completion_index(&p), Some(4));
        p.metadata.annotations = Some([(COMPLETION_INDEX.to_owned(), "-1".to_owned())].into());
        assert_eq!(completion_index(&p), None);
        p.metadata.annotations = Some([(COMPLETION_INDEX.to_owned(), "x".to_owned())].into());
        assert_eq!(completion_index(&p), None);
    }

    #[test]
    fn the_finish_time_is_the_latest_container_termination() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:00:05Z"}}},
                {"name": "b", "image": "i", "imageID": "", "ready": false, "restartCount": 2,
                 "state": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:00:09Z"}}},
            ]},
        }))
        .unwrap();
        assert_eq!(
            finished_at(&p),
            Some("2026-01-01T00:00:09Z".parse().unwrap())
        );
        assert_eq!(restarts(&p), 2);
        assert!(has_finalizer(&pod("x", "Running", true)));
        assert!(!has_finalizer(&pod("x", "Running", false)));
    }
}
