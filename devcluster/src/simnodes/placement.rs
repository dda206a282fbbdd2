//! Which simulated node a pending pod is bound to: the nodes whose labels satisfy the pod's
//! `spec.nodeSelector` and whose labels and name satisfy its required node affinity (the terms
//! ORed, each term's `matchExpressions` and `matchFields` ANDed, as the scheduler's NodeAffinity
//! filter), taken round-robin. So a DaemonSet's pod, pinned by a `metadata.name` matchField, lands on
//! its node. Resources, preferred affinity, pod affinity and taints are not considered — the
//! simulator stands in for a scheduler only so that workloads make progress.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod};

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
        let spec = pod.spec.as_ref();
        let selector = spec.and_then(|spec| spec.node_selector.as_ref());
        let required = spec
            .and_then(|spec| spec.affinity.as_ref())
            .and_then(|affinity| affinity.node_affinity.as_ref())
            .and_then(|affinity| {
                affinity
                    .required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
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
            .filter(|node| {
                required.is_none_or(|required| {
                    required
                        .node_selector_terms
                        .iter()
                        .any(|term| term_matches(term, node))
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

/// Whether a node selector term matches `node`: every expression against its labels and every field
/// (only `metadata.name` exists) against its name. A term with neither matches nothing, as upstream.
fn term_matches(term: &NodeSelectorTerm, node: &Candidate<'_>) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_matches(r, node.labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let value = (r.key == "metadata.name").then_some(node.name);
            value.is_some() && requirement_matches(r, value)
        })
}

/// One requirement against a label's (or field's) value, `None` when the node lacks it. `Gt` and
/// `Lt` compare integers; an unknown operator matches nothing.
fn requirement_matches(requirement: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    let compare = |order: std::cmp::Ordering| {
        let bound = values.first().and_then(|v| v.parse::<i64>().ok());
        let got = value.and_then(|v| v.parse::<i64>().ok());
        matches!((got, bound), (Some(got), Some(bound)) if got.cmp(&bound) == order)
    };
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|w| w == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|w| w != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(std::cmp::Ordering::Greater),
        "Lt" => compare(std::cmp::Ordering::Less),
        _ => false,
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
    fn required_node_affinity_pins_by_name_and_filters_by_expressions() {
        let (a, b) = (
            labels(&[("zone", "x"), ("cores", "4")]),
            labels(&[("zone", "y"), ("cores", "16")]),
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
        let affinity = |terms: serde_json::Value| {
            pod(json!({"containers": [], "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
            }}}))
        };
        // A DaemonSet pod's pin, as the daemonset controller writes it.
        let pinned = affinity(json!([{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["a"]},
        ]}]));
        for _ in 0..3 {
            assert_eq!(placement.choose(&pinned, &nodes), Some("a"));
        }
        let big = affinity(json!([{"matchExpressions": [
            {"key": "cores", "operator": "Gt", "values": ["8"]},
            {"key": "zone", "operator": "NotIn", "values": ["x"]},
        ]}]));
        assert_eq!(placement.choose(&big, &nodes), Some("b"));
        let either = affinity(json!([
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
        ]));
        assert_eq!(placement.choose(&either, &nodes), Some("a"));
        let empty_term = affinity(json!([{}]));
        assert_eq!(
            placement.choose(&empty_term, &nodes),
            None,
            "an empty term matches nothing"
        );
        let elsewhere = affinity(json!([{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["gone"]},
        ]}]));
        assert_eq!(placement.choose(&elsewhere, &nodes), None);
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
