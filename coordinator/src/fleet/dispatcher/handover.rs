//! Shards: assignment over live workers, claims of free shards and handover without overlap.

use std::collections::{BTreeSet, HashMap, HashSet};

use flotilla_proto as proto;
use tokio::time::Instant;

use super::super::claim_retry::ClaimRetry;
use super::super::shards::{Parked, ShardState, ShardTable};
use super::etcd_work::{EtcdWork, ShardWrite, WriteOutcome};
use super::{Dispatcher, MAX_WEIGHT_RATIO};
use crate::shard::{WorkerWeight, assign};

/// Shard ownership as this term knows it, and what changes it. Invariants: a shard changes owner only
/// once its old owner holds no item of it (its out count is zero and the owner said Hello to this term)
/// or its lease is gone; a shard in `committing` is never dispatchable (not `Owned`) and neither
/// rebalancing nor worker loss touches it until etcd's answer is back.
pub(super) struct Handover {
    pub(super) shards: ShardTable,
    /// Moves that may be able to finish (checked at the end of the turn).
    pub(super) pending_moves: BTreeSet<u32>,
    /// When shards whose claims etcd refused may be claimed again.
    pub(super) claim_retry: ClaimRetry,
    /// Shards whose etcd key carries no lease, with the key's mod revision: claimed over (see
    /// `ShardWrite::replace`).
    pub(super) leaseless: HashMap<u32, i64>,
    /// Shards whose ownership write is with etcd: undispatchable, and left alone by rebalancing and
    /// worker loss until the result is back.
    pub(super) committing: BTreeSet<u32>,
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
}

impl Dispatcher {
    /// Computes the desired owners and starts what moves them there: claims of free shards go to etcd,
    /// moves start by revoking the shard from its old owner (they finish in `complete_moves`).
    pub(super) fn rebalance(&mut self) {
        self.needs_rebalance = false;
        let live = fair_weights(
            self.membership
                .workers
                .values()
                .filter(|w| w.is_dispatchable())
                .map(|w| WorkerWeight {
                    id: w.id.clone().into(),
                    weight: w.capacity,
                })
                .collect(),
        );
        if live.is_empty() {
            return;
        }
        let live_ids: HashSet<&str> = self
            .membership
            .workers
            .values()
            .filter(|w| w.is_dispatchable())
            .map(|w| w.id.as_str())
            .collect();
        let current: Vec<_> = (0..self.handover.shards.count())
            .map(|s| {
                self.handover
                    .shards
                    .intended_owner(s)
                    .filter(|o| live_ids.contains(o))
                    .map(|o| o.to_owned().into())
            })
            .collect();
        let desired = assign(self.handover.shards.count(), &live, &current);
        let now = Instant::now();
        let mut claims = Vec::new();
        let mut revokes: HashMap<String, Vec<u32>> = HashMap::new();
        for (s, target) in desired.into_iter().enumerate() {
            let s = u32::try_from(s).unwrap_or(u32::MAX);
            if self.handover.committing.contains(&s) {
                // Its write is in flight; the next rebalance sees how it ended.
                continue;
            }
            let target = target.to_string();
            match self.handover.shards.state(s).clone() {
                ShardState::Unowned if self.handover.claim_retry.may_claim(s, now) => {
                    claims.push((s, target));
                }
                // Refused a moment ago: claimed again once its wait is over (`periodic`).
                ShardState::Unowned => self.needs_rebalance = true,
                ShardState::Owned(owner) if owner == target => {}
                ShardState::Owned(owner) => {
                    self.handover.shards.set_state(
                        s,
                        ShardState::Moving {
                            from: owner.clone(),
                            to: target,
                        },
                    );
                    self.take_backlog_of_shard(&owner, s);
                    revokes.entry(owner).or_default().push(s);
                    self.handover.pending_moves.insert(s);
                }
                ShardState::Moving { from, .. } if from == target => {
                    self.handover.shards.set_state(s, ShardState::Owned(from));
                    self.unpark(s);
                }
                ShardState::Moving { from, to } if to != target => {
                    self.handover
                        .shards
                        .set_state(s, ShardState::Moving { from, to: target });
                    // It may have been waiting only for its old target's lease.
                    self.handover.pending_moves.insert(s);
                }
                ShardState::Moving { .. } => {}
            }
        }
        for (worker, shards) in revokes {
            if let Some(w) = self.membership.workers.get(&worker) {
                w.send(proto::coordinator_message::Msg::Revoke(proto::Revoke {
                    shards,
                }));
            }
        }
        self.claim(claims);
    }

    /// Hands claims of unowned shards to etcd (one batched, guarded write per chunk). The shards stay
    /// undispatchable until their results are back.
    pub(super) fn claim(&mut self, claims: Vec<(u32, String)>) {
        let writes: Vec<ShardWrite> = claims
            .into_iter()
            .filter_map(|(shard, to)| {
                let lease = self.membership.workers.get(&to).and_then(|w| w.lease_id)?;
                Some(ShardWrite {
                    shard,
                    from: None,
                    to,
                    lease,
                    replace: self.handover.leaseless.get(&shard).copied(),
                })
            })
            .collect();
        self.hand_off(writes);
    }

    /// Hands off the moves whose old owner holds nothing of the shard any more.
    pub(super) fn complete_moves(&mut self) {
        let candidates: Vec<u32> = std::mem::take(&mut self.handover.pending_moves)
            .into_iter()
            .collect();
        let mut writes = Vec::new();
        for s in candidates {
            if self.handover.committing.contains(&s) {
                continue;
            }
            let ShardState::Moving { from, to } = self.handover.shards.state(s).clone() else {
                continue;
            };
            if self.handover.shards.in_flight(s) > 0 {
                continue;
            }
            let from = match self.membership.workers.get(&from) {
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
            let Some(lease) = self.membership.workers.get(&to).and_then(|w| w.lease_id) else {
                self.needs_rebalance = true;
                continue;
            };
            let replace = if from.is_none() {
                self.handover.leaseless.get(&s).copied()
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
        self.hand_off(writes);
    }

    fn hand_off(&mut self, writes: Vec<ShardWrite>) {
        if writes.is_empty() {
            return;
        }
        self.handover
            .committing
            .extend(writes.iter().map(|w| w.shard));
        self.etcd_work.push(EtcdWork::Shards(writes));
    }

    /// Settles a shard write. While it was in flight the shard was neither dispatchable nor touched
    /// by rebalancing or worker loss (its old owner held nothing of it, and nothing was sent), so
    /// whatever the outcome, the shard goes to one live owner or none: never two.
    ///
    /// The table says `Owned(w)` only where etcd's key names `w` on `w`'s current lease, so that the
    /// key lives exactly as long as `w` may run items of the shard, whichever leader reads it later.
    pub(super) fn on_shard_written(&mut self, w: ShardWrite, outcome: WriteOutcome) {
        let s = w.shard;
        self.handover.committing.remove(&s);
        let live = |d: &Self, id: &str| {
            d.membership
                .workers
                .get(id)
                .is_some_and(|w| w.lease_id.is_some())
        };
        let on_current_lease = |d: &Self, id: &str, lease: i64| {
            d.membership.workers.get(id).and_then(|w| w.lease_id) == Some(lease)
        };
        match outcome {
            WriteOutcome::Written => {
                self.handover.claim_retry.written(s);
                self.handover.leaseless.remove(&s);
                if w.from.is_some() {
                    self.ctx.metrics.shard_moves.inc();
                }
                if on_current_lease(self, &w.to, w.lease) {
                    self.owned(s, w.to);
                } else {
                    // Written on a lease that has ended (the key goes with it) or that its worker
                    // left for a new one (a claim waits until the key is gone).
                    self.handover.shards.set_state(s, ShardState::Unowned);
                    self.needs_rebalance = true;
                }
            }
            WriteOutcome::Refused { current } => {
                // Not free after all (a claim), or the old owner's key vanished (a move): take etcd's
                // word for who owns it, and rebalance from there. A key on a lease its owner no longer
                // holds (an earlier incarnation's, or a fenced worker's kept shards) is nobody's to
                // dispatch to: claims are tried again, once its lease can have ended (`ClaimRetry`).
                // A key on no lease would never end: it is claimed over at once.
                let now = Instant::now();
                match current {
                    Some(h) if on_current_lease(self, &h.owner, h.lease) => {
                        self.handover.claim_retry.written(s);
                        self.owned(s, h.owner);
                    }
                    Some(h) if h.lease == 0 => {
                        self.note_leaseless(s, h.mod_revision);
                        self.handover.shards.set_state(s, ShardState::Unowned);
                    }
                    Some(h) => {
                        self.handover.claim_retry.refused(s, now, h.ttl);
                        self.handover.shards.set_state(s, ShardState::Unowned);
                    }
                    None => {
                        self.handover.claim_retry.refused(s, now, None);
                        self.handover.shards.set_state(s, ShardState::Unowned);
                    }
                }
                self.needs_rebalance = true;
            }
            WriteOutcome::Failed => match w.from {
                None => {
                    self.handover.shards.set_state(s, ShardState::Unowned);
                    self.needs_rebalance = true;
                }
                Some(from) => {
                    if !live(self, &from) {
                        self.handover.shards.set_state(s, ShardState::Unowned);
                        self.needs_rebalance = true;
                    } else if !live(self, &w.to) {
                        self.owned(s, from);
                        self.needs_rebalance = true;
                    } else {
                        // Still Moving: try again on the next pass.
                        self.handover.pending_moves.insert(s);
                    }
                }
            },
        }
    }

    /// Shard `s`'s etcd key carries no lease: no write of the fleet's makes one (a bad restore or a hand
    /// edit did), and it would never expire, so the next claim of the shard replaces it.
    pub(super) fn note_leaseless(&mut self, s: u32, mod_revision: i64) {
        if self.handover.leaseless.insert(s, mod_revision).is_none() {
            self.ctx.metrics.bad("leaseless_shard_key");
        }
    }

    pub(super) fn owned(&mut self, s: u32, owner: String) {
        self.handover.shards.set_state(s, ShardState::Owned(owner));
        self.unpark(s);
    }

    pub(super) fn unpark(&mut self, s: u32) {
        for parked in self.handover.shards.unpark(s) {
            self.route(parked.controller, parked.key);
        }
    }

    pub(super) fn take_backlog_of_shard(&mut self, worker: &str, s: u32) {
        let Some(w) = self.membership.workers.get_mut(worker) else {
            return;
        };
        for (controller, backlog) in &mut w.backlog {
            backlog.retain(|(key, shard)| {
                if *shard == s {
                    self.handover.shards.park(
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
    use super::{MAX_WEIGHT_RATIO, WorkerWeight, fair_weights};
    use proptest::prelude::*;

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
