//! What the controller keeps in a worker's memory between reconciles of a node's key: when a
//! `NoExecute` taint without `timeAdded` was first seen, and which pods wait for a timed eviction.
//! Neither decides a deadline that the objects can give (see the module doc of
//! [`super`]): losing this memory with a shard move restarts the clock of a taint without a time,
//! as a kube-controller-manager restart does, and may lose a "Cancelling deletion" Event.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use flotilla_sdk::k8s_openapi::api::core::v1::Taint;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

/// A taint as `Taint.MatchTaint` tells taints apart: key, value and effect.
type TaintId = (String, String, String);

fn id(taint: &Taint) -> TaintId {
    (
        taint.key.clone(),
        taint.value.clone().unwrap_or_default(),
        taint.effect.clone(),
    )
}

/// The memory of every node this worker reconciled. Cheap to share; the lock is never held across
/// an await.
#[derive(Debug, Default)]
pub struct Memory {
    nodes: Mutex<HashMap<String, NodeMemory>>,
}

/// One node's memory. Invariant: a node with nothing to remember has no entry.
#[derive(Debug, Default)]
struct NodeMemory {
    /// Taints without `timeAdded` that the node carries, and when they were first seen.
    first_seen: BTreeMap<TaintId, Timestamp>,
    /// `namespace/name` of the pods with a timed eviction pending.
    pending: BTreeSet<String>,
}

impl NodeMemory {
    fn is_empty(&self) -> bool {
        self.first_seen.is_empty() && self.pending.is_empty()
    }
}

impl Memory {
    fn nodes(&self) -> MutexGuard<'_, HashMap<String, NodeMemory>> {
        // A panic elsewhere leaves at worst a taint's first sighting or a pending pod behind: an
        // Event, never a deadline the objects give.
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When each of `taints` (the node's `NoExecute` taints) was added: its `timeAdded`, else when
    /// this worker first saw it (`now` the first time). Forgets the taints the node no longer has.
    pub fn since(&self, node: &str, taints: &[&Taint], now: Timestamp) -> Vec<Timestamp> {
        let mut nodes = self.nodes();
        let entry = nodes.entry(node.to_owned()).or_default();
        let untimed: BTreeSet<TaintId> = taints
            .iter()
            .filter(|t| t.time_added.is_none())
            .map(|t| id(t))
            .collect();
        entry.first_seen.retain(|taint, _| untimed.contains(taint));
        let since = taints
            .iter()
            .map(|t| match &t.time_added {
                Some(added) => added.0,
                None => *entry.first_seen.entry(id(t)).or_insert(now),
            })
            .collect();
        if entry.is_empty() {
            nodes.remove(node);
        }
        since
    }

    /// Records `pending` as the node's pods waiting for a timed eviction and returns those that were
    /// waiting before and are neither waiting now nor in `fired` (evicted because their time came):
    /// the evictions called off.
    pub fn settle(
        &self,
        node: &str,
        pending: BTreeSet<String>,
        fired: &BTreeSet<String>,
    ) -> Vec<String> {
        let mut nodes = self.nodes();
        let entry = nodes.entry(node.to_owned()).or_default();
        let before = std::mem::replace(&mut entry.pending, pending);
        let cancelled = before
            .into_iter()
            .filter(|pod| !entry.pending.contains(pod) && !fired.contains(pod))
            .collect();
        if entry.is_empty() {
            nodes.remove(node);
        }
        cancelled
    }

    /// Forgets a node that is gone; its pods' pending evictions are not called off (upstream's
    /// node deletion cancels none: the pod GC takes the pods).
    pub fn forget(&self, node: &str) {
        self.nodes().remove(node);
    }

    /// How many nodes are remembered (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.nodes().len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn taint(key: &str, added: Option<i64>) -> Taint {
        Taint {
            key: key.into(),
            effect: "NoExecute".into(),
            time_added: added.map(|s| Time(at(s))),
            ..Taint::default()
        }
    }

    #[test]
    fn a_taint_without_a_time_is_timed_from_its_first_sighting_until_it_goes() {
        let memory = Memory::default();
        let timed = taint("timed", Some(5));
        let untimed = taint("untimed", None);
        assert_eq!(
            memory.since("n", &[&timed, &untimed], at(10)),
            [at(5), at(10)]
        );
        assert_eq!(
            memory.since("n", &[&timed, &untimed], at(20)),
            [at(5), at(10)]
        );
        assert_eq!(memory.since("n", &[&timed], at(30)), [at(5)]);
        assert_eq!(memory.len(), 0, "nothing left to remember");
        assert_eq!(memory.since("n", &[&untimed], at(40)), [at(40)]);
    }

    #[test]
    fn evictions_no_longer_pending_are_called_off_unless_they_fired() {
        let memory = Memory::default();
        let set = |pods: &[&str]| {
            pods.iter()
                .map(|p| (*p).to_owned())
                .collect::<BTreeSet<_>>()
        };
        assert!(
            memory
                .settle("n", set(&["a", "b", "c"]), &set(&[]))
                .is_empty()
        );
        assert_eq!(memory.settle("n", set(&["a"]), &set(&["b"])), ["c"]);
        assert_eq!(memory.settle("n", set(&[]), &set(&[])), ["a"]);
        assert_eq!(memory.len(), 0);
        memory.settle("m", set(&["x"]), &set(&[]));
        memory.forget("m");
        assert_eq!(memory.len(), 0);
    }
}
