//! Which surplus pods go first: upstream's `ActivePodsWithRanks` order (`controller_utils.go`), so a
//! scale-down removes the pods whose loss hurts least.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::pods::{ready_since, restarts};

/// The `count` pods to delete among `pods`, best candidates first: unscheduled before scheduled,
/// Pending before Unknown before Running, not ready before ready, pods sharing a node with more of
/// their siblings first, more recently ready first, more restarts first, newer first.
pub fn pods_to_delete(pods: &[Pod], count: usize) -> Vec<&Pod> {
    let mut on_node: BTreeMap<&str, usize> = BTreeMap::new();
    for node in pods.iter().filter_map(node_name) {
        *on_node.entry(node).or_default() += 1;
    }
    let rank = |pod: &Pod| node_name(pod).map_or(0, |n| on_node.get(n).copied().unwrap_or(0));
    let mut ranked: Vec<&Pod> = pods.iter().collect();
    ranked.sort_by(|a, b| compare(a, rank(a), b, rank(b)));
    ranked.truncate(count);
    ranked
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

fn phase_order(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 3,
    }
}

/// `Less` means `a` is deleted before `b`.
fn compare(a: &Pod, rank_a: usize, b: &Pod, rank_b: usize) -> Ordering {
    let ready_a = ready_since(a);
    let ready_b = ready_since(b);
    node_name(a)
        .is_some()
        .cmp(&node_name(b).is_some())
        .then_with(|| phase_order(a).cmp(&phase_order(b)))
        .then_with(|| ready_a.is_some().cmp(&ready_b.is_some()))
        .then_with(|| rank_b.cmp(&rank_a))
        .then_with(|| match (ready_a, ready_b) {
            // Both ready: the one ready for less time goes first; an unknown time counts as newest.
            (Some(ta), Some(tb)) => later_first(ta, tb),
            _ => Ordering::Equal,
        })
        .then_with(|| restarts(b).cmp(&restarts(a)))
        .then_with(|| later_first(created(a), created(b)))
}

fn created(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// Missing first, then the later time first.
fn later_first(a: Option<Timestamp>, b: Option<Timestamp>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => b.cmp(&a),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn ts(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn pod(name: &str, node: Option<&str>, phase: &str, ready_at: Option<i64>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.creation_timestamp = Some(ts(100));
        pod.spec = Some(PodSpec {
            node_name: node.map(str::to_owned),
            ..PodSpec::default()
        });
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: ready_at.map(|t| {
                vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(ts(t)),
                    ..PodCondition::default()
                }]
            }),
            ..PodStatus::default()
        });
        pod
    }

    fn names(pods: Vec<&Pod>) -> Vec<&str> {
        pods.into_iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn unscheduled_pods_go_before_scheduled_ones() {
        let pods = [
            pod("running", Some("n1"), "Running", Some(10)),
            pod("unscheduled", None, "Pending", None),
        ];
        assert_eq!(names(pods_to_delete(&pods, 1)), ["unscheduled"]);
    }

    #[test]
    fn pending_goes_before_unknown_before_running() {
        let pods = [
            pod("running", Some("n1"), "Running", None),
            pod("unknown", Some("n2"), "Unknown", None),
            pod("pending", Some("n3"), "Pending", None),
        ];
        assert_eq!(
            names(pods_to_delete(&pods, 3)),
            ["pending", "unknown", "running"]
        );
    }

    #[test]
    fn not_ready_goes_before_ready() {
        let pods = [
            pod("ready", Some("n1"), "Running", Some(10)),
            pod("not-ready", Some("n2"), "Running", None),
        ];
        assert_eq!(names(pods_to_delete(&pods, 1)), ["not-ready"]);
    }

    #[test]
    fn a_pod_doubled_up_on_a_node_goes_before_a_pod_alone_on_its_node() {
        let pods = [
            pod("alone", Some("n1"), "Running", Some(10)),
            pod("shared-a", Some("n2"), "Running", Some(10)),
            pod("shared-b", Some("n2"), "Running", Some(10)),
        ];
        let chosen = names(pods_to_delete(&pods, 1));
        assert!(chosen[0].starts_with("shared"), "{chosen:?}");
    }

    #[test]
    fn the_more_recently_ready_pod_goes_first() {
        let pods = [
            pod("old", Some("n1"), "Running", Some(10)),
            pod("recent", Some("n2"), "Running", Some(50)),
        ];
        assert_eq!(names(pods_to_delete(&pods, 1)), ["recent"]);
    }

    #[test]
    fn more_restarts_go_first_then_newer_pods() {
        let mut restarted = pod("restarted", Some("n1"), "Running", None);
        if let Some(status) = restarted.status.as_mut() {
            status.container_statuses = Some(vec![ContainerStatus {
                restart_count: 3,
                ..ContainerStatus::default()
            }]);
        }
        let mut newer = pod("newer", Some("n2"), "Running", None);
        newer.metadata.creation_timestamp = Some(ts(200));
        let older = pod("older", Some("n3"), "Running", None);
        assert_eq!(
            names(pods_to_delete(&[older, newer, restarted], 3)),
            ["restarted", "newer", "older"]
        );
    }

    #[test]
    fn asking_for_more_than_there_are_returns_them_all() {
        let pods = [pod("a", None, "Pending", None)];
        assert_eq!(pods_to_delete(&pods, 5).len(), 1);
    }
}
