//! Shards: assignment over live workers, claims of free shards and handover without overlap.

use super::*;

impl Dispatcher {
    pub(super) async fn rebalance(&mut self) -> Result<(), TermError> {
        self.needs_rebalance = false;
        let live = fair_weights(
            self.workers
                .values()
                .filter(|w| w.is_dispatchable())
                .map(|w| WorkerWeight {
                    id: w.id.clone().into(),
                    weight: w.capacity,
                })
                .collect(),
        );
        if live.is_empty() {
            return Ok(());
        }
        let live_ids: HashSet<&str> = self
            .workers
            .values()
            .filter(|w| w.is_dispatchable())
            .map(|w| w.id.as_str())
            .collect();
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
        let mut revokes: HashMap<String, Vec<u32>> = HashMap::new();
        for (s, target) in desired.into_iter().enumerate() {
            let s = u32::try_from(s).unwrap_or(u32::MAX);
            let target = target.to_string();
            match self.shards.state(s).clone() {
                ShardState::Unowned => claims.push((s, target)),
                ShardState::Owned(owner) if owner == target => {}
                ShardState::Owned(owner) => {
                    self.shards.set_state(
                        s,
                        ShardState::Moving {
                            from: owner.clone(),
                            to: target,
                        },
                    );
                    self.take_backlog_of_shard(&owner, s);
                    revokes.entry(owner).or_default().push(s);
                    self.pending_moves.insert(s);
                }
                ShardState::Moving { from, .. } if from == target => {
                    self.shards.set_state(s, ShardState::Owned(from));
                    self.unpark(s);
                }
                ShardState::Moving { from, to } if to != target => {
                    self.shards
                        .set_state(s, ShardState::Moving { from, to: target });
                }
                ShardState::Moving { .. } => {}
            }
        }
        for (worker, shards) in revokes {
            if let Some(w) = self.workers.get(&worker) {
                w.send(proto::coordinator_message::Msg::Revoke(proto::Revoke {
                    shards,
                }));
            }
        }
        self.claim(claims).await?;
        Ok(())
    }

    /// Writes ownership of unowned shards, in chunks, each guarded by "still unowned" and "still leader".
    pub(super) async fn claim(&mut self, claims: Vec<(u32, String)>) -> Result<(), TermError> {
        for chunk in claims.chunks(TXN_CHUNK) {
            let mut compares = Vec::new();
            let mut ops = Vec::new();
            for (s, owner) in chunk {
                let Some(lease) = self.workers.get(owner).and_then(|w| w.lease_id) else {
                    continue;
                };
                let key = self.keys.shard(*s);
                compares.push(Compare::create_revision(key.clone(), CompareOp::Equal, 0));
                ops.push(TxnOp::put(
                    key,
                    owner.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                ));
            }
            if ops.is_empty() {
                continue;
            }
            let all = self
                .ctx
                .election
                .fenced_txn(&self.ctx.elected, compares, ops)
                .await;
            match all {
                Ok(true) => {
                    for (s, owner) in chunk {
                        self.owned(*s, owner.clone());
                    }
                }
                // Some shard was not free after all (or a lease just ended): go one by one.
                Ok(false) | Err(ElectionError::Etcd(_)) => {
                    for (s, owner) in chunk {
                        self.claim_one(*s, owner).await?;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    pub(super) async fn claim_one(&mut self, s: u32, owner: &str) -> Result<(), TermError> {
        let Some(lease) = self.workers.get(owner).and_then(|w| w.lease_id) else {
            return Ok(());
        };
        let key = self.keys.shard(s);
        let compares = vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)];
        let ops = vec![TxnOp::put(
            key,
            owner,
            Some(PutOptions::new().with_lease(lease)),
        )];
        match self
            .ctx
            .election
            .fenced_txn(&self.ctx.elected, compares, ops)
            .await
        {
            Ok(true) => self.owned(s, owner.to_owned()),
            Ok(false) => {
                // Someone owns it in etcd that this leader did not know of; read who, retry later.
                self.needs_rebalance = true;
                let mut etcd = self.ctx.etcd.clone();
                if let Ok(resp) = etcd.get(self.keys.shard(s), None).await
                    && let Some(kv) = resp.kvs().first()
                    && let Ok(current) = std::str::from_utf8(kv.value())
                {
                    self.shards
                        .set_state(s, ShardState::Owned(current.to_owned()));
                    self.unpark(s);
                }
            }
            Err(ElectionError::Etcd(err)) => {
                debug!(shard = s, error = %err, "claim failed; retrying at the next rebalance");
                self.needs_rebalance = true;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Finishes the moves whose old owner holds nothing of the shard any more.
    pub(super) async fn complete_moves(&mut self) -> Result<(), TermError> {
        let candidates: Vec<u32> = std::mem::take(&mut self.pending_moves)
            .into_iter()
            .collect();
        for s in candidates {
            let ShardState::Moving { from, to } = self.shards.state(s).clone() else {
                continue;
            };
            // An old owner that has not said Hello to this leader may hold items of an earlier term
            // that nobody here knows of: wait for its Hello or its lease's end.
            let from_known = self.workers.get(&from).is_none_or(|w| w.handshaken);
            if self.shards.in_flight(s) > 0 || !from_known {
                continue;
            }
            let Some(lease) = self.workers.get(&to).and_then(|w| w.lease_id) else {
                self.needs_rebalance = true;
                continue;
            };
            let key = self.keys.shard(s);
            let compares = vec![Compare::value(key.clone(), CompareOp::Equal, from.clone())];
            let ops = vec![TxnOp::put(
                key,
                to.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )];
            match self
                .ctx
                .election
                .fenced_txn(&self.ctx.elected, compares, ops)
                .await
            {
                Ok(true) => {
                    self.ctx.metrics.shard_moves.inc();
                    self.owned(s, to);
                }
                Ok(false) => {
                    // The old owner's key vanished (its lease ended): the shard is free to claim.
                    self.shards.set_state(s, ShardState::Unowned);
                    self.claim_one(s, &to).await?;
                }
                Err(ElectionError::Etcd(err)) => {
                    debug!(shard = s, error = %err, "move failed; retrying");
                    self.pending_moves.insert(s);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    pub(super) fn owned(&mut self, s: u32, owner: String) {
        self.shards.set_state(s, ShardState::Owned(owner));
        self.unpark(s);
    }

    pub(super) fn unpark(&mut self, s: u32) {
        for parked in self.shards.unpark(s) {
            self.route(parked.controller, parked.key);
        }
    }

    pub(super) fn take_backlog_of_shard(&mut self, worker: &str, s: u32) {
        let Some(w) = self.workers.get_mut(worker) else {
            return;
        };
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
    use super::*;
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
