//! Read-your-writes: a key whose reconcile wrote objects stays held until the informer cache has observed
//! those writes, or a bound passes. This replaces kube-controller-manager's per-controller expectations:
//! without it, a ReplicaSet reconciled again before its pod creations reach the cache creates them twice.

use std::collections::HashMap;
use std::time::SystemTime;

use flotilla_common::{ResourceKind, TraceContext};
use opentelemetry::KeyValue;
use tokio::time::Instant;

use super::messages::WriteOp;

/// What the cache must show for a write to count as observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The object at this resourceVersion or newer (or gone: a deletion is newer still).
    AtLeast(u64),
    /// The object gone, or at this resourceVersion or newer when a delete only marked it (finalizers).
    Deleted(Option<u64>),
}

impl Expected {
    /// What a write of `op` returning `resource_version` expects.
    pub fn of(op: WriteOp, resource_version: Option<u64>) -> Option<Self> {
        match (op, resource_version) {
            (WriteOp::Delete, rv) => Some(Self::Deleted(rv)),
            (_, Some(rv)) => Some(Self::AtLeast(rv)),
            // A create or update without a resourceVersion cannot be compared: nothing to wait for.
            (_, None) => None,
        }
    }

    /// Whether an informer event on the written object satisfies this: the object applied at `Some(rv)`,
    /// or deleted (`None`) — a deletion comes after any write of the object the cache could still show.
    pub fn satisfied_by_event(self, event: Option<u64>) -> bool {
        match (self, event) {
            (_, None) => true,
            (Self::AtLeast(want), Some(rv)) => rv >= want,
            (Self::Deleted(Some(want)), Some(rv)) => rv >= want,
            (Self::Deleted(None), Some(_)) => false,
        }
    }

    /// Whether the cache already reflects this write, given the object's cached version (`None`:
    /// absent) and the newest version the informer of its kind has applied. One watch delivers changes
    /// in revision order, so an informer past the write's version has seen it, even if the object is
    /// gone again; an object merely absent has not been seen yet — that was a bug: a create counted as
    /// observed before its informer event, and a controller reconciled again created its child twice.
    pub fn observed_in_cache(self, cached: Option<u64>, informer_rv: u64) -> bool {
        match (self, cached) {
            (Self::AtLeast(want), Some(rv)) => rv >= want || informer_rv >= want,
            (Self::AtLeast(want), None) => informer_rv >= want,
            (Self::Deleted(_), None) => true,
            (Self::Deleted(Some(want)), Some(rv)) => rv >= want,
            (Self::Deleted(None), Some(_)) => false,
        }
    }
}

/// A held key.
#[derive(Debug)]
struct Hold {
    controller: String,
    key: String,
    /// Writes not yet observed.
    remaining: usize,
    deadline: Instant,
    /// A traced run's hold only: what its `wait read_your_writes` span needs.
    trace: Option<HoldTrace>,
}

/// The `wait read_your_writes` span of a traced run's hold: under the run's `dispatch` span, from the
/// hold to its release.
#[derive(Debug)]
struct HoldTrace {
    parent: TraceContext,
    since: SystemTime,
    writes: usize,
}

/// How a hold ended, for its span's `outcome`.
#[derive(Debug, Clone, Copy)]
enum Ended {
    Observed,
    Expired,
}

/// The table of held keys and the writes they wait for.
#[derive(Debug, Default)]
pub struct Expectations {
    /// Object (kind, key) → the holds waiting on it, with what they expect.
    by_object: HashMap<(ResourceKind, String), Vec<(u64, Expected)>>,
    /// Hold id → hold. Invariant: every id in `by_object` is here, with `remaining` equal to the number of
    /// its entries in `by_object`.
    holds: HashMap<u64, Hold>,
    /// Which hold a (controller, key) is under, so a key is held at most once.
    by_key: HashMap<(String, String), u64>,
    next_id: u64,
}

impl Expectations {
    /// Holds `(controller, key)` until every write in `unobserved` is observed, or `deadline`.
    /// `unobserved` must be non-empty and contain only writes the cache has not shown yet. The hold of
    /// a traced run (`trace`: its `dispatch` span) ends in a `wait read_your_writes` span under it.
    pub fn hold(
        &mut self,
        controller: &str,
        key: &str,
        unobserved: Vec<(ResourceKind, String, Expected)>,
        deadline: Instant,
        trace: Option<TraceContext>,
    ) {
        debug_assert!(!unobserved.is_empty());
        let id = self.next_id;
        self.next_id += 1;
        let remaining = unobserved.len();
        for (kind, object, expected) in unobserved {
            self.by_object
                .entry((kind, object))
                .or_default()
                .push((id, expected));
        }
        self.holds.insert(
            id,
            Hold {
                controller: controller.into(),
                key: key.into(),
                remaining,
                deadline,
                trace: trace.map(|parent| HoldTrace {
                    parent,
                    since: SystemTime::now(),
                    writes: remaining,
                }),
            },
        );
        self.by_key.insert((controller.into(), key.into()), id);
    }

    /// Whether `(controller, key)` is held.
    #[cfg(test)]
    pub fn is_held(&self, controller: &str, key: &str) -> bool {
        self.by_key
            .contains_key(&(controller.to_owned(), key.to_owned()))
    }

    /// The informer applied `object` of `kind` at `Some(rv)`, or deleted it (`None`). Returns the keys
    /// released.
    pub fn observe(
        &mut self,
        kind: &ResourceKind,
        object: &str,
        cached: Option<u64>,
    ) -> Vec<(String, String)> {
        let slot = (kind.clone(), object.to_owned());
        let Some(waiters) = self.by_object.get_mut(&slot) else {
            return Vec::new();
        };
        let mut released = Vec::new();
        waiters.retain(|&(id, expected)| {
            if !expected.satisfied_by_event(cached) {
                return true;
            }
            if let Some(hold) = self.holds.get_mut(&id) {
                hold.remaining -= 1;
                if hold.remaining == 0 {
                    released.push(id);
                }
            }
            false
        });
        if waiters.is_empty() {
            self.by_object.remove(&slot);
        }
        released
            .into_iter()
            .filter_map(|id| self.release(id, Ended::Observed))
            .collect()
    }

    /// Releases every hold whose deadline is at or before `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<(String, String)> {
        let due: Vec<u64> = self
            .holds
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        if due.is_empty() {
            return Vec::new();
        }
        self.by_object.retain(|_, waiters| {
            waiters.retain(|(id, _)| !due.contains(id));
            !waiters.is_empty()
        });
        due.into_iter()
            .filter_map(|id| self.release(id, Ended::Expired))
            .collect()
    }

    /// Number of held keys.
    pub fn len(&self) -> usize {
        self.holds.len()
    }

    /// Every held (controller, key).
    pub fn held(&self) -> impl Iterator<Item = &(String, String)> {
        self.by_key.keys()
    }

    fn release(&mut self, id: u64, ended: Ended) -> Option<(String, String)> {
        let hold = self.holds.remove(&id)?;
        if let Some(trace) = &hold.trace {
            trace.end(ended);
        }
        let pair = (hold.controller, hold.key);
        self.by_key.remove(&pair);
        Some(pair)
    }
}

impl HoldTrace {
    /// Exports the span, ending now: `writes` (how many the hold waited for) and `outcome`.
    fn end(&self, ended: Ended) {
        let outcome = match ended {
            Ended::Observed => "observed",
            Ended::Expired => "expired",
        };
        flotilla_common::record_wait(
            &self.parent,
            "read_your_writes",
            self.since,
            SystemTime::now(),
            [
                KeyValue::new("writes", i64::try_from(self.writes).unwrap_or(i64::MAX)),
                KeyValue::new("outcome", outcome),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn cm() -> ResourceKind {
        ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)
    }

    #[test]
    fn a_key_is_released_once_every_write_is_observed() {
        let mut e = Expectations::default();
        let now = Instant::now();
        e.hold(
            "c",
            "ns/p",
            vec![
                (cm(), "ns/a".into(), Expected::AtLeast(10)),
                (cm(), "ns/b".into(), Expected::AtLeast(11)),
            ],
            now + Duration::from_secs(300),
            None,
        );
        assert!(e.is_held("c", "ns/p"));
        assert!(
            e.observe(&cm(), "ns/a", Some(9)).is_empty(),
            "an older version does not count"
        );
        assert!(
            e.observe(&cm(), "ns/a", Some(10)).is_empty(),
            "one of two writes is not enough"
        );
        assert_eq!(
            e.observe(&cm(), "ns/b", Some(12)),
            vec![("c".to_owned(), "ns/p".to_owned())]
        );
        assert!(!e.is_held("c", "ns/p"));
        assert_eq!(e.len(), 0);
    }

    #[test]
    fn a_delete_is_observed_when_the_object_is_gone() {
        let mut e = Expectations::default();
        e.hold(
            "c",
            "k",
            vec![(cm(), "ns/a".into(), Expected::Deleted(None))],
            Instant::now() + Duration::from_secs(1),
            None,
        );
        assert!(e.observe(&cm(), "ns/a", Some(50)).is_empty());
        assert_eq!(e.observe(&cm(), "ns/a", None).len(), 1);
    }

    #[test]
    fn a_hold_expires_at_its_deadline() {
        let mut e = Expectations::default();
        let now = Instant::now();
        e.hold(
            "c",
            "k",
            vec![(cm(), "ns/a".into(), Expected::AtLeast(5))],
            now + Duration::from_secs(300),
            None,
        );
        assert!(e.expire(now + Duration::from_secs(299)).is_empty());
        assert_eq!(
            e.expire(now + Duration::from_secs(300)),
            vec![("c".to_owned(), "k".to_owned())]
        );
        assert!(
            e.observe(&cm(), "ns/a", Some(5)).is_empty(),
            "an expired hold leaves nothing behind"
        );
    }

    #[test]
    fn a_create_is_not_observed_while_the_cache_lacks_the_object_and_the_informer_is_behind() {
        // Regression: an absent object used to count as observed, so a parent was dispatched again
        // before its new child reached the cache, and got a second child.
        assert!(!Expected::AtLeast(10).observed_in_cache(None, 9));
        assert!(
            Expected::AtLeast(10).observed_in_cache(None, 10),
            "created and deleted again since"
        );
        assert!(Expected::AtLeast(10).observed_in_cache(Some(10), 10));
        assert!(!Expected::AtLeast(10).observed_in_cache(Some(8), 9));
        assert!(Expected::Deleted(None).observed_in_cache(None, 0));
        assert!(!Expected::Deleted(None).observed_in_cache(Some(3), 5));
        assert!(
            Expected::Deleted(Some(7)).observed_in_cache(Some(7), 7),
            "a delete that only marked the object"
        );
    }

    #[test]
    fn a_write_without_a_version_expects_nothing_unless_it_is_a_delete() {
        assert_eq!(Expected::of(WriteOp::Create, None), None);
        assert_eq!(
            Expected::of(WriteOp::Delete, None),
            Some(Expected::Deleted(None))
        );
        assert_eq!(
            Expected::of(WriteOp::Update, Some(3)),
            Some(Expected::AtLeast(3))
        );
    }
}
