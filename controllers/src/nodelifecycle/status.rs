//! The node conditions written when a node's grace period ran out (upstream `tryUpdateNodeHealth`):
//! Ready, MemoryPressure, DiskPressure and PIDPressure set Unknown, `NetworkUnavailable` left alone
//! (the control plane owns it). Built by pure functions, checked against what kube-controller-manager
//! v1.32 writes.

use flotilla_sdk::k8s_openapi::api::core::v1::{Node, NodeCondition};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// The conditions the kubelet keeps and this controller marks Unknown, in upstream's order.
pub const KUBELET_CONDITIONS: [&str; 4] =
    ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// The reason of a condition the kubelet stopped posting.
pub const STATUS_UNKNOWN: &str = "NodeStatusUnknown";
/// The reason of a condition the kubelet never posted.
pub const NEVER_UPDATED: &str = "NodeStatusNeverUpdated";

/// The node's condition of type `type_`, if any.
pub fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The status of the node's Ready condition (`True`, `False`, `Unknown`), if it has one.
pub fn ready_status(node: &Node) -> Option<&str> {
    condition(node, "Ready").map(|c| c.status.as_str())
}

/// Whether this controller (not the kubelet) set the node's Ready condition Unknown.
pub fn marked_unknown(node: &Node) -> bool {
    condition(node, "Ready").is_some_and(|c| {
        c.status == "Unknown" && matches!(c.reason.as_deref(), Some(STATUS_UNKNOWN | NEVER_UPDATED))
    })
}

/// The node's conditions with the kubelet's ones Unknown as of `now`, or `None` when the Ready
/// condition would not change (it is Unknown already): upstream writes only then. A condition that
/// is Unknown keeps its reason and transition time; a missing one is added as never posted, its
/// heartbeat the node's creation.
pub fn unknown_conditions(node: &Node, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let mut conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let before = conditions.iter().find(|c| c.type_ == "Ready").cloned();
    for type_ in KUBELET_CONDITIONS {
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) if c.status != "Unknown" => {
                c.status = "Unknown".to_owned();
                c.reason = Some(STATUS_UNKNOWN.to_owned());
                c.message = Some("Kubelet stopped posting node status.".to_owned());
                c.last_transition_time = Some(Time(now));
            }
            Some(_) => {}
            None => conditions.push(NodeCondition {
                type_: type_.to_owned(),
                status: "Unknown".to_owned(),
                reason: Some(NEVER_UPDATED.to_owned()),
                message: Some("Kubelet never posted node status.".to_owned()),
                last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                last_transition_time: Some(Time(now)),
            }),
        }
    }
    let after = conditions.iter().find(|c| c.type_ == "Ready");
    (before.as_ref() != after).then_some(conditions)
}

/// The merge patch of `nodes/status` writing `conditions`, conditional on the resourceVersion the
/// decision was made on: a heartbeat posted meanwhile makes it fail with 409 rather than be
/// overwritten (upstream's `UpdateStatus` has the same guard).
pub fn status_patch(node: &Node, conditions: &[NodeCondition]) -> Value {
    json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "status": {"conditions": conditions},
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn node(conditions: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "nl-dark", "resourceVersion": "9", "creationTimestamp": "2026-11-26T10:08:44Z"},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn kubelet(type_: &str, status: &str, reason: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": "m",
               "lastHeartbeatTime": "2026-11-26T10:08:44Z", "lastTransitionTime": "2026-11-26T10:08:44Z"})
    }

    #[test]
    fn every_kubelet_condition_turns_unknown_as_the_fixture_shows() {
        let n = node(json!([
            kubelet("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            kubelet("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            kubelet("PIDPressure", "False", "KubeletHasSufficientPID"),
            kubelet("Ready", "True", "KubeletReady"),
            kubelet("NetworkUnavailable", "False", "RouteCreated"),
        ]));
        let now: Timestamp = "2026-11-26T10:09:06Z".parse().unwrap();
        let conditions = unknown_conditions(&n, now).unwrap();
        let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [
                "MemoryPressure",
                "DiskPressure",
                "PIDPressure",
                "Ready",
                "NetworkUnavailable"
            ]
        );
        for c in &conditions[..4] {
            let c = serde_json::to_value(c).unwrap();
            assert_eq!(
                c,
                json!({"type": c["type"], "status": "Unknown", "reason": "NodeStatusUnknown",
                       "message": "Kubelet stopped posting node status.",
                       "lastHeartbeatTime": "2026-11-26T10:08:44Z",
                       "lastTransitionTime": "2026-11-26T10:09:06Z"})
            );
        }
        assert_eq!(conditions[4].status, "False", "the control plane's own");
        let mut marked = n.clone();
        marked.status.as_mut().unwrap().conditions = Some(conditions);
        assert!(marked_unknown(&marked));
        assert_eq!(unknown_conditions(&marked, now), None, "already Unknown");
    }

    #[test]
    fn a_node_that_never_posted_gets_never_updated_conditions() {
        let n = node(json!([]));
        let now: Timestamp = "2026-11-26T10:10:00Z".parse().unwrap();
        let conditions = unknown_conditions(&n, now).unwrap();
        assert_eq!(conditions.len(), 4);
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.reason.as_deref(), Some(NEVER_UPDATED));
        assert_eq!(
            ready.last_heartbeat_time, n.metadata.creation_timestamp,
            "upstream's heartbeat of a condition never posted"
        );
        let patch = status_patch(&n, &conditions);
        assert_eq!(patch["metadata"]["resourceVersion"], "9");
    }
}
