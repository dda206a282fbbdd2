//! Pods on a node this controller marked Unknown lose their readiness (upstream `MarkPodsNotReady`):
//! the Ready condition set False, its reason and message kept, nothing else touched (ContainersReady
//! and the phase stay, as kube-controller-manager v1.32 leaves them). Readiness is never set back:
//! that is the kubelet's, once it reports again.

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// The strategic merge patch of `pods/status` setting the pod's Ready condition False at `now`, or
/// `None` when the pod is not on `node`, has no Ready condition or is not ready already (upstream
/// writes, and records its Event, only then). It carries the pod's UID, so it cannot land on another
/// pod of the same name.
pub fn not_ready_patch(pod: &Pod, node: &str, now: Timestamp) -> Option<Value> {
    if pod.spec.as_ref()?.node_name.as_deref() != Some(node) {
        return None;
    }
    let ready = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    if ready.status == "False" {
        return None;
    }
    Some(json!({
        "metadata": {"uid": pod.metadata.uid},
        "status": {"conditions": [{
            "type": "Ready",
            "status": "False",
            "lastTransitionTime": Time(now),
        }]},
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(node: &str, ready: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"conditions": [
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": ready, "lastProbeTime": null},
            ]},
        }))
        .unwrap()
    }

    #[test]
    fn only_the_ready_condition_of_a_ready_pod_on_the_node_turns_false() {
        let now: Timestamp = "2026-11-26T10:09:06Z".parse().unwrap();
        assert_eq!(
            not_ready_patch(&pod("nl-dark", "True"), "nl-dark", now),
            Some(json!({
                "metadata": {"uid": "u1"},
                "status": {"conditions": [{"type": "Ready", "status": "False",
                                           "lastTransitionTime": "2026-11-26T10:09:06Z"}]},
            }))
        );
        assert_eq!(
            not_ready_patch(&pod("nl-dark", "False"), "nl-dark", now),
            None
        );
        assert_eq!(
            not_ready_patch(&pod("nl-live", "True"), "nl-dark", now),
            None
        );
    }
}
