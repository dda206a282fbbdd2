//! How the controller evicts a pod, as upstream's `addConditionAndDeletePod`: the Event
//! `TaintManagerEviction` "Marking for deletion Pod ns/name", then the `DisruptionTarget` condition
//! (reason `DeletionByTaintManager`) through a strategic merge patch of `pods/status`, then a
//! delete with the pod's own grace period. The bodies are built by pure functions, tested against
//! what kube-controller-manager v1.32 writes.

use flotilla_sdk::k8s_openapi::api::core::v1::{ObjectReference, Pod};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use flotilla_sdk::{Context, EventType};
use serde_json::{Value, json};

/// The condition type a disruption is reported under (upstream `v1.DisruptionTarget`).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// The condition's reason.
pub const REASON: &str = "DeletionByTaintManager";
/// The condition's message.
pub const MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";
/// The reason of both Events the controller records.
pub const EVENT_REASON: &str = "TaintManagerEviction";

/// Errors of evicting one pod.
#[derive(Debug, thiserror::Error)]
pub enum EvictionError {
    /// The `DisruptionTarget` condition could not be added.
    #[error("cannot add the DisruptionTarget condition to pod {pod}")]
    Condition {
        /// `namespace/name`.
        pod: String,
        /// Why.
        source: kube::Error,
    },
    /// The delete was refused.
    #[error("cannot delete pod {pod}")]
    Delete {
        /// `namespace/name`.
        pod: String,
        /// Why.
        source: kube::Error,
    },
}

/// `namespace/name` of `pod`.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether this controller already added its condition and the pod is being deleted: nothing is
/// left to do (the node's key runs again on every event of its pods; upstream acts once per taint
/// change).
pub fn already_evicted(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        && condition_patch(pod, Timestamp::UNIX_EPOCH).is_none()
}

/// The strategic merge patch of `pods/status` that adds the `DisruptionTarget` condition, as
/// upstream's `PatchPodStatus` computes it (the pod's UID, so it cannot land on another pod of the
/// same name; the conditions' order); `None` when the pod has it already with status True and this
/// reason and message (upstream's `UpdatePodCondition` then changes nothing). A condition True for
/// another reason keeps its transition time.
pub fn condition_patch(pod: &Pod, now: Timestamp) -> Option<Value> {
    let existing = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let previous = existing.iter().find(|c| c.type_ == DISRUPTION_TARGET);
    if previous.is_some_and(|c| {
        c.status == "True"
            && c.reason.as_deref() == Some(REASON)
            && c.message.as_deref() == Some(MESSAGE)
    }) {
        return None;
    }
    let transition = previous
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    let mut order: Vec<Value> = existing.iter().map(|c| json!({"type": c.type_})).collect();
    if previous.is_none() {
        order.push(json!({"type": DISRUPTION_TARGET}));
    }
    Some(json!({
        "metadata": {"uid": pod.metadata.uid},
        "status": {
            "$setElementOrder/conditions": order,
            "conditions": [{
                "type": DISRUPTION_TARGET,
                "status": "True",
                "lastProbeTime": null,
                "lastTransitionTime": transition,
                "reason": REASON,
                "message": MESSAGE,
            }],
        },
    }))
}

/// The delete: the pod's own grace period, as upstream's empty `DeleteOptions`, but only of the pod
/// decided on (its UID), never of a pod that took its name meanwhile.
pub fn delete_params(pod: &Pod) -> DeleteParams {
    DeleteParams {
        preconditions: pod.metadata.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// The Pod as upstream's Events refer to it: by namespace and name only.
fn reference(key: &str) -> ObjectReference {
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectReference::default()
    }
}

/// Records that the timed eviction of pod `key` (`namespace/name`) was called off.
pub fn record_cancelled(ctx: &Context, key: &str) {
    ctx.recorder().event_on_reference(
        &reference(key),
        EventType::Normal,
        EVENT_REASON,
        format!("Cancelling deletion of Pod {key}"),
    );
}

/// Evicts `pod`: the Event, the condition (unless it has it), the delete. A pod already gone, or
/// replaced by another of its name, counts as evicted.
///
/// # Errors
/// [`EvictionError`] when the API refuses the status patch or the delete; the caller retries.
pub async fn evict(ctx: &Context, pod: &Pod, now: Timestamp) -> Result<(), EvictionError> {
    let key = pod_key(pod);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    tracing::info!(pod = %key, "deleting pod");
    ctx.recorder().event_on_reference(
        &reference(&key),
        EventType::Normal,
        EVENT_REASON,
        format!("Marking for deletion Pod {key}"),
    );
    let pods: Api<Pod> = Api::namespaced(ctx.client(), namespace);
    if let Some(patch) = condition_patch(pod, now) {
        match pods
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => return Ok(()),
            Err(source) => return Err(EvictionError::Condition { pod: key, source }),
        }
    }
    match pods.delete(name, &delete_params(pod)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(()),
        Err(source) => Err(EvictionError::Delete { pod: key, source }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    const NOW: &str = "2026-11-26T10:09:28Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn pod(conditions: Value, deleting: bool) -> Pod {
        let mut pod = json!({
            "metadata": {"name": "no-tolerations", "namespace": "nodelifecycle", "uid": "u-1"},
            "spec": {"containers": []},
            "status": {"phase": "Running", "conditions": conditions},
        });
        if deleting {
            pod["metadata"]["deletionTimestamp"] = json!(NOW);
        }
        serde_json::from_value(pod).unwrap()
    }

    #[test]
    fn the_condition_is_kube_controller_managers_appended_after_the_pods_own() {
        let p = pod(
            json!([{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]),
            false,
        );
        assert_eq!(
            condition_patch(&p, now()).unwrap(),
            json!({
                "metadata": {"uid": "u-1"},
                "status": {
                    "$setElementOrder/conditions":
                        [{"type": "Ready"}, {"type": "PodScheduled"}, {"type": "DisruptionTarget"}],
                    "conditions": [{
                        "type": "DisruptionTarget", "status": "True", "lastProbeTime": null,
                        "lastTransitionTime": NOW, "reason": "DeletionByTaintManager",
                        "message": "Taint manager: deleting due to NoExecute taint",
                    }],
                },
            })
        );
    }

    #[test]
    fn a_pod_with_the_condition_needs_no_patch_and_once_deleting_nothing_at_all() {
        let ours = json!([{"type": "DisruptionTarget", "status": "True",
            "reason": REASON, "message": MESSAGE}]);
        assert_eq!(condition_patch(&pod(ours.clone(), false), now()), None);
        assert!(!already_evicted(&pod(ours.clone(), false)));
        assert!(already_evicted(&pod(ours, true)));
        assert!(
            !already_evicted(&pod(json!([]), true)),
            "deleted by another"
        );
    }

    #[test]
    fn another_true_disruption_keeps_its_transition_time() {
        let p = pod(
            json!([{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                "lastTransitionTime": "2026-11-26T10:00:00Z"}]),
            false,
        );
        let patch = condition_patch(&p, now()).unwrap();
        assert_eq!(
            patch["status"]["conditions"][0]["lastTransitionTime"],
            "2026-11-26T10:00:00Z"
        );
        assert_eq!(
            patch["status"]["$setElementOrder/conditions"],
            json!([{"type": "DisruptionTarget"}])
        );
    }

    #[test]
    fn the_delete_keeps_the_grace_period_and_names_the_pods_uid() {
        let params = delete_params(&pod(json!([]), false));
        assert_eq!(params.grace_period_seconds, None);
        assert_eq!(params.preconditions.unwrap().uid.as_deref(), Some("u-1"));
    }

    #[test]
    fn events_refer_to_the_pod_by_namespace_and_name_as_upstreams_do() {
        let r = reference("nodelifecycle/no-tolerations");
        assert_eq!(r.namespace.as_deref(), Some("nodelifecycle"));
        assert_eq!(r.name.as_deref(), Some("no-tolerations"));
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        assert_eq!(r.uid, None);
    }
}
