//! The worker's account of its items: which it runs, which wait behind a running item of the same key,
//! the newest leader term it has seen, and the credits it may grant.
//!
//! Invariants: at most one item per (controller, key) runs here at a time (client-go's guarantee,
//! enforced locally as a second line of defence behind the coordinator); every held item (running or
//! waiting) was admitted with a term no older than the newest term known when it arrived.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use flotilla_common::{Reason, ResourceKind, TraceContext};
use flotilla_proto as proto;

/// The most links a reconcile span takes from one `Assign` (the leader sends at most 32; a peer that
/// sends more is cut here).
const MAX_LINKS: usize = 32;

/// One assigned item, mapped from the protocol's `Assign`.
#[derive(Debug, Clone)]
pub(crate) struct Assigned {
    pub(crate) item_id: u64,
    pub(crate) term: u64,
    pub(crate) controller: String,
    pub(crate) key: String,
    pub(crate) shard: u32,
    pub(crate) attempt: u32,
    pub(crate) object: Bytes,
    pub(crate) prefetched: Vec<(ResourceKind, Bytes)>,
    /// Kinds of related objects too large to ship with the item: read through the Cache service (owned
    /// by the primary object) before the reconcile starts.
    pub(crate) prefetch_from_cache: Vec<ResourceKind>,
    /// The trace the item belongs to; `None` (nothing allocated) when its events were not sampled or
    /// tracing is off.
    pub(crate) trace: Option<Box<ItemTrace>>,
    pub(crate) reason: Reason,
}

/// Where an item's reconcile joins its trace, read from `Assign` (peer data: malformed contexts are
/// dropped, never trusted).
#[derive(Debug, Clone, Default)]
pub(crate) struct ItemTrace {
    /// The leader's dispatch span: the reconcile span's parent.
    pub(crate) parent: Option<TraceContext>,
    /// Every sampled event merged into this run: the reconcile span links to each.
    pub(crate) links: Vec<TraceContext>,
}

impl ItemTrace {
    /// The trace of an `Assign`'s `traceparent` and `trace_links`; `None` when neither holds one.
    fn of(traceparent: &str, links: &[String]) -> Option<Box<Self>> {
        if traceparent.is_empty() && links.is_empty() {
            return None;
        }
        let trace = Self {
            parent: TraceContext::parse(traceparent),
            links: links
                .iter()
                .take(MAX_LINKS)
                .filter_map(|t| TraceContext::parse(t))
                .collect(),
        };
        (trace.parent.is_some() || !trace.links.is_empty()).then(|| Box::new(trace))
    }
}

impl From<proto::Assign> for Assigned {
    fn from(a: proto::Assign) -> Self {
        Self {
            item_id: a.item_id,
            term: a.term,
            controller: a.controller,
            key: a.key,
            shard: a.shard,
            attempt: a.attempt,
            object: a.object,
            prefetched: a
                .prefetched
                .into_iter()
                .map(|p| {
                    // A prefetched object without a kind matches no typed read; keep it harmlessly unnamed.
                    let kind = p.kind.map_or_else(
                        || ResourceKind::new("", "", "", "", false),
                        ResourceKind::from,
                    );
                    (kind, p.object)
                })
                .collect(),
            prefetch_from_cache: a
                .prefetch_from_cache
                .into_iter()
                .map(ResourceKind::from)
                .collect(),
            trace: ItemTrace::of(&a.traceparent, &a.trace_links),
            reason: a.reason.map(Reason::from).unwrap_or_default(),
        }
    }
}

/// Why an item was refused (the `reason` label of `flotilla_worker_refused_items_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its term is older than the newest term this worker has seen.
    StaleTerm,
    /// This worker does not run its controller.
    UnknownController,
    /// The worker is shutting down and starts nothing new.
    ShuttingDown,
}

impl Refusal {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::StaleTerm => "stale_term",
            Self::UnknownController => "unknown_controller",
            Self::ShuttingDown => "shutting_down",
        }
    }
}

/// What to do with an admitted item.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Start reconciling it now.
    Start(Box<Assigned>),
    /// Another item of the same key runs; this one starts when that one finishes.
    Queued,
    /// Not taken: no Done, no credit.
    Refused(Refusal),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Running {
    item_id: u64,
    term: u64,
    shard: u32,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Ledger {
    known_term: u64,
    concurrency: HashMap<String, u32>,
    running: HashMap<(String, String), Running>,
    waiting: HashMap<(String, String), VecDeque<Assigned>>,
}

impl Ledger {
    /// An empty ledger for controllers with these concurrencies.
    pub(crate) fn new(concurrency: HashMap<String, u32>) -> Self {
        Self {
            known_term: 0,
            concurrency,
            running: HashMap::new(),
            waiting: HashMap::new(),
        }
    }

    /// The newest leader term seen.
    pub(crate) fn known_term(&self) -> u64 {
        self.known_term
    }

    /// Notes a term seen in etcd or a Welcome; `false` when it is older than one already seen.
    pub(crate) fn observe_term(&mut self, term: u64) -> bool {
        if term < self.known_term {
            return false;
        }
        self.known_term = term;
        true
    }

    /// Takes an item, queues it behind the running item of its key, or refuses it.
    pub(crate) fn admit(&mut self, item: Assigned, draining: bool) -> Admission {
        if !self.concurrency.contains_key(&item.controller) {
            return Admission::Refused(Refusal::UnknownController);
        }
        if !self.observe_term(item.term) {
            return Admission::Refused(Refusal::StaleTerm);
        }
        if draining {
            return Admission::Refused(Refusal::ShuttingDown);
        }
        let slot = (item.controller.clone(), item.key.clone());
        if self.running.contains_key(&slot) {
            self.waiting.entry(slot).or_default().push_back(item);
            return Admission::Queued;
        }
        self.running.insert(
            slot,
            Running {
                item_id: item.item_id,
                term: item.term,
                shard: item.shard,
            },
        );
        Admission::Start(Box::new(item))
    }

    /// Notes that the item `(term, item_id)` of `(controller, key)` finished. Returns whether it was
    /// held (a finish of an item the ledger forgot, e.g. after fencing, is ignored) and the next item
    /// of the same key to start, if one waits.
    pub(crate) fn finish(
        &mut self,
        controller: &str,
        key: &str,
        term: u64,
        item_id: u64,
    ) -> (bool, Option<Assigned>) {
        let slot = (controller.to_owned(), key.to_owned());
        match self.running.get(&slot) {
            Some(r) if r.term == term && r.item_id == item_id => {}
            _ => return (false, None),
        }
        let next = match self.waiting.get_mut(&slot) {
            Some(queue) => {
                let next = queue.pop_front();
                if queue.is_empty() {
                    self.waiting.remove(&slot);
                }
                next
            }
            None => None,
        };
        match &next {
            Some(n) => {
                self.running.insert(
                    slot,
                    Running {
                        item_id: n.item_id,
                        term: n.term,
                        shard: n.shard,
                    },
                );
            }
            None => {
                self.running.remove(&slot);
            }
        }
        (true, next)
    }

    /// Every held item, for Hello.
    pub(crate) fn held(&self) -> Vec<proto::HeldItem> {
        let running = self
            .running
            .iter()
            .map(|((controller, key), r)| proto::HeldItem {
                controller: controller.clone(),
                key: key.clone(),
                shard: r.shard,
                item_id: r.item_id,
                term: r.term,
            });
        let waiting = self.waiting.values().flatten().map(|a| proto::HeldItem {
            controller: a.controller.clone(),
            key: a.key.clone(),
            shard: a.shard,
            item_id: a.item_id,
            term: a.term,
        });
        running.chain(waiting).collect()
    }

    fn held_of(&self, controller: &str) -> u32 {
        let running = self.running.keys().filter(|(c, _)| c == controller).count();
        let waiting: usize = self
            .waiting
            .iter()
            .filter(|((c, _), _)| c == controller)
            .map(|(_, q)| q.len())
            .sum();
        u32::try_from(running + waiting).unwrap_or(u32::MAX)
    }

    /// The credits to grant after a Welcome: each controller's concurrency minus what it still holds,
    /// so that held items and granted credits never exceed the concurrency.
    pub(crate) fn initial_credits(&self) -> Vec<(String, u32)> {
        let mut credits: Vec<_> = self
            .concurrency
            .iter()
            .map(|(controller, &n)| {
                (
                    controller.clone(),
                    n.saturating_sub(self.held_of(controller)),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        credits.sort();
        credits
    }

    /// How many items run.
    pub(crate) fn running(&self) -> usize {
        self.running.len()
    }

    /// Forgets the items that wait (a draining worker starts nothing new; its lease revocation frees
    /// them). Returns how many there were.
    pub(crate) fn drop_waiting(&mut self) -> usize {
        let n = self.waiting.values().map(VecDeque::len).sum();
        self.waiting.clear();
        n
    }

    /// Forgets every item (self-fencing: the lease that covered them is gone); keeps the known term.
    pub(crate) fn clear(&mut self) {
        self.running.clear();
        self.waiting.clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ledger() -> Ledger {
        Ledger::new(HashMap::from([
            ("journal".to_owned(), 3),
            ("one-child".to_owned(), 2),
        ]))
    }

    fn item(id: u64, term: u64, controller: &str, key: &str) -> Assigned {
        Assigned {
            item_id: id,
            term,
            controller: controller.into(),
            key: key.into(),
            shard: 7,
            attempt: 0,
            object: Bytes::new(),
            prefetched: Vec::new(),
            prefetch_from_cache: Vec::new(),
            trace: None,
            reason: Reason::Unknown,
        }
    }

    #[test]
    fn an_assign_carries_its_trace_and_a_malformed_one_is_dropped() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let merged = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let traced = Assigned::from(proto::Assign {
            traceparent: parent.into(),
            trace_links: vec![parent.into(), "garbage".into(), merged.into()],
            ..Default::default()
        });
        let trace = traced.trace.expect("traced");
        assert_eq!(
            trace.parent.map(|p| p.traceparent()).as_deref(),
            Some(parent)
        );
        assert_eq!(trace.links.len(), 2, "the malformed link is dropped");
        assert!(Assigned::from(proto::Assign::default()).trace.is_none());
        let garbage = Assigned::from(proto::Assign {
            traceparent: "00-zz-zz-01".into(),
            ..Default::default()
        });
        assert!(garbage.trace.is_none());
    }

    #[test]
    fn an_item_of_an_older_term_than_the_newest_seen_is_refused() {
        let mut ledger = ledger();
        assert!(ledger.observe_term(10));
        assert!(matches!(
            ledger.admit(item(1, 9, "journal", "a/b"), false),
            Admission::Refused(Refusal::StaleTerm)
        ));
        assert!(matches!(
            ledger.admit(item(2, 10, "journal", "a/b"), false),
            Admission::Start(_)
        ));
        assert_eq!(ledger.running(), 1);
    }

    #[test]
    fn an_item_of_a_newer_term_raises_the_known_term() {
        let mut ledger = ledger();
        ledger.observe_term(3);
        assert!(matches!(
            ledger.admit(item(1, 5, "journal", "a/b"), false),
            Admission::Start(_)
        ));
        assert_eq!(ledger.known_term(), 5);
        assert!(
            !ledger.observe_term(4),
            "a term older than one seen must be refused"
        );
    }

    #[test]
    fn an_item_of_an_unknown_controller_is_refused() {
        let mut ledger = ledger();
        let admission = ledger.admit(item(1, 1, "replicaset", "a/b"), false);
        assert!(matches!(
            admission,
            Admission::Refused(Refusal::UnknownController)
        ));
        assert!(ledger.held().is_empty());
    }

    #[test]
    fn a_draining_worker_refuses_new_items() {
        let mut ledger = ledger();
        assert!(matches!(
            ledger.admit(item(1, 1, "journal", "a/b"), true),
            Admission::Refused(Refusal::ShuttingDown)
        ));
    }

    #[test]
    fn a_second_item_of_a_running_key_waits_until_the_first_finishes() {
        let mut ledger = ledger();
        assert!(matches!(
            ledger.admit(item(1, 1, "journal", "a/b"), false),
            Admission::Start(_)
        ));
        assert!(matches!(
            ledger.admit(item(2, 1, "journal", "a/b"), false),
            Admission::Queued
        ));
        assert!(
            matches!(
                ledger.admit(item(3, 1, "one-child", "a/b"), false),
                Admission::Start(_)
            ),
            "another controller's key is independent"
        );
        assert_eq!(ledger.held().len(), 3);
        let (held, next) = ledger.finish("journal", "a/b", 1, 1);
        assert!(held);
        assert_eq!(next.map(|n| n.item_id), Some(2));
        let (held, next) = ledger.finish("journal", "a/b", 1, 2);
        assert!(held);
        assert!(next.is_none());
        assert_eq!(ledger.running(), 1);
    }

    #[test]
    fn a_finish_of_an_item_the_ledger_does_not_hold_is_ignored() {
        let mut ledger = ledger();
        ledger.admit(item(1, 1, "journal", "a/b"), false);
        assert!(!ledger.finish("journal", "a/b", 1, 99).0);
        ledger.clear();
        assert!(!ledger.finish("journal", "a/b", 1, 1).0);
    }

    #[test]
    fn initial_credits_are_the_concurrency_minus_held_items() {
        let mut ledger = ledger();
        assert_eq!(
            ledger.initial_credits(),
            vec![("journal".to_owned(), 3), ("one-child".to_owned(), 2)]
        );
        ledger.admit(item(1, 1, "journal", "a/1"), false);
        ledger.admit(item(2, 1, "journal", "a/1"), false);
        ledger.admit(item(3, 1, "one-child", "a/1"), false);
        ledger.admit(item(4, 1, "one-child", "a/2"), false);
        assert_eq!(ledger.initial_credits(), vec![("journal".to_owned(), 1)]);
    }

    #[test]
    fn clearing_forgets_items_but_keeps_the_known_term() {
        let mut ledger = ledger();
        ledger.admit(item(1, 8, "journal", "a/1"), false);
        ledger.admit(item(2, 8, "journal", "a/1"), false);
        ledger.clear();
        assert!(ledger.held().is_empty());
        assert_eq!(ledger.known_term(), 8);
    }

    #[test]
    fn dropping_waiting_items_keeps_the_running_ones() {
        let mut ledger = ledger();
        ledger.admit(item(1, 1, "journal", "a/1"), false);
        ledger.admit(item(2, 1, "journal", "a/1"), false);
        assert_eq!(ledger.drop_waiting(), 1);
        assert_eq!(ledger.held().len(), 1);
    }
}
