//! A worker leaving the term: one silent beyond the reconnect grace is fenced (its lease revoked beside
//! the loop, so it stops itself), and one whose lease is gone and whose fence has passed is released:
//! its items run again elsewhere, its shards are free, its backlog is routed anew.

use std::time::Duration;

use flotilla_common::Verdict;
use tokio::time::Instant;
use tracing::{info, warn};

use super::super::workers::WorkerState;
use super::Dispatcher;
use super::etcd_work::EtcdWork;
use crate::metrics::ReasonLabel;

impl Dispatcher {
    /// A worker that stays away longer than the grace while its lease lives would keep its shards
    /// forever; revoke its lease (it fences itself on the next renewal) and free its items a lease
    /// TTL later, when it has certainly stopped. The revoke runs beside the loop; until its result
    /// (`on_fenced`) the worker counts as fenced for the longest TTL a lease may have.
    pub(super) fn fence_silent_workers(&mut self, now: Instant) {
        let grace = self.ctx.config.worker_reconnect_grace;
        for (worker, lease) in self.membership.fence_silent(now, grace) {
            // Limited, not per worker: a thousand workers gone at once are one event.
            if let Verdict::Log { suppressed } = self.ctx.metrics.log_limiter.check(
                "fleet",
                "silent_worker",
                std::time::Instant::now(),
            ) {
                warn!(%worker, suppressed, "worker silent beyond the reconnect grace; revoking its lease");
            }
            self.access_dirty = true;
            let shards = self.handover.table().owned_by(&worker);
            self.etcd_work.push(EtcdWork::Fence {
                worker,
                lease,
                shards,
            });
        }
    }

    /// A silent worker's lease is revoked (or could not be): its items are free `ttl` from now.
    pub(super) fn on_fenced(&mut self, worker: &str, ttl: Duration) {
        self.membership.fenced(worker, ttl, Instant::now());
    }

    /// Releases every worker whose lease is gone and whose fence has passed.
    pub(super) fn free_stopped_workers(&mut self, now: Instant) {
        for id in self.membership.free_due(now) {
            if let Some(w) = self.membership.remove(&id) {
                self.release_worker(w, "lease_expired");
            }
        }
    }

    /// A worker no longer a member (its lease is gone): its items run again elsewhere, its shards are
    /// free, its backlog is routed anew.
    ///
    /// Its shards are freed first: a key its items' return lets run (a deferred run of a foreign key)
    /// must not be routed to a shard still naming it, where a new incarnation of its id would get it.
    pub(super) fn release_worker(&mut self, mut w: WorkerState, reason: &str) {
        let unparked = self.handover.worker_gone(&w.id);
        self.route_unparked(unparked);
        let items: Vec<(u64, u64)> = w.items.drain().collect();
        if !items.is_empty() {
            self.ctx
                .metrics
                .reclaimed
                .get_or_create(&ReasonLabel {
                    reason: reason.into(),
                })
                .inc_by(items.len() as u64);
            info!(
                worker = w.id,
                items = items.len(),
                "re-dispatching the items of a worker whose lease ended"
            );
        }
        for item_id in items {
            self.reclaim(item_id);
        }
        for (controller, keys) in w.backlog.drain() {
            for (key, _) in keys {
                self.route(controller.clone(), key);
            }
        }
        self.needs_rebalance = true;
        self.access_dirty = true;
    }
}
