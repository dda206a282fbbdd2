//! Which nodes a DaemonSet's pods belong on (upstream `NodeShouldRunDaemonPod` and its
//! `predicates`): the template's `nodeName`, `nodeSelector` and required node affinity, and the
//! node's `NoSchedule`/`NoExecute` taints against the template's tolerations plus the daemon ones.
//! Resources and ports are the scheduler's business, as upstream since v1.12.

use flotilla_sdk::k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
};

use super::tolerations::{NO_EXECUTE, NO_SCHEDULE, add_daemon_tolerations, untolerated};

/// What a node means for a DaemonSet's pod there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    /// A pod should run on the node: create one if there is none.
    pub should_run: bool,
    /// A pod already there may stay: false deletes it. True with `should_run` false for a node
    /// tainted `NoSchedule` that the pod does not tolerate but whose `NoExecute` taints it does.
    pub should_continue_running: bool,
}

impl Fit {
    /// A pod belongs on the node.
    pub const RUN: Fit = Fit {
        should_run: true,
        should_continue_running: true,
    };
    /// No new pod goes there, but one already there stays.
    pub const KEEP: Fit = Fit {
        should_run: false,
        should_continue_running: true,
    };
    /// No pod belongs on the node.
    pub const NO: Fit = Fit {
        should_run: false,
        should_continue_running: false,
    };
}

/// Upstream `NodeShouldRunDaemonPod` for the template `spec` on `node`.
pub fn fit(node: &Node, spec: &PodSpec) -> Fit {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    if let Some(wanted) = spec.node_name.as_deref().filter(|n| !n.is_empty())
        && wanted != name
    {
        return Fit::NO;
    }
    if !matches_node_selector(node, spec) || !matches_required_affinity(node, spec) {
        return Fit::NO;
    }
    let mut with_daemon_tolerations = spec.clone();
    add_daemon_tolerations(&mut with_daemon_tolerations);
    let tolerations = with_daemon_tolerations.tolerations.unwrap_or_default();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if untolerated(taints, &tolerations, &[NO_SCHEDULE, NO_EXECUTE]).is_none() {
        return Fit::RUN;
    }
    if untolerated(taints, &tolerations, &[NO_EXECUTE]).is_none() {
        Fit::KEEP
    } else {
        Fit::NO
    }
}

/// Every `spec.nodeSelector` label is on the node with that value.
fn matches_node_selector(node: &Node, spec: &PodSpec) -> bool {
    let Some(selector) = spec.node_selector.as_ref() else {
        return true;
    };
    let labels = node.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// The required node affinity, if any, selects the node: some term matches (a term with no
/// requirement matches nothing, no term nothing).
fn matches_required_affinity(node: &Node, spec: &PodSpec) -> bool {
    let required: Option<&NodeSelector> = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        None => true,
        Some(selector) => selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, node)),
    }
}

fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let name = node.metadata.name.clone().unwrap_or_default();
    expressions
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            // `metadata.name` is the only field a node selector may name; In and NotIn its only
            // operators (validation refuses the others, and upstream matches nothing with them).
            r.key == "metadata.name"
                && matches!(r.operator.as_str(), "In" | "NotIn")
                && requirement_matches(r, Some(&name))
        })
}

/// One requirement against the value the node has for its key (`None`: the key is absent).
fn requirement_matches(requirement: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), [bound]) = (value, values) else {
                return false;
            };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(bound)) if op == "Gt" => v > bound,
                (Ok(v), Ok(bound)) => v < bound,
                _ => false,
            }
        }
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn node(labels: Value, taints: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": labels},
            "spec": {"taints": taints},
        }))
        .unwrap()
    }

    fn spec(value: Value) -> PodSpec {
        let mut v = value;
        v["containers"] = json!([]);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_untainted_node_runs_the_pod_and_a_node_selector_picks_nodes_by_label() {
        let n = node(json!({"zone": "a"}), json!([]));
        assert_eq!(fit(&n, &spec(json!({}))), Fit::RUN);
        assert_eq!(
            fit(&n, &spec(json!({"nodeSelector": {"zone": "a"}}))),
            Fit::RUN
        );
        assert_eq!(
            fit(&n, &spec(json!({"nodeSelector": {"zone": "b"}}))),
            Fit::NO
        );
        assert_eq!(fit(&n, &spec(json!({"nodeName": "n2"}))), Fit::NO);
        assert_eq!(fit(&n, &spec(json!({"nodeName": "n1"}))), Fit::RUN);
    }

    #[test]
    fn a_no_schedule_taint_stops_new_pods_but_keeps_running_ones() {
        let n = node(
            json!({}),
            json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        );
        assert_eq!(
            fit(&n, &spec(json!({}))),
            Fit {
                should_run: false,
                should_continue_running: true
            }
        );
        let tolerant = spec(json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}));
        assert_eq!(fit(&n, &tolerant), Fit::RUN);
    }

    #[test]
    fn a_no_execute_taint_evicts_unless_tolerated() {
        let n = node(json!({}), json!([{"key": "evict", "effect": "NoExecute"}]));
        assert_eq!(fit(&n, &spec(json!({}))), Fit::NO);
        let n = node(
            json!({}),
            json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
        );
        assert_eq!(
            fit(&n, &spec(json!({}))),
            Fit::RUN,
            "daemon pods tolerate not-ready"
        );
    }

    #[test]
    fn a_cordoned_node_keeps_running_daemon_pods_and_gets_new_ones() {
        let mut n = node(
            json!({}),
            json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
        );
        n.spec.as_mut().unwrap().unschedulable = Some(true);
        assert_eq!(fit(&n, &spec(json!({}))), Fit::RUN);
    }

    #[test]
    fn the_network_unavailable_taint_is_tolerated_with_the_hosts_network_only() {
        let n = node(
            json!({}),
            json!([{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]),
        );
        assert!(!fit(&n, &spec(json!({}))).should_run);
        assert!(fit(&n, &spec(json!({"hostNetwork": true}))).should_run);
    }

    #[test]
    fn required_node_affinity_matches_expressions_and_the_name_field() {
        let n = node(json!({"zone": "a", "cores": "16"}), json!([]));
        let affinity = |terms: Value| {
            spec(json!({"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }}}))
        };
        let yes = |terms: Value| fit(&n, &affinity(terms)).should_run;
        assert!(yes(
            json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}])
        ));
        assert!(!yes(
            json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}])
        ));
        assert!(yes(
            json!([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}])
        ));
        assert!(yes(
            json!([{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}])
        ));
        assert!(!yes(
            json!([{"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["8"]}]}])
        ));
        assert!(yes(
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])
        ));
        assert!(!yes(
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}])
        ));
        // Terms are ORed, requirements within a term ANDed; an empty term matches nothing.
        assert!(yes(json!([
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}
        ])));
        assert!(!yes(json!([{"matchExpressions": [
            {"key": "zone", "operator": "Exists"},
            {"key": "gpu", "operator": "Exists"}
        ]}])));
        assert!(!yes(json!([{}])));
        assert!(!yes(json!([])));
    }
}
