//! What the term's controllers meet: the term's start (the workers, shard owners and controller specs
//! etcd holds), a controller registering or retiring, an informer event turned into keys (and the write
//! intents that link a traced write's echo to its request), and the owner graph's discoveries.
//! [`Controllers`], [`Membership`], [`Handover`] and [`Items`] each keep their own part; this carries
//! an event through them.
//!
//! [`Controllers`]: super::controllers::Controllers
//! [`Membership`]: super::membership::Membership
//! [`Handover`]: super::handover::Handover
//! [`Items`]: super::items::Items

use std::sync::Arc;
use std::time::Duration;

use flotilla_common::{Reason, ResourceKind, tracing_enabled};
use flotilla_proto as proto;
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::super::messages::{ControllerSpec, WriteIntent};
use super::etcd_work::{EtcdWork, TermStart};
use super::items::HoldEnded;
use super::trace_spans::EventSpan;
use super::{Dispatcher, MAX_RETIRED_SHOWN};
use crate::informer::{InformerEvent, deletable_resources};

impl Dispatcher {
    /// Takes what etcd holds at the start of the term: registered workers (not yet said Hello), shard
    /// owners, and the stored controller specs.
    pub(super) fn start(&mut self, start: TermStart) {
        let leaseless = self
            .membership
            .load(start.workers, start.revision, Instant::now());
        if leaseless > 0 {
            self.ctx.metrics.bad_by("leaseless_worker_key", leaseless);
            // One line for them all, however many there are.
            error!(
                keys = leaseless,
                "worker registrations in etcd carry no lease (a restore or a hand edit?); ignored"
            );
        }
        let leaseless = self.handover.load(start.shards, &self.membership);
        if leaseless > 0 {
            self.ctx.metrics.bad_by("leaseless_shard_key", leaseless);
            // One line for them all: a restore may have left every shard's key so.
            error!(
                shards = leaseless,
                "shard keys in etcd carry no lease (a restore or a hand edit?); claiming them over"
            );
        }
        for (key, encoded) in start.specs {
            match proto::ControllerSpec::decode(encoded.as_slice())
                .map_err(|e| e.to_string())
                .and_then(|p| ControllerSpec::try_from(p).map_err(|e| e.to_string()))
            {
                Ok(spec) => self.register_controller(spec),
                // The same checks as a Hello's: a spec that is invalid now (written by an older version,
                // or by hand) is skipped, never a crash of every leader that loads it. A worker that
                // still runs the controller registers a valid spec again.
                Err(err) => {
                    self.ctx.metrics.bad("invalid_stored_spec");
                    error!(%key, error = %err, "skipping an invalid controller spec in etcd");
                }
            }
        }
    }

    /// Registers `spec`'s controller (see [`Controllers::register`]), starting the owner graph's
    /// discovery with the first owner-graph controller.
    ///
    /// [`Controllers::register`]: super::controllers::Controllers::register
    pub(super) fn register_controller(&mut self, spec: ControllerSpec) {
        let first_of_graph = self.running.register(
            spec,
            &self.ctx.informers,
            &self.ctx.metrics,
            &self.ctx.queue_metrics,
            Instant::now(),
        );
        if first_of_graph {
            let stop = self.term_tasks.child_token();
            self.discovery_stop = Some(stop.clone());
            tokio::spawn(discover(
                self.ctx.informers.client(),
                self.discovered_tx.clone(),
                stop,
            ));
        }
        self.access_dirty = true;
    }

    /// An informer event (after the cache applied it): the read-your-writes holds it ends are released,
    /// and the keys it routes to are queued, in one trace per event when it is sampled.
    pub(super) fn on_informer_event(&mut self, ev: InformerEvent) {
        let keys = self
            .running
            .keys_for(&ev, &self.ctx.informers, Instant::now());
        // The object whose event this is: the reason of every key it queues.
        let (source, event) = match &ev {
            InformerEvent::Applied { old, new } => {
                let released =
                    self.items
                        .observe(&new.kind, &new.key(), Some(new.resource_version));
                self.release_holds(released);
                (
                    Arc::clone(new),
                    if old.is_some() { "modified" } else { "added" },
                )
            }
            InformerEvent::Deleted { old, .. } => {
                let released = self.items.observe(&old.kind, &old.key(), None);
                self.release_holds(released);
                (Arc::clone(old), "deleted")
            }
            InformerEvent::Synced { .. } => return,
        };
        // The echo of a traced write of the fleet's own: its trace links to the request that made it.
        let intent = if self.intents.is_empty() {
            None
        } else {
            let intent = self
                .intents
                .take(&source.kind, &source.key(), Instant::now());
            self.count_intent_drops();
            intent
        };
        // The trace of this event starts here, sampled once (or kept whatever the sampler says when
        // it echoes a traced write: sampling follows its cause), if it queues a key of a synced
        // controller (an initial list arriving is not traced).
        let traced = tracing_enabled()
            && keys
                .iter()
                .any(|(c, _, _)| self.running.get(c).is_some_and(|s| s.synced));
        let event_span = if traced {
            EventSpan::start(&source, event, intent)
        } else {
            None
        };
        for (controller, key, via) in keys {
            if let Some(state) = self.running.get_mut(&controller) {
                // Before its caches synced, a controller's events are its initial list arriving.
                let synced = state.synced;
                let reason = || {
                    if synced {
                        Reason::ObjectChanged {
                            kind: source.kind.to_string(),
                            key: source.key(),
                        }
                    } else {
                        Reason::InitialList
                    }
                };
                match event_span.as_ref().filter(|_| synced) {
                    None => {
                        state.queue.add_because(key, reason);
                    }
                    Some(event_span) => {
                        let (span, trace) = event_span.enqueue(&controller, &key, via);
                        let added = state.queue.add_traced(key, reason, trace);
                        span.record("coalesced", !added);
                    }
                }
            }
        }
    }

    /// A worker's traced reconciles are about to write `intents`: each object's next watch event links
    /// to its request. An object of a resource no informer watches never has a watch event here: its
    /// intent is dropped (counted).
    pub(super) fn on_intents(&mut self, intents: Vec<WriteIntent>) {
        if !tracing_enabled() {
            // This leader exports nothing: nothing to link.
            return;
        }
        let kinds = self.ctx.informers.kinds();
        let now = Instant::now();
        let mut unknown = 0;
        for intent in intents {
            // The informer's kind of the resource, of the request's version if it watches that one.
            let kind = kinds
                .iter()
                .map(|status| &status.kind)
                .filter(|k| {
                    k.group == intent.group
                        && k.plural == intent.resource
                        && k.namespaced == intent.namespace.is_some()
                })
                .max_by_key(|k| k.version == intent.version);
            match kind {
                Some(kind) => {
                    self.intents
                        .insert(kind, &intent.object_key(), intent.trace, now);
                }
                None => unknown += 1,
            }
        }
        self.ctx
            .metrics
            .intents_dropped("unknown_resource", unknown);
        self.count_intent_drops();
    }

    /// Moves the intent table's drop counts into the metric.
    pub(super) fn count_intent_drops(&mut self) {
        let drops = self.intents.take_drops();
        self.ctx
            .metrics
            .intents_dropped("table_full", drops.table_full);
        self.ctx.metrics.intents_dropped("expired", drops.expired);
    }

    /// A discovery finished: informers start for the kinds it found first, and owner-graph controllers
    /// may now be synced.
    pub(super) fn on_discovered(&mut self, kinds: Vec<ResourceKind>) {
        let added = self.running.discovered(kinds);
        for kind in &added {
            // The graph reads metadata only; a controller that needs whole objects of the kind
            // upgrades its informer when it registers.
            self.ctx.informers.ensure_metadata(kind);
        }
        if !added.is_empty() {
            info!(kinds = added.len(), "owner graph covers new kinds");
        }
        self.running
            .check_all_synced(&self.ctx.informers, Instant::now());
    }

    pub(super) fn release_holds(&mut self, released: Vec<(String, String)>) {
        if released.is_empty() {
            return;
        }
        self.ctx.metrics.ryw_released.inc_by(released.len() as u64);
        for (controller, key) in released {
            // A key held from an earlier term is not processing in this term's queue: it stops being
            // foreign instead, and its deferred run goes out.
            match self.items.hold_ended(controller, key) {
                HoldEnded::Foreign(None) => {}
                HoldEnded::Foreign(Some((controller, key))) => {
                    self.route(controller, key);
                }
                HoldEnded::OfThisTerm((controller, key)) => {
                    if let Some(state) = self.running.get_mut(&controller) {
                        state.queue.done(&key);
                    }
                }
            }
        }
        self.ctx
            .metrics
            .ryw_holds
            .set(i64::try_from(self.items.holds_len()).unwrap_or(i64::MAX));
    }

    /// Retires every controller no live worker has run for `--controller-retire-after`: a controller a
    /// stray or departed worker declared must not keep its informers, queue and spec for good.
    pub(super) fn retire_controllers(&mut self, now: Instant) {
        let live = self.membership.live_controllers();
        let due =
            self.running
                .due_for_retirement(&live, now, self.ctx.config.controller_retire_after);
        for name in due {
            self.retire(&name, now);
        }
    }

    /// Drops `name`'s queue and routes, stops the informers no other controller needs, and deletes its
    /// spec from etcd (beside the loop, fenced by the term). Its keys still out or held become foreign
    /// (`Items::retire`): they finish without effect, and a later registration of it waits for them.
    pub(super) fn retire(&mut self, name: &str, now: Instant) {
        let Some(retired) = self.running.retire(name, &self.ctx.informers) else {
            return;
        };
        warn!(controller = name, after = ?self.ctx.config.controller_retire_after, keys = retired.queued,
            "retiring a controller no live worker runs: dropping its queue and spec");
        self.items.retire(name);
        for w in self.membership.iter_mut() {
            w.backlog.remove(name);
        }
        if retired.last_of_graph
            && let Some(stop) = self.discovery_stop.take()
        {
            stop.cancel();
        }
        for kind in retired.unneeded {
            self.ctx.informers.remove(&kind);
        }
        self.retired.push((name.to_owned(), now));
        if self.retired.len() > MAX_RETIRED_SHOWN {
            self.retired.remove(0);
        }
        self.ctx.metrics.retired.inc();
        self.access_dirty = true;
        self.etcd_work.push(EtcdWork::DeleteSpec {
            name: name.to_owned(),
        });
    }
}

/// How often the owner graph rediscovers the served resources (upstream's garbage collector: 30 s).
pub const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);

/// Discovers the deletable resources now and every [`DISCOVERY_PERIOD`] until `stop`; failures are
/// logged and retried at the next period. A report waits while the loop's channel is full.
pub(super) async fn discover(
    client: kube::Client,
    tx: mpsc::Sender<Vec<ResourceKind>>,
    stop: CancellationToken,
) {
    loop {
        match deletable_resources(&client).await {
            Ok(kinds) => {
                let sent = tokio::select! {
                    () = stop.cancelled() => return,
                    sent = tx.send(kinds) => sent,
                };
                if sent.is_err() {
                    return;
                }
            }
            Err(err) => warn!(error = %err, "resource discovery for the owner graph failed"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(DISCOVERY_PERIOD) => {}
        }
    }
}
