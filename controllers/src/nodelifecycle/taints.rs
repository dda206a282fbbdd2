//! The taints this controller keeps on a node: the NoSchedule taints mirroring its conditions and
//! `spec.unschedulable` (upstream `doNoScheduleTaintingPass`), and the NoExecute `not-ready` /
//! `unreachable` taint mirroring its Ready condition (upstream `processTaintBaseEviction`). Pure
//! functions over the node; the rate limit of adding a NoExecute taint is [`super::limiter`]'s.

use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Taint};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::status::ready_status;

/// `node.kubernetes.io/not-ready`: Ready is False.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// `node.kubernetes.io/unreachable`: Ready is Unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// `node.kubernetes.io/unschedulable`: `spec.unschedulable`.
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

const NO_SCHEDULE: &str = "NoSchedule";
const NO_EXECUTE: &str = "NoExecute";

/// Upstream's `nodeConditionToTaintKeyStatusMap`: the NoSchedule taint a condition in a status asks
/// for.
fn condition_taint(type_: &str, status: &str) -> Option<&'static str> {
    match (type_, status) {
        ("Ready", "False") => Some(NOT_READY),
        ("Ready", "Unknown") => Some(UNREACHABLE),
        ("MemoryPressure", "True") => Some("node.kubernetes.io/memory-pressure"),
        ("DiskPressure", "True") => Some("node.kubernetes.io/disk-pressure"),
        ("NetworkUnavailable", "True") => Some("node.kubernetes.io/network-unavailable"),
        ("PIDPressure", "True") => Some("node.kubernetes.io/pid-pressure"),
        _ => None,
    }
}

/// Whether `key` is a taint this controller derives from conditions or `spec.unschedulable`.
fn is_managed_no_schedule(key: &str) -> bool {
    matches!(
        key,
        NOT_READY
            | UNREACHABLE
            | UNSCHEDULABLE
            | "node.kubernetes.io/memory-pressure"
            | "node.kubernetes.io/disk-pressure"
            | "node.kubernetes.io/network-unavailable"
            | "node.kubernetes.io/pid-pressure"
    )
}

/// The NoExecute taint key the Ready condition's status asks for (`False` → not-ready, `Unknown` →
/// unreachable), none for `True` or no condition.
pub fn no_execute_key(ready: Option<&str>) -> Option<&'static str> {
    match ready {
        Some("False") => Some(NOT_READY),
        Some("Unknown") => Some(UNREACHABLE),
        _ => None,
    }
}

/// Whether a taint is one of this controller's NoExecute taints.
pub fn is_lifecycle_no_execute(t: &Taint) -> bool {
    t.effect == NO_EXECUTE && (t.key == NOT_READY || t.key == UNREACHABLE)
}

/// The node's taints.
pub fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// Whether the node carries NoExecute taint `key`.
pub fn has_no_execute(node: &Node, key: &str) -> bool {
    taints(node)
        .iter()
        .any(|t| t.effect == NO_EXECUTE && t.key == key)
}

/// The newest `timeAdded` of the node's lifecycle NoExecute taints.
pub fn newest_no_execute(node: &Node) -> Option<Timestamp> {
    taints(node)
        .iter()
        .filter(|t| is_lifecycle_no_execute(t))
        .filter_map(|t| t.time_added.as_ref().map(|t| t.0))
        .max()
}

fn taint(key: &str, effect: &str, now: Timestamp) -> Taint {
    Taint {
        key: key.to_owned(),
        effect: effect.to_owned(),
        time_added: Some(Time(now)),
        value: None,
    }
}

/// The taints the node should carry at `now` before any rate-limited NoExecute taint is added: the
/// NoSchedule taints its conditions ask for (added with `timeAdded`, the stale ones removed, others'
/// taints kept in place), its lifecycle NoExecute taint removed when Ready, or swapped at once
/// between not-ready and unreachable when the Ready status changed between the two (upstream does not
/// rate-limit a swap). `None` when nothing changes.
pub fn plan(node: &Node, now: Timestamp) -> Option<Vec<Taint>> {
    let current = taints(node);
    let mut wanted: Vec<&'static str> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|c| condition_taint(&c.type_, &c.status))
        .collect();
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        wanted.push(UNSCHEDULABLE);
    }
    let ready = ready_status(node);
    let mut next: Vec<Taint> = current
        .iter()
        .filter(|t| {
            let stale_no_schedule = t.effect == NO_SCHEDULE
                && is_managed_no_schedule(&t.key)
                && !wanted.contains(&t.key.as_str());
            let stale_no_execute = is_lifecycle_no_execute(t)
                && ready.is_some()
                && no_execute_key(ready) != Some(t.key.as_str());
            !stale_no_schedule && !stale_no_execute
        })
        .cloned()
        .collect();
    for key in wanted {
        if !next.iter().any(|t| t.effect == NO_SCHEDULE && t.key == key) {
            next.push(taint(key, NO_SCHEDULE, now));
        }
    }
    // A swap: the opposite NoExecute taint was there and is gone from `next`.
    if let Some(key) = no_execute_key(ready) {
        let had_opposite = current
            .iter()
            .any(|t| is_lifecycle_no_execute(t) && t.key != key);
        if had_opposite && !next.iter().any(|t| t.effect == NO_EXECUTE && t.key == key) {
            next.push(taint(key, NO_EXECUTE, now));
        }
    }
    (next.as_slice() != current).then_some(next)
}

/// The node's taints plus NoExecute taint `key` added at `now`.
pub fn with_no_execute(node: &Node, key: &str, now: Timestamp) -> Vec<Taint> {
    let mut next = taints(node).to_vec();
    next.push(taint(key, NO_EXECUTE, now));
    next
}

/// The node's taints without its lifecycle NoExecute taints (master disruption mode).
pub fn without_no_execute(node: &Node) -> Vec<Taint> {
    taints(node)
        .iter()
        .filter(|t| !is_lifecycle_no_execute(t))
        .cloned()
        .collect()
}

/// The merge patch setting the node's taints to `taints`, conditional on the resourceVersion the
/// decision was made on (upstream's `PatchNodeTaints` carries it too: `spec.taints` has no merge key,
/// so only a precondition keeps a concurrent change from being lost).
pub fn taints_patch(node: &Node, taints: &[Taint]) -> Value {
    let taints = if taints.is_empty() {
        Value::Null
    } else {
        json!(taints)
    };
    json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": taints},
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn node(ready: &str, taints: Value, unschedulable: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "resourceVersion": "3"},
            "spec": {"taints": taints, "unschedulable": unschedulable},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready},
            ]},
        }))
        .unwrap()
    }

    fn keys(taints: &[Taint]) -> Vec<(String, String)> {
        taints
            .iter()
            .map(|t| (t.key.clone(), t.effect.clone()))
            .collect()
    }

    fn pair(key: &str, effect: &str) -> (String, String) {
        (key.to_owned(), effect.to_owned())
    }

    const NOW: &str = "2026-11-26T10:09:06Z";

    #[test]
    fn an_unknown_node_gets_the_unreachable_no_schedule_taint_with_its_time() {
        let n = node("Unknown", json!([]), false);
        let next = plan(&n, NOW.parse().unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&next).unwrap(),
            json!([{"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": NOW}])
        );
        assert_eq!(
            plan(&node("True", json!([]), false), NOW.parse().unwrap()),
            None
        );
    }

    #[test]
    fn a_ready_node_loses_every_lifecycle_taint_and_keeps_others() {
        let n = node(
            "True",
            json!([
                {"key": UNREACHABLE, "effect": "NoSchedule"},
                {"key": "team", "value": "a", "effect": "NoSchedule"},
                {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": NOW},
            ]),
            true,
        );
        let next = plan(&n, NOW.parse().unwrap()).unwrap();
        assert_eq!(
            keys(&next),
            [
                pair("team", "NoSchedule"),
                pair(UNSCHEDULABLE, "NoSchedule")
            ]
        );
    }

    #[test]
    fn not_ready_and_unreachable_swap_at_once_but_a_first_no_execute_taint_is_not_planned() {
        let n = node(
            "False",
            json!([
                {"key": UNREACHABLE, "effect": "NoSchedule"},
                {"key": UNREACHABLE, "effect": "NoExecute"},
            ]),
            false,
        );
        let next = plan(&n, NOW.parse().unwrap()).unwrap();
        assert_eq!(
            keys(&next),
            [pair(NOT_READY, "NoSchedule"), pair(NOT_READY, "NoExecute")]
        );
        let fresh = node(
            "False",
            json!([{"key": NOT_READY, "effect": "NoSchedule"}]),
            false,
        );
        assert_eq!(
            plan(&fresh, NOW.parse().unwrap()),
            None,
            "rate-limited elsewhere"
        );
        let added = with_no_execute(&fresh, NOT_READY, NOW.parse().unwrap());
        assert_eq!(
            newest_no_execute(&node("False", json!(added), false)),
            Some(NOW.parse().unwrap())
        );
        assert!(without_no_execute(&node("False", json!(added), false)).len() == 1);
        let patch = taints_patch(&fresh, &[]);
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "3"}, "spec": {"taints": null}})
        );
    }
}
