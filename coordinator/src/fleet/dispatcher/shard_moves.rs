//! Carrying out [`Handover`]'s decisions: a rebalance's revokes and claims, moves handed to etcd once
//! their old owner holds nothing of the shard, and the settling of each write. The keys a shard frees
//! are routed here, and every write goes to etcd beside the loop.
//!
//! [`Handover`]: super::handover::Handover

use flotilla_proto as proto;
use tokio::time::Instant;

use super::super::shards::Parked;
use super::Dispatcher;
use super::etcd_work::{EtcdWork, ShardWrite, WriteOutcome};

impl Dispatcher {
    /// Computes the desired owners and starts what moves them there (see [`Handover::rebalance`]).
    ///
    /// [`Handover::rebalance`]: super::handover::Handover::rebalance
    pub(super) fn rebalance(&mut self) {
        let plan = self.handover.rebalance(&self.membership, Instant::now());
        self.needs_rebalance = plan.again;
        for (worker, shards) in plan.revokes {
            if let Some(w) = self.membership.get_mut(&worker) {
                for &s in &shards {
                    self.handover.park_backlog(w, s);
                }
                w.send(proto::coordinator_message::Msg::Revoke(proto::Revoke {
                    shards,
                }));
            }
        }
        self.route_unparked(plan.unparked);
        self.hand_off(plan.writes);
    }

    /// Hands off the moves whose old owner holds nothing of the shard any more.
    pub(super) fn complete_moves(&mut self) {
        let (writes, again) = self.handover.complete_moves(&self.membership);
        self.needs_rebalance |= again;
        self.hand_off(writes);
    }

    /// Settles a shard write (see [`Handover::written`]).
    ///
    /// [`Handover::written`]: super::handover::Handover::written
    pub(super) fn on_shard_written(&mut self, w: ShardWrite, outcome: WriteOutcome) {
        let settled = self
            .handover
            .written(w, outcome, &self.membership, Instant::now());
        if settled.moved {
            self.ctx.metrics.shard_moves.inc();
        }
        if settled.leaseless {
            self.ctx.metrics.bad("leaseless_shard_key");
        }
        self.needs_rebalance |= settled.rebalance;
        self.route_unparked(settled.unparked);
    }

    /// Routes keys a shard parked, now that it has a dispatchable owner.
    pub(super) fn route_unparked(&mut self, unparked: Vec<Parked>) {
        for parked in unparked {
            self.route(parked.controller, parked.key);
        }
    }

    fn hand_off(&mut self, writes: Vec<ShardWrite>) {
        if !writes.is_empty() {
            self.etcd_work.push(EtcdWork::Shards(writes));
        }
    }
}
