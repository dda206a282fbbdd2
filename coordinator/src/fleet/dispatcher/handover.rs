//! Shards: assignment over live workers, claims of free shards and handover without overlap.
//!
//! [`Handover`] owns the shard table and everything changing it. It decides; the dispatcher carries its
//! decisions out: it hands the [`ShardWrite`]s to etcd, sends the revokes and routes the keys a shard
//! frees. What it needs to know of the workers it reads from [`Membership`].

use std::collections::{BTreeSet, HashMap, HashSet};

use tokio::time::Instant;

use super::super::claim_retry::ClaimRetry;
use super::super::shards::{Parked, ShardState, ShardTable};
use super::super::workers::WorkerState;
use super::MAX_WEIGHT_RATIO;
use super::etcd_work::{ShardWrite, WriteOutcome};
use super::membership::Membership;
use crate::shard::{WorkerWeight, assign};

/// Shard ownership as this term knows it, and what changes it. Invariants: a shard changes owner only
/// once its old owner holds no item of it (its out count is zero and the owner said Hello to this term)
/// or its lease is gone; a shard in `committing` is never dispatchable (not `Owned`) and neither
/// rebalancing nor worker loss touches it until etcd's answer is back.
pub(super) struct Handover {
    shards: ShardTable,
    /// Moves that may be able to finish (checked at the end of the turn).
    pending_moves: BTreeSet<u32>,
    /// When shards whose claims etcd refused may be claimed again.
    claim_retry: ClaimRetry,
    /// Shards whose etcd key carries no lease, with the key's mod revision: claimed over (see
    /// `ShardWrite::replace`).
    leaseless: HashMap<u32, i64>,
    /// Shards whose ownership write is with etcd: undispatchable, and left alone by rebalancing and
    /// worker loss until the result is back.
    committing: BTreeSet<u32>,
}

/// What a rebalance decided.
#[derive(Default)]
pub(super) struct Rebalance {
    /// Shards each worker must stop running: their moves started, and finish once it holds nothing of
    /// them. The keys in its backlog of those shards are parked (see [`Handover::park_backlog`]).
    pub(super) revokes: HashMap<String, Vec<u32>>,
    /// Keys of shards whose move was called off: the shard is its owner's again.
    pub(super) unparked: Vec<Parked>,
    /// Claims of free shards, for etcd.
    pub(super) writes: Vec<ShardWrite>,
    /// Some shard must be looked at again (a claim etcd refused a moment ago).
    pub(super) again: bool,
}

/// How a shard write settled.
#[derive(Default)]
pub(super) struct Settled {
    /// Keys parked on the shard, now that it has a dispatchable owner.
    pub(super) unparked: Vec<Parked>,
    /// The write moved the shard from one worker to another.
    pub(super) moved: bool,
    /// The shard's etcd key turned out to carry no lease (newly seen).
    pub(super) leaseless: bool,
    /// Ownership must be computed again.
    pub(super) rebalance: bool,
}

impl Handover {
    /// `count` shards, all unowned, nothing moving.
    pub(super) fn new(count: u32) -> Self {
        Self {
            shards: ShardTable::new(count),
            pending_moves: BTreeSet::new(),
            claim_retry: ClaimRetry::default(),
            leaseless: HashMap::new(),
            committing: BTreeSet::new(),
        }
    }

    /// The shard table.
    pub(super) fn table(&self) -> &ShardTable {
        &self.shards
    }

    /// The shard table, to count items out and back and to park keys ([`ShardTable`]'s own operations;
    /// ownership changes only through [`Handover`]).
    pub(super) fn table_mut(&mut self) -> &mut ShardTable {
        &mut self.shards
    }

    /// Whether shard `s`'s ownership write is with etcd (tests).
    #[cfg(test)]
    pub(super) fn is_committing(&self, s: u32) -> bool {
        self.committing.contains(&s)
    }

    /// Whether some move may be able to finish.
    pub(super) fn has_pending_moves(&self) -> bool {
        !self.pending_moves.is_empty()
    }

    /// Shards whose claims etcd refused, waiting to be claimed again.
    pub(super) fn claims_waiting(&self) -> usize {
        self.claim_retry.len()
    }

    /// Takes the shard owners etcd holds at the start of the term, as `(shard, owner, lease, mod
    /// revision)`. Returns how many shard keys carry no lease.
    pub(super) fn load(
        &mut self,
        owners: Vec<(u32, String, i64, i64)>,
        members: &Membership,
    ) -> usize {
        for (s, owner, lease, mod_revision) in owners {
            if s >= self.shards.count() {
                continue;
            }
            if lease == 0 {
                self.leaseless.insert(s, mod_revision);
                continue;
            }
            // A key on another lease than its owner's registration — an earlier incarnation's, or the
            // lease a fenced worker's shards are kept on — is not the owner's to dispatch to: the shard
            // counts as unowned, and a claim of it waits until that key is gone.
            if members.lease_of(&owner) == Some(lease) {
                self.shards.set_state(s, ShardState::Owned(owner));
            }
        }
        self.leaseless.len()
    }

    /// The worker registry changed: a worker registering (again) may make a held shard key current, so
    /// refused claims are tried at once.
    pub(super) fn registry_changed(&mut self) {
        self.claim_retry.clear();
    }

    /// Computes the desired owners over the dispatchable workers and starts what moves them there:
    /// claims of free shards (for etcd), and moves, which start by revoking the shard from its old
    /// owner and finish in [`Handover::complete_moves`].
    pub(super) fn rebalance(&mut self, members: &Membership, now: Instant) -> Rebalance {
        let mut plan = Rebalance::default();
        let live = fair_weights(
            members
                .dispatchable()
                .map(|w| WorkerWeight {
                    id: w.id.clone().into(),
                    weight: w.capacity,
                })
                .collect(),
        );
        if live.is_empty() {
            return plan;
        }
        let live_ids: HashSet<&str> = members.dispatchable().map(|w| w.id.as_str()).collect();
        let current: Vec<_> = (0..self.shards.count())
            .map(|s| {
                self.shards
                    .intended_owner(s)
                    .filter(|o| live_ids.contains(o))
                    .map(|o| o.to_owned().into())
            })
            .collect();
        let desired = assign(self.shards.count(), &live, &current);
        let mut claims = Vec::new();
        for (s, target) in desired.into_iter().enumerate() {
            let s = u32::try_from(s).unwrap_or(u32::MAX);
            if self.committing.contains(&s) {
                // Its write is in flight; the next rebalance sees how it ended.
                continue;
            }
            let target = target.to_string();
            match self.shards.state(s).clone() {
                ShardState::Unowned if self.claim_retry.may_claim(s, now) => {
                    claims.push((s, target));
                }
                // Refused a moment ago: claimed again once its wait is over.
                ShardState::Unowned => plan.again = true,
                ShardState::Owned(owner) if owner == target => {}
                ShardState::Owned(owner) => {
                    self.shards.set_state(
                        s,
                        ShardState::Moving {
                            from: owner.clone(),
                            to: target,
                        },
                    );
                    plan.revokes.entry(owner).or_default().push(s);
                    self.pending_moves.insert(s);
                }
                ShardState::Moving { from, .. } if from == target => {
                    plan.unparked.extend(self.owned(s, from));
                }
                ShardState::Moving { from, to } if to != target => {
                    self.shards
                        .set_state(s, ShardState::Moving { from, to: target });
                    // It may have been waiting only for its old target's lease.
                    self.pending_moves.insert(s);
                }
                ShardState::Moving { .. } => {}
            }
        }
        let writes = claims
            .into_iter()
            .filter_map(|(shard, to)| {
                let lease = members.lease_of(&to)?;
                Some(ShardWrite {
                    shard,
                    from: None,
                    to,
                    lease,
                    replace: self.leaseless.get(&shard).copied(),
                })
            })
            .collect();
        plan.writes = self.hand_off(writes);
        plan
    }

    /// Moves `w`'s backlog of shard `s` (a shard moving away from it) onto the shard's parked keys: they
    /// go to whoever owns the shard next.
    pub(super) fn park_backlog(&mut self, w: &mut WorkerState, s: u32) {
        for (controller, backlog) in &mut w.backlog {
            backlog.retain(|(key, shard)| {
                if *shard == s {
                    self.shards.park(
                        s,
                        Parked {
                            controller: controller.clone(),
                            key: key.clone(),
                        },
                    );
                    false
                } else {
                    true
                }
            });
        }
    }

    /// An item of shard `s` came back and `left` are still out: a move of the shard may finish now.
    pub(super) fn item_back(&mut self, s: u32, left: u32) {
        if left == 0 && matches!(self.shards.state(s), ShardState::Moving { .. }) {
            self.pending_moves.insert(s);
        }
    }

    /// Worker `id` said Hello to this term: the shards it owns (moving away or not). Moves away from it
    /// waited for this (it might have held items nobody here knew of): what it holds is known now, so
    /// they can finish once those are done.
    pub(super) fn said_hello(&mut self, id: &str) -> Vec<u32> {
        let shards = self.shards.owned_by(id);
        for &s in &shards {
            if matches!(self.shards.state(s), ShardState::Moving { .. }) {
                self.pending_moves.insert(s);
            }
        }
        shards
    }

    /// Hands off the moves whose old owner holds nothing of the shard any more: the writes for etcd, and
    /// whether ownership must be computed again (a move's target lost its lease).
    pub(super) fn complete_moves(&mut self, members: &Membership) -> (Vec<ShardWrite>, bool) {
        let mut writes = Vec::new();
        let mut again = false;
        for s in std::mem::take(&mut self.pending_moves) {
            if self.committing.contains(&s) {
                continue;
            }
            let ShardState::Moving { from, to } = self.shards.state(s).clone() else {
                continue;
            };
            if self.shards.in_flight(s) > 0 {
                continue;
            }
            let from = match members.get(&from) {
                // An old owner that has not said Hello to this leader may hold items of an earlier
                // term that nobody here knows of: wait for its Hello (which hands the move back here)
                // or its lease's end.
                Some(w) if !w.handshaken => continue,
                Some(_) => Some(from),
                // Not registered (gone, or fenced by an earlier leader whose wait this term cannot
                // know): written as a claim, which etcd refuses while the old owner's key lives — on
                // its lease, or on the fence lease that outlives the worker's items.
                None => None,
            };
            let Some(lease) = members.lease_of(&to) else {
                again = true;
                continue;
            };
            let replace = if from.is_none() {
                self.leaseless.get(&s).copied()
            } else {
                None
            };
            writes.push(ShardWrite {
                shard: s,
                from,
                to,
                lease,
                replace,
            });
        }
        (self.hand_off(writes), again)
    }

    /// Marks the shards of `writes` committing: undispatchable until their results are back.
    fn hand_off(&mut self, writes: Vec<ShardWrite>) -> Vec<ShardWrite> {
        self.committing.extend(writes.iter().map(|w| w.shard));
        writes
    }

    /// Settles a shard write. While it was in flight the shard was neither dispatchable nor touched
    /// by rebalancing or worker loss (its old owner held nothing of it, and nothing was sent), so
    /// whatever the outcome, the shard goes to one live owner or none: never two.
    ///
    /// The table says `Owned(w)` only where etcd's key names `w` on `w`'s current lease, so that the
    /// key lives exactly as long as `w` may run items of the shard, whichever leader reads it later.
    pub(super) fn written(
        &mut self,
        w: ShardWrite,
        outcome: WriteOutcome,
        members: &Membership,
        now: Instant,
    ) -> Settled {
        let s = w.shard;
        self.committing.remove(&s);
        let live = |id: &str| members.lease_of(id).is_some();
        let on_current_lease = |id: &str, lease: i64| members.lease_of(id) == Some(lease);
        let mut settled = Settled::default();
        match outcome {
            WriteOutcome::Written => {
                self.claim_retry.written(s);
                self.leaseless.remove(&s);
                settled.moved = w.from.is_some();
                if on_current_lease(&w.to, w.lease) {
                    settled.unparked = self.owned(s, w.to);
                } else {
                    // Written on a lease that has ended (the key goes with it) or that its worker
                    // left for a new one (a claim waits until the key is gone).
                    self.shards.set_state(s, ShardState::Unowned);
                    settled.rebalance = true;
                }
            }
            WriteOutcome::Refused { current } => {
                // Not free after all (a claim), or the old owner's key vanished (a move): take etcd's
                // word for who owns it, and rebalance from there. A key on a lease its owner no longer
                // holds (an earlier incarnation's, or a fenced worker's kept shards) is nobody's to
                // dispatch to: claims are tried again, once its lease can have ended (`ClaimRetry`).
                // A key on no lease would never end: it is claimed over at once.
                match current {
                    Some(h) if on_current_lease(&h.owner, h.lease) => {
                        self.claim_retry.written(s);
                        settled.unparked = self.owned(s, h.owner);
                    }
                    Some(h) if h.lease == 0 => {
                        settled.leaseless = self.leaseless.insert(s, h.mod_revision).is_none();
                        self.shards.set_state(s, ShardState::Unowned);
                    }
                    Some(h) => {
                        self.claim_retry.refused(s, now, h.ttl);
                        self.shards.set_state(s, ShardState::Unowned);
                    }
                    None => {
                        self.claim_retry.refused(s, now, None);
                        self.shards.set_state(s, ShardState::Unowned);
                    }
                }
                settled.rebalance = true;
            }
            WriteOutcome::Failed => match w.from {
                None => {
                    self.shards.set_state(s, ShardState::Unowned);
                    settled.rebalance = true;
                }
                Some(from) if !live(&from) => {
                    self.shards.set_state(s, ShardState::Unowned);
                    settled.rebalance = true;
                }
                Some(from) if !live(&w.to) => {
                    settled.unparked = self.owned(s, from);
                    settled.rebalance = true;
                }
                // Still Moving: try again on the next pass.
                Some(_) => {
                    self.pending_moves.insert(s);
                }
            },
        }
        settled
    }

    /// Worker `id` is gone (its lease ended, and a fence, if any, has passed): its shards are free, and
    /// a move to it falls back to the old owner. Returns the keys parked on shards that have a
    /// dispatchable owner again.
    pub(super) fn worker_gone(&mut self, id: &str) -> Vec<Parked> {
        let mut unparked = Vec::new();
        for s in 0..self.shards.count() {
            if self.committing.contains(&s) {
                // Its write is in flight; settling the result accounts for the worker's end.
                continue;
            }
            match self.shards.state(s).clone() {
                // Its ownership keys died with its lease (or, fenced, live on until it has certainly
                // stopped: a claim waits for them).
                ShardState::Owned(o) if o == id => self.shards.set_state(s, ShardState::Unowned),
                ShardState::Moving { from, .. } if from == id => {
                    self.shards.set_state(s, ShardState::Unowned);
                }
                ShardState::Moving { from, to } if to == id => {
                    unparked.extend(self.owned(s, from));
                }
                _ => {}
            }
        }
        unparked
    }

    /// Shard `s` is `owner`'s: the keys parked on it, to be routed.
    fn owned(&mut self, s: u32, owner: String) -> Vec<Parked> {
        self.shards.set_state(s, ShardState::Owned(owner));
        self.shards.unpark(s).into()
    }

    /// Moves that may finish (tests).
    #[cfg(test)]
    pub(super) fn pending_moves(&self) -> &BTreeSet<u32> {
        &self.pending_moves
    }
}

/// Caps each weight at [`MAX_WEIGHT_RATIO`] times the (lower) median weight, so one worker advertising
/// a huge capacity gets a bounded share of the shards rather than nearly all of them.
pub(super) fn fair_weights(mut workers: Vec<WorkerWeight>) -> Vec<WorkerWeight> {
    let mut weights: Vec<u32> = workers.iter().map(|w| w.weight.max(1)).collect();
    weights.sort_unstable();
    let Some(&median) = weights.get(weights.len().saturating_sub(1) / 2) else {
        return workers;
    };
    let cap = median.saturating_mul(MAX_WEIGHT_RATIO);
    for w in &mut workers {
        w.weight = w.weight.clamp(1, cap);
    }
    workers
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    use super::super::super::shards::{Parked, ShardState};
    use super::super::super::workers::Connection;
    use super::super::etcd_work::{ShardWrite, WriteOutcome};
    use super::super::membership::Membership;
    use super::{Handover, MAX_WEIGHT_RATIO, WorkerWeight, fair_weights};

    /// Workers `(id, lease)` registered and connected to this term, each running one controller.
    fn members(workers: &[(&str, i64)]) -> Membership {
        let mut m = Membership::default();
        let now = Instant::now();
        m.load(
            workers
                .iter()
                .map(|(id, lease)| ((*id).to_owned(), *lease, 1))
                .collect(),
            1,
            now,
        );
        for (conn, (id, _)) in workers.iter().enumerate() {
            let (tx, rx) = mpsc::unbounded_channel();
            // The receiver is dropped: a revoke sent to it is simply lost, which these tests don't read.
            drop(rx);
            let connection = Connection {
                id: conn as u64,
                tx,
            };
            m.said_hello(id, HashMap::from([("c".to_owned(), 1)]), connection);
        }
        m
    }

    fn settle_all(h: &mut Handover, writes: Vec<ShardWrite>, m: &Membership) {
        for w in writes {
            h.written(w, WriteOutcome::Written, m, Instant::now());
        }
    }

    /// A shard moves to a new worker only once its old owner holds nothing of it: while one item is
    /// out, the move is not even written; once it is back, the write goes out and its success makes
    /// the new worker the owner.
    #[tokio::test(start_paused = true)]
    async fn a_move_is_written_only_once_the_old_owner_holds_nothing_of_the_shard() {
        let mut h = Handover::new(4);
        let alone = members(&[("a", 1)]);
        let plan = h.rebalance(&alone, Instant::now());
        assert_eq!(plan.writes.len(), 4, "every free shard is claimed");
        settle_all(&mut h, plan.writes, &alone);
        assert!((0..4).all(|s| h.table().dispatch_owner(s) == Some("a")));

        let both = members(&[("a", 1), ("b", 2)]);
        let plan = h.rebalance(&both, Instant::now());
        let moving = plan.revokes.get("a").cloned().unwrap_or_default();
        assert_eq!(moving.len(), 2, "half the shards move to the newcomer");
        assert!(plan.writes.is_empty());
        let busy = moving[0];
        h.table_mut().item_out(busy);

        let (writes, again) = h.complete_moves(&both);
        assert!(!again);
        assert_eq!(
            writes.iter().map(|w| w.shard).collect::<Vec<_>>(),
            moving[1..],
            "the move of a shard with an item out waits"
        );
        assert_eq!(
            h.table().dispatch_owner(busy),
            None,
            "nothing of a moving shard is dispatched"
        );
        settle_all(&mut h, writes, &both);

        let left = h.table_mut().item_back(busy);
        h.item_back(busy, left);
        let (writes, _) = h.complete_moves(&both);
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].from.as_deref(), Some("a"));
        assert_eq!(
            h.table().dispatch_owner(busy),
            None,
            "not dispatchable while committing"
        );
        settle_all(&mut h, writes, &both);
        assert_eq!(h.table().dispatch_owner(busy), Some("b"));
    }

    /// A claim etcd wrote on a lease its worker no longer holds leaves the shard unowned (the key goes
    /// with that lease), and asks for a rebalance.
    #[tokio::test(start_paused = true)]
    async fn a_claim_written_on_an_ended_lease_leaves_the_shard_unowned() {
        let mut h = Handover::new(1);
        let m = members(&[("a", 1)]);
        let mut writes = h.rebalance(&m, Instant::now()).writes;
        let re_registered = members(&[("a", 7)]);
        let settled = h.written(
            writes.remove(0),
            WriteOutcome::Written,
            &re_registered,
            Instant::now(),
        );
        assert!(settled.rebalance);
        assert_eq!(h.table().state(0), &ShardState::Unowned);
    }

    /// When a move's target is gone, the shard is its old owner's again, and the keys parked while it
    /// moved come back to be routed; a gone owner's shards are free.
    #[tokio::test(start_paused = true)]
    async fn a_move_to_a_gone_worker_falls_back_and_gives_its_parked_keys_back() {
        let mut h = Handover::new(2);
        let m = members(&[("a", 1), ("b", 2)]);
        h.load(vec![(0, "a".into(), 1, 10), (1, "b".into(), 2, 11)], &m);
        h.table_mut().set_state(
            0,
            ShardState::Moving {
                from: "a".into(),
                to: "b".into(),
            },
        );
        let parked = Parked {
            controller: "c".into(),
            key: "ns/x".into(),
        };
        h.table_mut().park(0, parked.clone());
        assert_eq!(h.worker_gone("b"), vec![parked]);
        assert_eq!(h.table().state(0), &ShardState::Owned("a".into()));
        assert_eq!(h.table().state(1), &ShardState::Unowned);
    }

    fn weights(ws: &[u32]) -> Vec<WorkerWeight> {
        ws.iter()
            .enumerate()
            .map(|(i, w)| WorkerWeight {
                id: format!("w{i}").into(),
                weight: *w,
            })
            .collect()
    }

    #[test]
    fn one_huge_advertisement_weighs_four_times_the_median() {
        let fair = fair_weights(weights(&[10, u32::MAX]));
        assert_eq!(fair.iter().map(|w| w.weight).collect::<Vec<_>>(), [10, 40]);
        let fair = fair_weights(weights(&[5, 5, 5, 10_000]));
        assert_eq!(fair[3].weight, 20);
    }

    proptest! {
        /// No worker ever weighs more than 4x the median, none less than 1, and an even fleet is unchanged.
        #[test]
        fn fair_weights_are_capped_and_positive(ws in proptest::collection::vec(any::<u32>(), 1..20)) {
            let fair = fair_weights(weights(&ws));
            let mut sorted: Vec<u32> = ws.iter().map(|w| (*w).max(1)).collect();
            sorted.sort_unstable();
            let median = sorted[(sorted.len() - 1) / 2];
            for (before, after) in ws.iter().zip(&fair) {
                prop_assert!(after.weight >= 1);
                prop_assert!(after.weight <= median.saturating_mul(MAX_WEIGHT_RATIO));
                prop_assert!(after.weight <= (*before).max(1));
            }
        }

    }
}
