//! Which surplus pods go first: upstream's `ActivePodsWithRanks` order (`controller_utils.go`, with
//! `LogarithmicScaleDown`), so a scale-down removes the pods whose loss hurts least.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

use super::pods::{ready_since, restarts};

/// The `count` pods to delete among `pods`, best candidates first: unscheduled before scheduled,
/// Pending before Unknown before Running, not ready before ready, pods sharing a node with more of
/// their siblings first, more recently ready first, more restarts first, newer first. Ages are compared
/// in powers of two at `now`, as upstream does, so that pods of similar age are picked at random (by
/// uid) rather than always the newest.
pub fn pods_to_delete(pods: &[Pod], count: usize, now: Timestamp) -> Vec<&Pod> {
    let mut on_node: BTreeMap<&str, usize> = BTreeMap::new();
    for node in pods.iter().filter_map(node_name) {
        *on_node.entry(node).or_default() += 1;
    }
    let rank = |pod: &Pod| node_name(pod).map_or(0, |n| on_node.get(n).copied().unwrap_or(0));
    let mut ranked: Vec<&Pod> = pods.iter().collect();
    ranked.sort_by(|a, b| compare(a, rank(a), b, rank(b), now));
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
fn compare(a: &Pod, rank_a: usize, b: &Pod, rank_b: usize, now: Timestamp) -> Ordering {
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
            (Some(ta), Some(tb)) => younger_first(a, ta, b, tb, now),
            _ => Ordering::Equal,
        })
        .then_with(|| restarts(b).cmp(&restarts(a)))
        .then_with(|| younger_first(a, created(a), b, created(b), now))
}

/// Upstream's order of two times: equal times tie; a missing time goes first; otherwise the younger
/// age bucket (`log2` of the age in nanoseconds) goes first, and within a bucket the smaller uid.
fn younger_first(
    a: &Pod,
    ta: Option<Timestamp>,
    b: &Pod,
    tb: Option<Timestamp>,
    now: Timestamp,
) -> Ordering {
    match (ta, tb) {
        _ if ta == tb => Ordering::Equal,
        (Some(ta), Some(tb)) => age_bucket(ta, now)
            .cmp(&age_bucket(tb, now))
            .then_with(|| a.metadata.uid.cmp(&b.metadata.uid)),
        _ => later_first(ta, tb),
    }
}

/// `floor(log2(age in ns))`, -1 for no age.
fn age_bucket(t: Timestamp, now: Timestamp) -> i64 {
    let age = now.as_nanosecond() - t.as_nanosecond();
    if age <= 0 {
        -1
    } else {
        i64::from(127 - age.leading_zeros())
    }
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
    use flotilla_sdk::k8s_openapi::api::core::v1::{
        ContainerStatus, PodCondition, PodSpec, PodStatus,
    };
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn ts(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1000).unwrap()
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
        assert_eq!(names(pods_to_delete(&pods, 1, now())), ["unscheduled"]);
    }

    #[test]
    fn pending_goes_before_unknown_before_running() {
        let pods = [
            pod("running", Some("n1"), "Running", None),
            pod("unknown", Some("n2"), "Unknown", None),
            pod("pending", Some("n3"), "Pending", None),
        ];
        assert_eq!(
            names(pods_to_delete(&pods, 3, now())),
            ["pending", "unknown", "running"]
        );
    }

    #[test]
    fn not_ready_goes_before_ready() {
        let pods = [
            pod("ready", Some("n1"), "Running", Some(10)),
            pod("not-ready", Some("n2"), "Running", None),
        ];
        assert_eq!(names(pods_to_delete(&pods, 1, now())), ["not-ready"]);
    }

    #[test]
    fn a_pod_doubled_up_on_a_node_goes_before_a_pod_alone_on_its_node() {
        let pods = [
            pod("alone", Some("n1"), "Running", Some(10)),
            pod("shared-a", Some("n2"), "Running", Some(10)),
            pod("shared-b", Some("n2"), "Running", Some(10)),
        ];
        let chosen = names(pods_to_delete(&pods, 1, now()));
        assert!(chosen[0].starts_with("shared"), "{chosen:?}");
    }

    #[test]
    fn the_more_recently_ready_pod_goes_first() {
        let pods = [
            pod("old", Some("n1"), "Running", Some(10)),
            pod("recent", Some("n2"), "Running", Some(990)),
        ];
        assert_eq!(names(pods_to_delete(&pods, 1, now())), ["recent"]);
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
        newer.metadata.creation_timestamp = Some(ts(900));
        let older = pod("older", Some("n3"), "Running", None);
        assert_eq!(
            names(pods_to_delete(&[older, newer, restarted], 3, now())),
            ["restarted", "newer", "older"]
        );
    }

    #[test]
    fn pods_of_similar_age_are_ordered_by_uid_not_by_age() {
        // Ready 900 s and 950 s ago: the same power-of-two bucket at now, so the uid decides.
        let mut recent = pod("recent", Some("n1"), "Running", Some(100));
        recent.metadata.uid = Some("b".into());
        let mut earlier = pod("earlier", Some("n2"), "Running", Some(50));
        earlier.metadata.uid = Some("a".into());
        assert_eq!(
            names(pods_to_delete(&[recent, earlier], 1, now())),
            ["earlier"]
        );
    }

    #[test]
    fn asking_for_more_than_there_are_returns_them_all() {
        let pods = [pod("a", None, "Pending", None)];
        assert_eq!(pods_to_delete(&pods, 5, now()).len(), 1);
    }
}
