//! The status a DaemonSet sync writes (upstream `updateDaemonSetStatus` and `storeDaemonSetStatus`):
//! per node that should run a pod, whether it has one, and whether the oldest is ready, available and
//! of the current revision; pods on nodes that should not run one are misscheduled. Written only when
//! a count changed or the generation is new, in kube-controller-manager's shape (the counts that
//! Go omits when zero are left out).

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::apps::v1::DaemonSetStatus;
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::nodes::Fit;
use super::pods::{is_available, is_ready, is_updated};

/// The counts of one sync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Nodes that should run a pod.
    pub desired: i32,
    /// Of those, nodes that have one.
    pub current: i32,
    /// Nodes that should not run a pod but have one.
    pub misscheduled: i32,
    /// Nodes whose counted pod is ready.
    pub ready: i32,
    /// Nodes whose counted pod is of the current revision.
    pub updated: i32,
    /// Nodes whose counted pod is available.
    pub available: i32,
}

impl Counts {
    /// Nodes that should run a pod and have no available one.
    pub fn unavailable(&self) -> i32 {
        self.desired - self.available
    }
}

/// Counts the nodes `fits` with the pods `by_node` (see [`super::pods::by_node`]; each node's oldest
/// pod counts), for the revision `hash` and template `generation`, at `now`.
pub fn count(
    fits: &BTreeMap<String, Fit>,
    by_node: &BTreeMap<String, Vec<Pod>>,
    hash: &str,
    generation: Option<i64>,
    min_ready_seconds: i32,
    now: Timestamp,
) -> Counts {
    let mut counts = Counts::default();
    for (node, fit) in fits {
        let oldest = by_node.get(node).and_then(|pods| pods.first());
        if !fit.should_run {
            if oldest.is_some() {
                counts.misscheduled += 1;
            }
            continue;
        }
        counts.desired += 1;
        let Some(pod) = oldest else {
            continue;
        };
        counts.current += 1;
        if is_ready(pod) {
            counts.ready += 1;
            if is_available(pod, min_ready_seconds, now) {
                counts.available += 1;
            }
        }
        if is_updated(pod, hash, generation) {
            counts.updated += 1;
        }
    }
    counts
}

/// Upstream's no-op check: the stored counts equal `counts` and the generation was observed.
pub fn unchanged(
    status: Option<&DaemonSetStatus>,
    counts: &Counts,
    generation: Option<i64>,
) -> bool {
    let Some(s) = status else {
        return false;
    };
    s.desired_number_scheduled == counts.desired
        && s.current_number_scheduled == counts.current
        && s.number_misscheduled == counts.misscheduled
        && s.number_ready == counts.ready
        && s.updated_number_scheduled.unwrap_or(0) == counts.updated
        && s.number_available.unwrap_or(0) == counts.available
        && s.number_unavailable.unwrap_or(0) == counts.unavailable()
        && s.observed_generation.unwrap_or(0) >= generation.unwrap_or(0)
}

/// The merge patch of the status: the four counts Go always writes, the others only when non-zero
/// (`null` removes a stale one), `observedGeneration` = `generation`.
pub fn patch(counts: &Counts, generation: Option<i64>) -> Value {
    let optional = |n: i32| if n == 0 { Value::Null } else { json!(n) };
    json!({"status": {
        "currentNumberScheduled": counts.current,
        "numberMisscheduled": counts.misscheduled,
        "desiredNumberScheduled": counts.desired,
        "numberReady": counts.ready,
        "observedGeneration": generation,
        "updatedNumberScheduled": optional(counts.updated),
        "numberAvailable": optional(counts.available),
        "numberUnavailable": optional(counts.unavailable()),
    }})
}

/// The merge patch that records a raised `status.collisionCount`.
pub fn collision_patch(count: i32) -> Value {
    json!({"status": {"collisionCount": count}})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::pods::tests::pod;
    use super::*;

    #[test]
    fn two_pending_pods_give_kube_controller_managers_first_status() {
        // kcm-v1.32/daemonset/09: two pending, unbound pods on node-a and node-b; node-c tainted.
        let fits: BTreeMap<String, Fit> = [
            ("node-a".into(), Fit::RUN),
            ("node-b".into(), Fit::RUN),
            ("node-c".into(), Fit::KEEP),
        ]
        .into();
        let pods = vec![
            pod("p1", "node-a", false, "h", 0, None),
            pod("p2", "node-b", false, "h", 0, None),
        ];
        let by_node = super::super::pods::by_node(&pods, false);
        let counts = count(
            &fits,
            &by_node,
            "h",
            Some(1),
            0,
            Timestamp::from_second(10).unwrap(),
        );
        assert_eq!(
            patch(&counts, Some(1)),
            json!({"status": {
                "currentNumberScheduled": 2, "numberMisscheduled": 0, "desiredNumberScheduled": 2,
                "numberReady": 0, "observedGeneration": 1, "updatedNumberScheduled": 2,
                "numberAvailable": null, "numberUnavailable": 2,
            }})
        );
        let stored: DaemonSetStatus = serde_json::from_value(json!({
            "currentNumberScheduled": 2, "numberMisscheduled": 0, "desiredNumberScheduled": 2,
            "numberReady": 0, "observedGeneration": 1, "updatedNumberScheduled": 2, "numberUnavailable": 2,
        }))
        .unwrap();
        assert!(unchanged(Some(&stored), &counts, Some(1)));
        assert!(
            !unchanged(Some(&stored), &counts, Some(2)),
            "a new generation is written"
        );
    }

    #[test]
    fn the_oldest_pod_of_a_node_counts_and_pods_where_none_belong_are_misscheduled() {
        let fits: BTreeMap<String, Fit> = [("a".into(), Fit::RUN), ("c".into(), Fit::KEEP)].into();
        let pods = vec![
            pod("a-old", "a", true, "old", 0, Some(1)),
            pod("a-new", "a", true, "new", 5, Some(6)),
            pod("c1", "c", true, "new", 0, Some(1)),
        ];
        let by_node = super::super::pods::by_node(&pods, false);
        let counts = count(
            &fits,
            &by_node,
            "new",
            None,
            0,
            Timestamp::from_second(10).unwrap(),
        );
        assert_eq!(
            counts,
            Counts {
                desired: 1,
                current: 1,
                misscheduled: 1,
                ready: 1,
                updated: 0,
                available: 1
            }
        );
        assert_eq!(counts.unavailable(), 0);
    }
}
