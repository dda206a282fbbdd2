//! How the pod GC removes a pod, as upstream's `markFailedAndDeletePodWithCondition`: a pod not yet
//! terminal is first marked Failed through `pods/status` (with a `DisruptionTarget` condition when its
//! node is gone), since no kubelet will ever do it, then deleted with grace period 0. The bodies are
//! built by pure functions, tested against what kube-controller-manager v1.32 writes.

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::choice::is_terminated;

/// The condition upstream adds to an orphaned pod before deleting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disruption {
    /// The condition's reason.
    pub reason: &'static str,
    /// The condition's message.
    pub message: &'static str,
}

/// An orphaned pod's condition: its node no longer exists.
pub const NODE_GONE: Disruption = Disruption {
    reason: "DeletionByPodGC",
    message: "PodGC: node no longer exists",
};

/// The condition type a disruption is reported under (upstream `v1.DisruptionTarget`).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Errors of removing one pod.
#[derive(Debug, thiserror::Error)]
pub enum RemovalError {
    /// Marking the pod Failed was refused.
    #[error("cannot mark pod {pod} failed")]
    MarkFailed {
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

/// The strategic merge patch of `pods/status` that marks `pod` Failed, with the `disruption`
/// condition if given; `None` for a pod already Succeeded or Failed, which upstream deletes as it is.
/// It carries the pod's UID, so it cannot land on another pod of the same name, and lists the
/// conditions' order as upstream's two-way merge patch does. The condition keeps its transition time
/// when the pod already has it with status True.
pub fn status_patch(pod: &Pod, disruption: Option<Disruption>, now: Timestamp) -> Option<Value> {
    if is_terminated(pod) {
        return None;
    }
    let mut status = json!({"phase": "Failed"});
    if let Some(disruption) = disruption {
        let existing = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let previous = existing.iter().find(|c| c.type_ == DISRUPTION_TARGET);
        let unchanged = previous.is_some_and(|c| {
            c.status == "True"
                && c.reason.as_deref() == Some(disruption.reason)
                && c.message.as_deref() == Some(disruption.message)
        });
        if !unchanged {
            let transition = previous
                .filter(|c| c.status == "True")
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or(Time(now));
            let mut order: Vec<Value> = existing.iter().map(|c| json!({"type": c.type_})).collect();
            if previous.is_none() {
                order.push(json!({"type": DISRUPTION_TARGET}));
            }
            status["$setElementOrder/conditions"] = Value::Array(order);
            status["conditions"] = json!([{
                "type": DISRUPTION_TARGET,
                "status": "True",
                "lastProbeTime": null,
                "lastTransitionTime": transition,
                "reason": disruption.reason,
                "message": disruption.message,
            }]);
        }
    }
    Some(json!({
        "metadata": {"uid": pod.metadata.uid},
        "status": status,
    }))
}

/// Upstream's `NewDeleteOptions(0)`: delete now, whatever the pod's grace period; no kubelet is
/// left to honour one.
pub fn force_delete() -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    }
}

/// Marks `pod` Failed if needed, then force-deletes it. A pod already gone counts as removed.
///
/// # Errors
/// [`RemovalError`] when the API refuses the status patch or the delete.
pub async fn remove(
    client: kube::Client,
    pod: &Pod,
    disruption: Option<Disruption>,
    now: Timestamp,
) -> Result<(), RemovalError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let key = format!("{namespace}/{name}");
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    tracing::info!(pod = %key, "PodGC is force deleting Pod");
    if let Some(patch) = status_patch(pod, disruption, now) {
        match pods
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(source) => return Err(RemovalError::MarkFailed { pod: key, source }),
        }
    }
    match pods.delete(name, &force_delete()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(RemovalError::Delete { pod: key, source }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    const NOW: &str = "2026-11-26T10:10:54Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn pod(phase: &str, conditions: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("orphan-pending".into()),
                namespace: Some("podgc".into()),
                uid: Some("u-1".into()),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| PodCondition {
                            type_: (*t).into(),
                            status: (*s).into(),
                            last_transition_time: Some(Time(
                                "2026-11-26T10:09:55Z".parse().unwrap(),
                            )),
                            ..PodCondition::default()
                        })
                        .collect(),
                ),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn an_orphan_is_marked_failed_with_kube_controller_managers_disruption_condition() {
        let patch = status_patch(
            &pod("Pending", &[("PodScheduled", "True")]),
            Some(NODE_GONE),
            now(),
        )
        .unwrap();
        assert_eq!(
            patch,
            json!({
                "metadata": {"uid": "u-1"},
                "status": {
                    "phase": "Failed",
                    "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "DisruptionTarget"}],
                    "conditions": [{
                        "type": "DisruptionTarget", "status": "True", "lastProbeTime": null,
                        "lastTransitionTime": NOW, "reason": "DeletionByPodGC",
                        "message": "PodGC: node no longer exists",
                    }],
                },
            })
        );
    }

    #[test]
    fn a_terminal_pod_is_deleted_as_it_is_without_a_status_write() {
        assert_eq!(
            status_patch(&pod("Succeeded", &[]), Some(NODE_GONE), now()),
            None
        );
        assert_eq!(status_patch(&pod("Failed", &[]), None, now()), None);
    }

    #[test]
    fn a_terminating_pod_without_a_condition_to_add_is_only_marked_failed() {
        let patch = status_patch(&pod("Running", &[("Ready", "True")]), None, now()).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"uid": "u-1"}, "status": {"phase": "Failed"}})
        );
    }

    #[test]
    fn an_existing_true_disruption_condition_keeps_its_transition_time() {
        let p = pod("Running", &[("DisruptionTarget", "True")]);
        let patch = status_patch(&p, Some(NODE_GONE), now()).unwrap();
        assert_eq!(
            patch["status"]["conditions"][0]["lastTransitionTime"],
            "2026-11-26T10:09:55Z"
        );
        assert_eq!(
            patch["status"]["$setElementOrder/conditions"],
            json!([{"type": "DisruptionTarget"}])
        );
    }

    #[test]
    fn the_delete_forces_grace_period_zero_and_nothing_else() {
        let params = force_delete();
        assert_eq!(params.grace_period_seconds, Some(0));
        assert_eq!(params.propagation_policy, None);
        assert_eq!(params.preconditions, None);
    }
}
