//! Items: keys from the queues to the owners of their shards within credits, Done and read-your-writes
//! holds, items taken back, and the timers (delays, resyncs, the periodic checks).

use flotilla_common::{Reason, Verdict};
use flotilla_proto as proto;
use prost::Message;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::super::expectations::Expected;
use super::super::messages::{Done, Outcome};
use super::super::shards::Parked;
use super::super::workers::WorkerState;
use super::assign_budget::{self, Fit};
use super::items::ItemId;
use super::trace_spans;
use super::{Dispatcher, UNSERVED_RETRY};
use crate::shard::shard_of;

impl Dispatcher {
    pub(super) fn on_done(&mut self, worker: &str, d: Done) {
        let id = (d.term, d.item_id);
        let Some((item, left)) =
            self.items
                .done(id, worker, &mut self.membership, self.handover.table_mut())
        else {
            if let Verdict::Log { suppressed } =
                self.ctx.metrics.refused(worker, "done_for_unknown_item")
            {
                warn!(
                    worker,
                    term = d.term,
                    item = d.item_id,
                    suppressed,
                    "Done for an item the worker does not hold; ignored"
                );
            }
            return;
        };
        self.stall.progressed(Instant::now());
        self.handover.item_back(item.shard, left);
        if d.outcome == Outcome::Error {
            debug!(controller = %item.controller, key = %item.key, error = %d.error, "reconcile failed; retrying with backoff");
        }
        let Some(state) = self.running.get_mut(&item.controller) else {
            // A controller retired since the item went out: its key was made foreign then.
            if item.foreign {
                self.finish_foreign(&item.controller, &item.key);
            }
            return;
        };
        match d.outcome {
            Outcome::Success => {
                state.counters.success.inc();
                state.queue.forget(&item.key);
            }
            Outcome::RequeueAfter(after) => {
                state.counters.requeue_after.inc();
                state.queue.forget(&item.key);
                state
                    .queue
                    .add_after_because(item.key.clone(), after, Reason::RequeueAfter);
            }
            Outcome::Error => {
                state.counters.error.inc();
                // The retry continues the trace of the change that failed (the key is still
                // processing, so its traces are at hand); a requeue-after is a new cause.
                let trace = state.queue.traces(&item.key).first();
                state
                    .queue
                    .add_rate_limited_traced(item.key.clone(), Reason::Retry, trace);
            }
        }
        // Read-your-writes: hold the key (keep it processing, or, for an item held from an earlier
        // term, keep it foreign so its next run waits) until the cache shows every write. A new leader's
        // informers may not have seen what the old term's reconcile wrote.
        let mut unobserved = Vec::new();
        for w in d.writes {
            let Some(expected) = Expected::of(w.op, w.revision()) else {
                continue;
            };
            // Only kinds with an informer can be observed; others would hold the key for nothing.
            let Some(store) = self.ctx.informers.store(&w.kind) else {
                continue;
            };
            let cached = store.get(&w.key).map(|o| o.resource_version);
            if !expected.observed_in_cache(cached, store.resource_version()) {
                unobserved.push((w.kind, w.key, expected));
            }
        }
        if unobserved.is_empty() {
            if item.foreign {
                self.finish_foreign(&item.controller, &item.key);
            } else {
                state.queue.done(&item.key);
            }
        } else {
            if !item.foreign {
                state.queue.mark_held(&item.key);
            }
            let now = Instant::now();
            let deadline = now
                .checked_add(self.ctx.config.expectations_timeout)
                .unwrap_or(now);
            self.items.hold(
                &item.controller,
                &item.key,
                unobserved,
                deadline,
                item.trace,
            );
            self.ctx.metrics.ryw_held.inc();
            self.ctx
                .metrics
                .ryw_holds
                .set(i64::try_from(self.items.holds_len()).unwrap_or(i64::MAX));
        }
    }

    /// Takes an item back without a Done and runs its key again.
    pub(super) fn reclaim(&mut self, id: ItemId) {
        let Some((item, left)) =
            self.items
                .reclaim(id, &mut self.membership, self.handover.table_mut())
        else {
            return;
        };
        self.handover.item_back(item.shard, left);
        if item.foreign {
            self.finish_foreign(&item.controller, &item.key);
            if let Some(state) = self.running.get_mut(&item.controller) {
                state.queue.add_because(item.key, || Reason::Handover);
            }
            return;
        }
        if let Some(state) = self.running.get_mut(&item.controller) {
            state.queue.done(&item.key);
            state.queue.add_because(item.key, || Reason::Handover);
        }
    }

    /// `(controller, key)` stops being foreign; its deferred run of this term, if any, goes out.
    pub(super) fn finish_foreign(&mut self, controller: &str, key: &str) {
        if let Some((controller, key)) = self.items.finish_foreign(controller, key) {
            self.route(controller, key);
        }
    }

    /// Moves keys from the queues to workers while workers have credits.
    pub(super) fn pump(&mut self) {
        for name in self.running.names() {
            // Keys already routed to a worker go first.
            let ready: Vec<String> = self
                .membership
                .dispatchable()
                .filter(|w| {
                    w.credits(&name) > 0 && w.backlog.get(&name).is_some_and(|b| !b.is_empty())
                })
                .map(|w| w.id.clone())
                .collect();
            for worker in ready {
                self.drain_backlog(&worker, &name);
            }
            // Pull only while someone can take work, so the queue (and workqueue_depth) keeps what
            // nobody can run yet. Counted once: each key sent at once uses one credit, a key routed to
            // a busy worker's backlog uses none.
            let mut credits: u64 = self
                .membership
                .dispatchable()
                .map(|w| u64::from(w.credits(&name)))
                .sum();
            while credits > 0 {
                let Some(state) = self.running.get_mut(&name) else {
                    break;
                };
                if !state.synced {
                    break;
                }
                let Some(key) = state.queue.get() else { break };
                if self.route(name.clone(), key) {
                    credits -= 1;
                }
            }
        }
        let backlog = self.backlog_len();
        self.ctx
            .metrics
            .backlog
            .set(i64::try_from(backlog).unwrap_or(i64::MAX));
    }

    /// Sends `key` (processing in its queue) to the owner of its shard, or keeps it until it can be sent.
    /// Returns whether it was sent (using one credit).
    pub(super) fn route(&mut self, controller: String, key: String) -> bool {
        if !self.running.contains(&controller) {
            // Retired while the key waited: its queue is gone, and so is the key.
            return false;
        }
        let Some((controller, key)) = self.items.unless_deferred(controller, key) else {
            return false;
        };
        let shards = self.handover.table_mut();
        let shard = shard_of(&controller, &key, shards.count());
        let Some(w) = shards
            .dispatch_owner(shard)
            .and_then(|owner| self.membership.get_mut(owner))
        else {
            shards.park(shard, Parked { controller, key });
            return false;
        };
        let owner = w.id.clone();
        let backlog_empty = w.backlog.get(&controller).is_none_or(|b| b.is_empty());
        if w.is_dispatchable() && w.credits(&controller) > 0 && backlog_empty {
            self.send_item(&owner, controller, key, shard);
            true
        } else {
            w.backlog
                .entry(controller)
                .or_default()
                .push_back((key, shard));
            false
        }
    }

    pub(super) fn drain_backlog(&mut self, worker: &str, controller: &str) {
        loop {
            let Some(w) = self.membership.get_mut(worker) else {
                return;
            };
            if !w.is_dispatchable() || w.credits(controller) == 0 {
                return;
            }
            let Some((key, shard)) = w.backlog.get_mut(controller).and_then(|b| b.pop_front())
            else {
                return;
            };
            // Routed before a Hello reported the key held from an earlier term: it waits for that.
            if let Some((controller, key)) = self.items.unless_deferred(controller.to_owned(), key)
            {
                self.send_item(worker, controller, key, shard);
            }
        }
    }

    pub(super) fn send_item(&mut self, worker: &str, controller: String, key: String, shard: u32) {
        let item_id = self.items.next_id();
        let Some(state) = self.running.get(&controller) else {
            return;
        };
        state.counters.assigned.inc();
        let attempt = state.queue.num_requeues(&key);
        let reason = state.queue.reason(&key).map(proto::Reason::from);
        // Only a key a sampled event queued carries traces; otherwise nothing is built or allocated.
        let traces = state.queue.traces(&key);
        let (traceparent, trace_links, dispatch_trace) = if traces.is_empty() {
            (String::new(), Vec::new(), None)
        } else {
            trace_spans::dispatch(
                traces,
                &trace_spans::Dispatched {
                    controller: &controller,
                    key: &key,
                    shard,
                    term: self.term,
                    worker,
                    attempt,
                    reason: state.queue.reason(&key),
                },
            )
        };
        if let Some(first) = traces.first()
            && let Some((queued, taken, wait)) = state.queue.queued(&key)
        {
            trace_spans::queue_wait(&first, queued, taken, wait);
        }
        let (object, prefetched) = self.running.payload(&state.spec, &key, &self.ctx.informers);
        let mut assign = proto::Assign {
            item_id,
            term: self.term,
            controller: controller.clone(),
            key: key.clone(),
            shard,
            attempt,
            object,
            prefetched,
            traceparent,
            reason,
            trace_links,
            prefetch_from_cache: Vec::new(),
        };
        let fit = assign_budget::fit(
            &mut assign,
            &state.spec.primary,
            &state.spec.prefetch_owned,
            self.ctx.config.dispatch_batch_bytes,
        );
        if fit != Fit::Whole
            && let Verdict::Log { suppressed } = self.ctx.metrics.refused(worker, fit.reason())
        {
            warn!(
                controller,
                key,
                bytes = assign.encoded_len(),
                budget = self.ctx.config.dispatch_batch_bytes,
                lightened = ?fit,
                suppressed,
                "an item passes the dispatch budget (--dispatch-batch-bytes)"
            );
        }
        if fit == Fit::TooLarge {
            // Never sent, never dropped: the key runs again after the rate limiter's backoff, when the
            // objects may have shrunk.
            if let Some(state) = self.running.get_mut(&controller) {
                state.queue.done(&key);
                state.queue.add_rate_limited_because(key, Reason::Retry);
            }
            return;
        }
        let Some(w) = self.membership.get_mut(worker) else {
            return;
        };
        self.items.assign(
            (self.term, item_id),
            w,
            self.handover.table_mut(),
            controller,
            key,
            shard,
            dispatch_trace,
        );
        self.outbox
            .entry(worker.to_owned())
            .or_default()
            .push(assign);
    }

    pub(super) fn flush(&mut self) {
        let budget = self.ctx.config.dispatch_batch_bytes;
        for (worker, items) in self.outbox.drain() {
            if let Some(w) = self.membership.get(&worker) {
                // A failed send means the stream just broke: the items stay held by the worker until it
                // reports them in its next Hello or its lease expires.
                for items in assign_budget::batches(items, budget) {
                    w.send(proto::coordinator_message::Msg::Assign(
                        proto::AssignBatch { items },
                    ));
                }
            }
        }
    }

    /// Keys routed but not sent: in workers' backlogs, or parked on shards without a dispatchable owner.
    fn backlog_len(&self) -> usize {
        self.membership
            .iter()
            .map(WorkerState::backlog_len)
            .sum::<usize>()
            + self.handover.table().parked_len()
    }

    /// Publishes whether dispatching is stalled (see `StallClock`), logging when that changes.
    fn check_progress(&mut self, now: Instant) {
        let queued = self.running.queued();
        let waiting = queued + self.backlog_len();
        let stalled = self.stall.stalled(waiting, now);
        if stalled != self.ctx.progress.is_stalled() {
            if stalled {
                error!(
                    waiting,
                    live_workers = self.membership.dispatchable().count(),
                    claims_waiting = self.handover.claims_waiting(),
                    bound = ?self.ctx.config.dispatch_stall_timeout,
                    "keys wait and no item has finished within the bound; not ready"
                );
            } else {
                info!("dispatching makes progress again");
            }
            self.ctx.progress.set_stalled(stalled);
        }
    }

    pub(super) fn periodic(&mut self) {
        let now = Instant::now();
        self.running.promote_due(now);
        // An owner-graph controller may open on time alone (a kind that never syncs, see SYNC_GRACE).
        self.running.check_graph_synced(&self.ctx.informers, now);
        self.running.resync_due(&self.ctx.informers, now);
        self.publish_worker_gauges();
        self.check_progress(now);
        if !self.intents.is_empty() {
            self.intents.expire(now);
            self.count_intent_drops();
        }
        // A hold expires only once the API has answered after its deadline: released while the API does
        // not answer, its key would run on a cache that cannot have observed its writes (the overshoot
        // the hold exists to prevent).
        let expired = self
            .items
            .expire_holds(self.ctx.api_link.expiry_horizon(now));
        if !expired.is_empty() {
            self.ctx.metrics.ryw_expired.inc_by(expired.len() as u64);
            warn!(
                keys = expired.len(),
                "writes not observed within the bound; dispatching anyway"
            );
            self.release_holds(expired);
        }
        self.retire_controllers(now);
        if now >= self.next_unserved_retry {
            self.next_unserved_retry = now + UNSERVED_RETRY;
            self.ctx.informers.retry_unserved();
        }
        self.fence_silent_workers(now);
        self.free_stopped_workers(now);
        if self.needs_rebalance && (self.membership.all_said_hello() || now >= self.settle_until) {
            self.rebalance();
        }
    }
}
