//! What a sync creates and deletes so each eligible node runs one daemon pod (upstream `manage` and
//! `podsShouldBeOnNode`): a pod for a node that should run one and has none; deletion of pods on nodes
//! that must not keep them, of failed pods (with back-off) and succeeded ones, of surplus pods (the
//! oldest stays; with surge, the old and new pod of an unfinished replacement), and of unscheduled
//! pods for nodes that no longer exist. Bound pods of a deleted node are the pod GC's, as upstream.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube::ResourceExt;

use super::backoff::{self, FailedPodBackoff};
use super::nodes::Fit;
use super::pods::{
    is_available, is_deleting, is_failed, is_ready, is_scheduled, is_succeeded, oldest_first,
};

/// An Event the plan asks to record on the DaemonSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Warning rather than Normal.
    pub warning: bool,
    /// `FailedDaemonPod` or `SucceededDaemonPod`.
    pub reason: &'static str,
    /// Upstream's message.
    pub message: String,
}

/// Creates and deletes toward one pod per node.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Nodes to create a pod for.
    pub create_on: Vec<String>,
    /// Pods to delete, by name.
    pub delete: Vec<String>,
    /// Events to record.
    pub notes: Vec<Note>,
    /// Look again after this long (a failed pod waiting out its back-off).
    pub requeue_after: Option<Duration>,
}

/// The DaemonSet facts the plan needs.
pub struct Daemon<'a> {
    /// The DaemonSet's uid (back-off key).
    pub uid: &'a str,
    /// Its namespace (for messages).
    pub namespace: &'a str,
    /// The current revision's hash.
    pub hash: &'a str,
    /// More than one pod per node allowed during a rolling update (maxSurge above zero).
    pub allows_surge: bool,
    /// `spec.minReadySeconds`.
    pub min_ready_seconds: i32,
}

/// Upstream `manage` for the nodes `fits` (every node that exists, with what it means for the pod)
/// and the pods `by_node` (see [`super::pods::by_node`]), at `now` (pod availability) and `instant`
/// (back-off).
pub fn plan(
    daemon: &Daemon<'_>,
    fits: &BTreeMap<String, Fit>,
    by_node: &BTreeMap<String, Vec<Pod>>,
    failed_backoff: &FailedPodBackoff,
    now: Timestamp,
    instant: Instant,
) -> Plan {
    let mut plan = Plan::default();
    let none = Vec::new();
    for (node, fit) in fits {
        let pods = by_node.get(node).unwrap_or(&none);
        on_node(
            daemon,
            node,
            *fit,
            pods,
            failed_backoff,
            now,
            instant,
            &mut plan,
        );
    }
    // Pods for nodes that no longer exist: upstream deletes those the scheduler never bound.
    let existing: BTreeSet<&String> = fits.keys().collect();
    for (node, pods) in by_node {
        if !existing.contains(node) {
            plan.delete.extend(
                pods.iter()
                    .filter(|p| !is_scheduled(p) && !is_deleting(p))
                    .map(ResourceExt::name_any),
            );
        }
    }
    plan
}

#[allow(clippy::too_many_arguments)]
fn on_node(
    daemon: &Daemon<'_>,
    node: &str,
    fit: Fit,
    pods: &[Pod],
    failed_backoff: &FailedPodBackoff,
    now: Timestamp,
    instant: Instant,
    plan: &mut Plan,
) {
    let exists = !pods.is_empty();
    if fit.should_run && !exists {
        plan.create_on.push(node.to_owned());
        return;
    }
    if !fit.should_continue_running {
        plan.delete.extend(
            pods.iter()
                .filter(|p| !is_deleting(p))
                .map(ResourceExt::name_any),
        );
        return;
    }
    let mut running: Vec<&Pod> = Vec::new();
    for pod in pods.iter().filter(|p| !is_deleting(p)) {
        let name = pod.name_any();
        if is_failed(pod) {
            let key = backoff::key(daemon.uid, node);
            if let Some(delay) = failed_backoff.in_backoff(&key, instant) {
                plan.requeue_after = Some(plan.requeue_after.map_or(delay, |d| d.min(delay)));
                continue;
            }
            failed_backoff.next(&key, instant);
            plan.notes.push(Note {
                warning: true,
                reason: "FailedDaemonPod",
                message: format!(
                    "Found failed daemon pod {}/{name} on node {node}, will try to kill it",
                    daemon.namespace
                ),
            });
            plan.delete.push(name);
        } else if is_succeeded(pod) {
            plan.notes.push(Note {
                warning: false,
                reason: "SucceededDaemonPod",
                message: format!(
                    "Found succeeded daemon pod {}/{name} on node {node}, will try to delete it",
                    daemon.namespace
                ),
            });
            plan.delete.push(name);
        } else {
            running.push(pod);
        }
    }
    running.sort_by(|a, b| oldest_first(a, b));
    if !daemon.allows_surge {
        // One pod per node: the oldest stays.
        plan.delete
            .extend(running.iter().skip(1).map(|p| p.name_any()));
        return;
    }
    if running.len() <= 1 {
        if running.is_empty() && fit.should_run {
            // Surging needs at least one pod that is not being deleted.
            plan.create_on.push(node.to_owned());
        }
        return;
    }
    // Two pods are allowed while a replacement is under way: the oldest of the current revision and
    // the oldest of an older one; every other goes. The old one goes too once it is not ready, or
    // once the new one is available.
    let mut newest: Option<&Pod> = None;
    let mut oldest_old: Option<&Pod> = None;
    for pod in running {
        let current = pod
            .labels()
            .get(super::super::history::DAEMONSET_HASH_LABEL)
            .map(String::as_str)
            == Some(daemon.hash);
        let slot = if current {
            &mut newest
        } else {
            &mut oldest_old
        };
        if slot.is_none() {
            *slot = Some(pod);
        } else {
            plan.delete.push(pod.name_any());
        }
    }
    if let (Some(new), Some(old)) = (newest, oldest_old)
        && (!is_ready(old) || is_available(new, daemon.min_ready_seconds, now))
    {
        plan.delete.push(old.name_any());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::super::pods::tests::pod;
    use super::*;

    fn daemon(surge: bool) -> Daemon<'static> {
        Daemon {
            uid: "u",
            namespace: "ns",
            hash: "new",
            allows_surge: surge,
            min_ready_seconds: 0,
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn fits(list: &[(&str, Fit)]) -> BTreeMap<String, Fit> {
        list.iter().map(|(n, f)| ((*n).to_owned(), *f)).collect()
    }

    fn grouped(pods: Vec<Pod>) -> BTreeMap<String, Vec<Pod>> {
        super::super::pods::by_node(&pods, false)
    }

    #[test]
    fn a_pod_is_created_on_each_node_that_should_run_one_and_has_none() {
        let backoff = FailedPodBackoff::default();
        let by_node = grouped(vec![pod("a1", "a", true, "new", 0, Some(0))]);
        let plan = plan(
            &daemon(false),
            &fits(&[
                ("a", Fit::RUN),
                ("b", Fit::RUN),
                ("tainted", Fit::KEEP),
                ("other", Fit::NO),
            ]),
            &by_node,
            &backoff,
            at(10),
            Instant::now(),
        );
        assert_eq!(plan.create_on, ["b"]);
        assert!(plan.delete.is_empty());
    }

    #[test]
    fn pods_are_deleted_where_they_must_not_run_and_surplus_ones_keep_the_oldest() {
        let backoff = FailedPodBackoff::default();
        let by_node = grouped(vec![
            pod("x1", "x", true, "new", 0, Some(0)),
            pod("a-young", "a", true, "new", 5, Some(0)),
            pod("a-old", "a", true, "new", 1, Some(0)),
        ]);
        let plan = plan(
            &daemon(false),
            &fits(&[("x", Fit::NO), ("a", Fit::RUN)]),
            &by_node,
            &backoff,
            at(10),
            Instant::now(),
        );
        assert_eq!(plan.delete, ["a-young", "x1"]);
    }

    #[test]
    fn failed_pods_are_deleted_with_back_off_and_succeeded_ones_at_once() {
        let backoff = FailedPodBackoff::default();
        let mut failed = pod("f", "a", true, "new", 0, None);
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        let mut done = pod("s", "b", true, "new", 0, None);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let by_node = grouped(vec![failed, done]);
        let t0 = Instant::now();
        let nodes = fits(&[("a", Fit::RUN), ("b", Fit::RUN)]);
        let first = plan(&daemon(false), &nodes, &by_node, &backoff, at(10), t0);
        assert_eq!(first.delete, ["f", "s"]);
        assert_eq!(first.notes[0].reason, "FailedDaemonPod");
        assert_eq!(
            first.notes[0].message,
            "Found failed daemon pod ns/f on node a, will try to kill it"
        );
        assert!(first.notes[0].warning);
        assert_eq!(first.notes[1].reason, "SucceededDaemonPod");
        // The replacement failed again at once: its deletion waits out the back-off.
        let again = plan(&daemon(false), &nodes, &by_node, &backoff, at(10), t0);
        assert_eq!(again.delete, ["s"]);
        assert_eq!(again.requeue_after, Some(backoff::INITIAL));
        let later = plan(
            &daemon(false),
            &nodes,
            &by_node,
            &backoff,
            at(10),
            t0 + backoff::INITIAL,
        );
        assert_eq!(later.delete, ["f", "s"]);
    }

    #[test]
    fn unscheduled_pods_of_a_deleted_node_go_and_bound_ones_are_left_to_the_pod_gc() {
        let backoff = FailedPodBackoff::default();
        let by_node = grouped(vec![
            pod("pending", "gone", false, "new", 0, None),
            pod("bound", "gone-too", true, "new", 0, Some(0)),
        ]);
        let plan = plan(
            &daemon(false),
            &fits(&[]),
            &by_node,
            &backoff,
            at(10),
            Instant::now(),
        );
        assert_eq!(plan.delete, ["pending"]);
    }

    #[test]
    fn with_surge_the_old_pod_goes_once_the_new_one_is_available() {
        let backoff = FailedPodBackoff::default();
        let nodes = fits(&[("a", Fit::RUN)]);
        let waiting = grouped(vec![
            pod("old", "a", true, "old", 0, Some(0)),
            pod("new", "a", true, "new", 5, None),
        ]);
        assert!(
            plan(
                &daemon(true),
                &nodes,
                &waiting,
                &backoff,
                at(10),
                Instant::now()
            )
            .delete
            .is_empty()
        );
        let ready = grouped(vec![
            pod("old", "a", true, "old", 0, Some(0)),
            pod("new", "a", true, "new", 5, Some(6)),
        ]);
        assert_eq!(
            plan(
                &daemon(true),
                &nodes,
                &ready,
                &backoff,
                at(10),
                Instant::now()
            )
            .delete,
            ["old"]
        );
        let mut deleting = pod("old", "a", true, "old", 0, Some(0));
        deleting.metadata.deletion_timestamp = Some(Time(at(9)));
        let replaced = grouped(vec![deleting]);
        assert_eq!(
            plan(
                &daemon(true),
                &nodes,
                &replaced,
                &backoff,
                at(10),
                Instant::now()
            )
            .create_on,
            ["a"],
            "a node whose only pod is going gets its new one at once"
        );
    }
}
