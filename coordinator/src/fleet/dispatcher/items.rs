//! The items of a term: keys out at workers, keys a worker holds from an earlier term (foreign), runs of
//! this term waiting for them (deferred), and read-your-writes holds. [`Items`] is the only code that
//! changes an item's bookkeeping, so one item is always counted in exactly three places, together:
//!
//! - the item table, under its (term, item id), with its worker and shard;
//! - its worker's item set and per-controller in-flight count ([`WorkerState`]), against which credits
//!   are granted (an assignment uses one credit);
//! - its shard's out count ([`ShardTable`]), which a shard's move waits to see at zero.
//!
//! Invariants it owns: a key of an earlier term reported held is foreign until its run ends and its
//! writes are observed (or its worker is lost), and while it is foreign no run of the key of this term
//! goes out (the run is deferred, then routed when the foreign key finishes); every deferred key is
//! foreign; a key is held at most once. The dispatcher's `check` (tests only) asserts these together
//! with the queues' processing sets.

use flotilla_common::{ResourceKind, TraceContext};
use foldhash::HashMap as FastMap;
use foldhash::HashSet;
use tokio::time::Instant;

use super::super::expectations::{Expectations, Expected};
use super::super::shards::ShardTable;
use super::super::workers::WorkerState;
use super::membership::Membership;

/// An item's identity: (term that assigned it, item id within that term).
pub(super) type ItemId = (u64, u64);

/// A `(controller, key)` pair.
pub(super) type ControllerKey = (String, String);

/// A key out at a worker.
#[derive(Debug)]
pub(super) struct Item {
    pub(super) controller: String,
    pub(super) key: String,
    pub(super) worker: String,
    pub(super) shard: u32,
    /// Reported held from an earlier term, or of a controller retired since it went out: not in any
    /// queue of this term as processing.
    pub(super) foreign: bool,
    /// The context of the run's `dispatch` span, for a traced run only: the parent of the
    /// `wait read_your_writes` span of a hold on its writes.
    pub(super) trace: Option<TraceContext>,
}

/// How a read-your-writes hold ended for its key.
#[derive(Debug)]
pub(super) enum HoldEnded {
    /// A key of this term: still processing in its queue; the caller ends that.
    OfThisTerm(ControllerKey),
    /// A key held from an earlier term: no longer foreign. Its run of this term, if one was deferred
    /// meanwhile, is returned for the caller to route.
    Foreign(Option<ControllerKey>),
}

/// The term's items, foreign and deferred keys and read-your-writes holds; see the module documentation.
#[derive(Debug)]
pub(super) struct Items {
    items: FastMap<ItemId, Item>,
    next_id: u64,
    /// Keys held by a worker from an earlier term, or of a controller retired meanwhile (out, or
    /// finished with writes not yet observed).
    foreign: HashSet<ControllerKey>,
    /// Keys of this term (processing in their queue) waiting for their foreign run to finish.
    deferred: HashSet<ControllerKey>,
    /// Keys whose last run's writes the cache has not shown yet.
    holds: Expectations,
}

impl Default for Items {
    fn default() -> Self {
        Self {
            items: FastMap::default(),
            next_id: 1,
            foreign: HashSet::default(),
            deferred: HashSet::default(),
            holds: Expectations::default(),
        }
    }
}

impl Items {
    /// A new item id of this term. Ids are never reused within a term (one taken for an item not sent
    /// in the end is simply skipped).
    pub(super) fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Whether item `id` is out (at a worker).
    pub(super) fn contains(&self, id: ItemId) -> bool {
        self.items.contains_key(&id)
    }

    /// Item `id` (of this term, from [`Items::next_id`]) goes to worker `w`: it uses one of `w`'s
    /// credits for `controller` and counts at `w` and at its shard until it comes back. `trace` is the
    /// run's `dispatch` span, if it is traced.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn assign(
        &mut self,
        id: ItemId,
        w: &mut WorkerState,
        shards: &mut ShardTable,
        controller: String,
        key: String,
        shard: u32,
        trace: Option<TraceContext>,
    ) {
        if let Some(c) = w.credits.get_mut(&controller) {
            *c -= 1;
        }
        self.count_out(id, w, shards, &controller, shard);
        self.items.insert(
            id,
            Item {
                controller,
                key,
                worker: w.id.clone(),
                shard,
                foreign: false,
                trace,
            },
        );
    }

    /// Worker `w` reported item `id` of an earlier term held: it counts like one of this term, and its
    /// key is foreign until it finishes.
    pub(super) fn adopt(
        &mut self,
        id: ItemId,
        w: &mut WorkerState,
        shards: &mut ShardTable,
        controller: &str,
        key: &str,
        shard: u32,
    ) {
        self.count_out(id, w, shards, controller, shard);
        self.foreign.insert((controller.to_owned(), key.to_owned()));
        self.items.insert(
            id,
            Item {
                controller: controller.to_owned(),
                key: key.to_owned(),
                worker: w.id.clone(),
                shard,
                foreign: true,
                trace: None,
            },
        );
    }

    fn count_out(
        &mut self,
        id: ItemId,
        w: &mut WorkerState,
        shards: &mut ShardTable,
        controller: &str,
        shard: u32,
    ) {
        shards.item_out(shard);
        match w.in_flight.get_mut(controller) {
            Some(n) => *n += 1,
            None => {
                w.in_flight.insert(controller.to_owned(), 1);
            }
        }
        w.items.insert(id);
    }

    /// `worker` finished item `id`: the item, off every count, with how many items of its shard are
    /// still out. `None` (nothing changes) when `worker` does not hold `id`.
    pub(super) fn done(
        &mut self,
        id: ItemId,
        worker: &str,
        members: &mut Membership,
        shards: &mut ShardTable,
    ) -> Option<(Item, u32)> {
        match self.items.get(&id) {
            Some(item) if item.worker == worker => self.reclaim(id, members, shards),
            _ => None,
        }
    }

    /// Takes item `id` back without a Done (its worker is lost, or did not report it held): the item,
    /// off every count, with how many items of its shard are still out. A worker that no longer lists
    /// it (one forgotten, whose items were taken with its state, or a new incarnation of its id) has
    /// nothing to count down.
    pub(super) fn reclaim(
        &mut self,
        id: ItemId,
        members: &mut Membership,
        shards: &mut ShardTable,
    ) -> Option<(Item, u32)> {
        let item = self.items.remove(&id)?;
        if let Some(w) = members.get_mut(&item.worker)
            && w.items.remove(&id)
            && let Some(n) = w.in_flight.get_mut(&item.controller)
        {
            *n = n.saturating_sub(1);
        }
        let left = shards.item_back(item.shard);
        Some((item, left))
    }

    /// A run of `(controller, key)` (processing in its queue) is about to go out. While the key is
    /// foreign it is deferred instead (`None`); otherwise the pair comes back to be sent.
    pub(super) fn unless_deferred(
        &mut self,
        controller: String,
        key: String,
    ) -> Option<ControllerKey> {
        let pair = (controller, key);
        if !self.foreign.is_empty() && self.foreign.contains(&pair) {
            self.deferred.insert(pair);
            return None;
        }
        Some(pair)
    }

    /// `(controller, key)` stops being foreign. Returns its deferred run of this term, if any, for the
    /// caller to route.
    pub(super) fn finish_foreign(&mut self, controller: &str, key: &str) -> Option<ControllerKey> {
        let pair = (controller.to_owned(), key.to_owned());
        self.foreign.remove(&pair);
        self.deferred.remove(&pair).then_some(pair)
    }

    /// Holds `(controller, key)` (processing, or foreign) until every write in `unobserved` is
    /// observed, or `deadline`; `unobserved` is non-empty. A traced run's hold (`trace`: its
    /// `dispatch` span) ends in a `wait read_your_writes` span.
    pub(super) fn hold(
        &mut self,
        controller: &str,
        key: &str,
        unobserved: Vec<(ResourceKind, String, Expected)>,
        deadline: Instant,
        trace: Option<TraceContext>,
    ) {
        self.holds
            .hold(controller, key, unobserved, deadline, trace);
    }

    /// The informer applied (`Some(rv)`) or deleted (`None`) an object: the keys whose holds it ends.
    pub(super) fn observe(
        &mut self,
        kind: &ResourceKind,
        object: &str,
        cached: Option<u64>,
    ) -> Vec<ControllerKey> {
        self.holds.observe(kind, object, cached)
    }

    /// Ends every hold whose deadline is at or before `horizon`: the keys released.
    pub(super) fn expire_holds(&mut self, horizon: Instant) -> Vec<ControllerKey> {
        self.holds.expire(horizon)
    }

    /// Number of held keys.
    pub(super) fn holds_len(&self) -> usize {
        self.holds.len()
    }

    /// A hold of `(controller, key)` ended (released by [`Items::observe`] or
    /// [`Items::expire_holds`]).
    pub(super) fn hold_ended(&mut self, controller: String, key: String) -> HoldEnded {
        let pair = (controller, key);
        if self.foreign.remove(&pair) {
            HoldEnded::Foreign(self.deferred.remove(&pair).then_some(pair))
        } else {
            HoldEnded::OfThisTerm(pair)
        }
    }

    /// `controller` retired, and its queue with it: every key of it still out or held becomes foreign,
    /// as a key held from an earlier term is. A queue registered for it again later knows nothing of
    /// those runs; while their keys are foreign it defers them, so a key never runs twice at once even
    /// across a retirement, and its Done or hold's end cannot finish the new queue's run of the key.
    pub(super) fn retire(&mut self, controller: &str) {
        for item in self.items.values_mut() {
            if item.controller == controller && !item.foreign {
                item.foreign = true;
                self.foreign
                    .insert((item.controller.clone(), item.key.clone()));
            }
        }
        let held: Vec<ControllerKey> = self
            .holds
            .held()
            .filter(|(c, _)| c == controller)
            .cloned()
            .collect();
        self.foreign.extend(held);
    }

    /// Every item, by id (tests).
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = (&ItemId, &Item)> {
        self.items.iter()
    }

    /// The next id [`Items::next_id`] hands out (tests).
    #[cfg(test)]
    pub(super) fn peek_next_id(&self) -> u64 {
        self.next_id
    }

    /// Foreign keys (tests).
    #[cfg(test)]
    pub(super) fn foreign(&self) -> &HashSet<ControllerKey> {
        &self.foreign
    }

    /// Deferred keys (tests).
    #[cfg(test)]
    pub(super) fn deferred(&self) -> &HashSet<ControllerKey> {
        &self.deferred
    }

    /// Held keys (tests).
    #[cfg(test)]
    pub(super) fn held(&self) -> impl Iterator<Item = &ControllerKey> {
        self.holds.held()
    }
}
