//! Which simulated node a pending pod is bound to: the nodes whose labels satisfy the pod's
//! `spec.nodeSelector`, taken round-robin. Resources, affinity and taints are not considered —
//! the simulator stands in for a scheduler only so that workloads make progress.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

/// The scheduler name the simulator acts for; pods naming another scheduler are left alone.
pub(crate) const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// Round-robin choice among the eligible nodes.
#[derive(Debug, Default)]
pub(crate) struct Placement {
    next: usize,
}

/// A candidate node: its name, its labels, and whether it is up.
pub(crate) struct Candidate<'a> {
    pub(crate) name: &'a str,
    pub(crate) labels: &'a BTreeMap<String, String>,
    pub(crate) up: bool,
}

impl Placement {
    /// The node to bind `pod` to, or `None` when no running node matches its nodeSelector.
    pub(crate) fn choose<'a>(&mut self, pod: &Pod, nodes: &[Candidate<'a>]) -> Option<&'a str> {
        let selector = pod
            .spec
            .as_ref()
            .and_then(|spec| spec.node_selector.as_ref());
        let eligible: Vec<&Candidate<'a>> = nodes
            .iter()
            .filter(|node| node.up)
            .filter(|node| {
                selector.is_none_or(|selector| {
                    selector
                        .iter()
                        .all(|(key, value)| node.labels.get(key) == Some(value))
                })
            })
            .collect();
        if eligible.is_empty() {
            return None;
        }
        let chosen = eligible[self.next % eligible.len()].name;
        self.next = self.next.wrapping_add(1);
        Some(chosen)
    }
}

/// Whether the simulator should bind `pod`: unbound, not being deleted, not finished, and meant for
/// the default scheduler.
pub(crate) fn wants_binding(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let unbound = spec.node_name.as_deref().is_none_or(str::is_empty);
    let ours = spec
        .scheduler_name
        .as_deref()
        .is_none_or(|name| name.is_empty() || name == DEFAULT_SCHEDULER);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let finished = matches!(phase, Some("Succeeded" | "Failed"));
    unbound && ours && !finished && pod.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pods_without_a_selector_are_spread_round_robin_over_running_nodes() {
        let (a, b, c) = (labels(&[]), labels(&[]), labels(&[]));
        let nodes = [
            Candidate {
                name: "a",
                labels: &a,
                up: true,
            },
            Candidate {
                name: "b",
                labels: &b,
                up: false,
            },
            Candidate {
                name: "c",
                labels: &c,
                up: true,
            },
        ];
        let mut placement = Placement::default();
        let p = pod(json!({"containers": []}));
        let chosen: Vec<_> = (0..4).map(|_| placement.choose(&p, &nodes)).collect();
        assert_eq!(chosen, vec![Some("a"), Some("c"), Some("a"), Some("c")]);
    }

    #[test]
    fn a_node_selector_restricts_the_candidates() {
        let (a, b) = (
            labels(&[("zone", "x")]),
            labels(&[("zone", "y"), ("gpu", "1")]),
        );
        let nodes = [
            Candidate {
                name: "a",
                labels: &a,
                up: true,
            },
            Candidate {
                name: "b",
                labels: &b,
                up: true,
            },
        ];
        let mut placement = Placement::default();
        let p = pod(json!({"containers": [], "nodeSelector": {"zone": "y"}}));
        assert_eq!(placement.choose(&p, &nodes), Some("b"));
        assert_eq!(placement.choose(&p, &nodes), Some("b"));
        let none = pod(json!({"containers": [], "nodeSelector": {"zone": "z"}}));
        assert_eq!(placement.choose(&none, &nodes), None);
    }

    #[test]
    fn only_unbound_default_scheduler_pods_want_binding() {
        assert!(wants_binding(&pod(json!({"containers": []}))));
        assert!(wants_binding(&pod(
            json!({"containers": [], "schedulerName": "default-scheduler"})
        )));
        assert!(!wants_binding(&pod(
            json!({"containers": [], "schedulerName": "custom"})
        )));
        assert!(!wants_binding(&pod(
            json!({"containers": [], "nodeName": "n"})
        )));
    }
}
