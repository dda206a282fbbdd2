//! Which pods one pass of the pod GC deletes, and in which order (upstream `gcTerminated`,
//! `gcTerminating`, `gcOrphaned`, `gcUnscheduledTerminating`): pure functions of the cached pods and
//! nodes, so the choice is tested without a cluster.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Pod};

/// The taint an operator puts on a node that is out of service, so that pods stuck terminating on it
/// may be deleted (upstream `v1.TaintNodeOutOfService`).
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// What the pass needs to know of one Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeState {
    /// Its Ready condition is True.
    pub ready: bool,
    /// It carries the [`OUT_OF_SERVICE_TAINT`] (any value, any effect).
    pub out_of_service: bool,
}

impl NodeState {
    /// The state of `node` as its status and taints say.
    pub fn of(node: &Node) -> Self {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let out_of_service = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .any(|t| t.key == OUT_OF_SERVICE_TAINT);
        Self {
            ready,
            out_of_service,
        }
    }
}

/// Whether the pod has terminated: phase Succeeded or Failed. Upstream counts every phase other
/// than Pending, Running and Unknown; kube-apiserver gives every pod a phase, so the two agree, but a
/// pod without one is kept rather than counted.
pub fn is_terminated(pod: &Pod) -> bool {
    matches!(phase(pod), Some("Succeeded" | "Failed"))
}

/// Whether the pod is being deleted.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// The terminated pods beyond `threshold`, the ones to delete first: evicted before others, then
/// oldest first, names breaking ties (upstream `byEvictionAndCreationTimestamp`). A threshold of
/// zero or less turns this off, as upstream.
pub fn terminated_over_threshold(pods: &[Pod], threshold: i32) -> Vec<&Pod> {
    let Ok(threshold) = usize::try_from(threshold) else {
        return Vec::new();
    };
    if threshold == 0 {
        return Vec::new();
    }
    let mut terminated: Vec<&Pod> = pods.iter().filter(|p| is_terminated(p)).collect();
    let Some(excess) = terminated.len().checked_sub(threshold).filter(|n| *n > 0) else {
        return Vec::new();
    };
    terminated.sort_by(|a, b| deletion_order(a, b));
    terminated.truncate(excess);
    terminated
}

/// Terminating pods on a node that is not Ready and carries the out-of-service taint, in deletion
/// order. Pods whose node is not in the cache are left to the orphan check, as upstream.
pub fn terminating_out_of_service<'a>(
    pods: &'a [Pod],
    nodes: &BTreeMap<String, NodeState>,
) -> Vec<&'a Pod> {
    let mut chosen: Vec<&Pod> = pods
        .iter()
        .filter(|p| is_terminating(p))
        .filter(|p| {
            node_name(p)
                .and_then(|n| nodes.get(n))
                .is_some_and(|n| !n.ready && n.out_of_service)
        })
        .collect();
    chosen.sort_by(|a, b| deletion_order(a, b));
    chosen
}

/// The names of the nodes pods are bound to that the cache does not hold: candidates for the
/// quarantine.
pub fn missing_nodes(pods: &[Pod], nodes: &BTreeMap<String, NodeState>) -> BTreeSet<String> {
    pods.iter()
        .filter_map(node_name)
        .filter(|n| !nodes.contains_key(*n))
        .map(str::to_owned)
        .collect()
}

/// The pods bound to one of the `deleted` nodes.
pub fn orphaned<'a>(pods: &'a [Pod], deleted: &BTreeSet<String>) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|p| node_name(p).is_some_and(|n| deleted.contains(n)))
        .collect()
}

/// Terminating pods never bound to a node: no kubelet will ever finish their deletion.
pub fn unscheduled_terminating(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| is_terminating(p) && node_name(p).is_none())
        .collect()
}

/// Upstream's `byEvictionAndCreationTimestamp`: evicted pods first (a controller's own terminated
/// pods are kept longer), then by creation time, then by name.
fn deletion_order(a: &Pod, b: &Pod) -> Ordering {
    is_evicted(b)
        .cmp(&is_evicted(a))
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Failed with reason Evicted (kubelet's eviction manager; upstream `eviction.PodIsEvicted`).
fn is_evicted(pod: &Pod) -> bool {
    let reason = pod.status.as_ref().and_then(|s| s.reason.as_deref());
    phase(pod) == Some("Failed") && reason == Some("Evicted")
}

fn created(pod: &Pod) -> Option<flotilla_sdk::k8s_openapi::jiff::Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// The node the pod is bound to, if any.
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::{
        NodeCondition, NodeSpec, NodeStatus, PodSpec, PodStatus, Taint,
    };
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use flotilla_sdk::k8s_openapi::jiff::Timestamp;

    use super::*;

    fn pod(name: &str, created: i64, phase: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                creation_timestamp: Some(Time(
                    Timestamp::from_second(1_800_000_000 + created).unwrap(),
                )),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_owned),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }),
        }
    }

    fn deleting(mut p: Pod) -> Pod {
        p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        p
    }

    fn names(pods: &[&Pod]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    fn node(ready: bool, taint: Option<&str>) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: taint.map(|key| {
                    vec![Taint {
                        key: key.into(),
                        effect: "NoExecute".into(),
                        ..Taint::default()
                    }]
                }),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "Unknown" }.into(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn the_oldest_terminated_pods_beyond_the_threshold_are_chosen_oldest_first() {
        let pods = vec![
            pod("term-3", 3, "Succeeded", Some("n")),
            pod("term-1", 1, "Succeeded", Some("n")),
            pod("running", 0, "Running", Some("n")),
            pod("term-5", 5, "Succeeded", Some("n")),
            pod("term-2", 2, "Failed", Some("n")),
            pod("term-4", 4, "Failed", None),
            pod("pending", 0, "Pending", None),
        ];
        assert_eq!(
            names(&terminated_over_threshold(&pods, 3)),
            ["term-1", "term-2"]
        );
        assert!(terminated_over_threshold(&pods, 5).is_empty());
        assert_eq!(terminated_over_threshold(&pods, 4).len(), 1);
    }

    #[test]
    fn evicted_pods_go_before_older_ones_and_names_break_ties_of_age() {
        let mut evicted = pod("young-evicted", 9, "Failed", Some("n"));
        if let Some(status) = evicted.status.as_mut() {
            status.reason = Some("Evicted".into());
        }
        let pods = vec![
            pod("b", 1, "Succeeded", Some("n")),
            pod("a", 1, "Succeeded", Some("n")),
            evicted,
            pod("c", 0, "Failed", Some("n")),
        ];
        assert_eq!(
            names(&terminated_over_threshold(&pods, 1)),
            ["young-evicted", "c", "a"]
        );
    }

    #[test]
    fn a_threshold_of_zero_or_less_turns_the_terminated_pod_gc_off() {
        let pods = vec![pod("t", 1, "Succeeded", None)];
        assert!(terminated_over_threshold(&pods, 0).is_empty());
        assert!(terminated_over_threshold(&pods, -1).is_empty());
    }

    #[test]
    fn pods_without_a_terminal_phase_are_never_counted_as_terminated() {
        let mut no_phase = pod("x", 0, "Pending", None);
        no_phase.status = None;
        assert!(!is_terminated(&no_phase));
        assert!(!is_terminated(&pod("u", 0, "Unknown", None)));
        assert!(is_terminated(&pod("f", 0, "Failed", None)));
    }

    #[test]
    fn only_terminating_pods_on_a_not_ready_out_of_service_node_are_chosen() {
        let nodes: BTreeMap<String, NodeState> = [
            ("down", node(false, Some(OUT_OF_SERVICE_TAINT))),
            ("ready-tainted", node(true, Some(OUT_OF_SERVICE_TAINT))),
            ("down-untainted", node(false, Some("other"))),
        ]
        .into_iter()
        .map(|(n, node)| (n.to_owned(), NodeState::of(&node)))
        .collect();
        let pods = vec![
            deleting(pod("late", 2, "Running", Some("down"))),
            deleting(pod("early", 1, "Running", Some("down"))),
            pod("alive", 0, "Running", Some("down")),
            deleting(pod("on-ready", 0, "Running", Some("ready-tainted"))),
            deleting(pod("untainted", 0, "Running", Some("down-untainted"))),
            deleting(pod("elsewhere", 0, "Running", Some("gone"))),
        ];
        assert_eq!(
            names(&terminating_out_of_service(&pods, &nodes)),
            ["early", "late"]
        );
    }

    #[test]
    fn pods_on_nodes_the_cache_lacks_name_those_nodes_and_become_orphans_once_deleted() {
        let nodes: BTreeMap<String, NodeState> =
            [("here".to_owned(), NodeState::of(&node(true, None)))].into();
        let pods = vec![
            pod("a", 0, "Running", Some("gone")),
            pod("b", 0, "Pending", Some("gone")),
            pod("c", 0, "Running", Some("here")),
            pod("d", 0, "Running", Some("late")),
            pod("e", 0, "Pending", None),
        ];
        let missing = missing_nodes(&pods, &nodes);
        assert_eq!(
            missing,
            BTreeSet::from(["gone".to_owned(), "late".to_owned()])
        );
        let deleted = BTreeSet::from(["gone".to_owned()]);
        assert_eq!(names(&orphaned(&pods, &deleted)), ["a", "b"]);
    }

    #[test]
    fn terminating_pods_never_bound_to_a_node_are_chosen() {
        let pods = vec![
            deleting(pod("unbound", 0, "Pending", None)),
            deleting(pod("bound", 0, "Running", Some("n"))),
            pod("waiting", 0, "Pending", None),
        ];
        assert_eq!(names(&unscheduled_terminating(&pods)), ["unbound"]);
    }
}
