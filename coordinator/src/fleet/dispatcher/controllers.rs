//! The controllers a term runs: loading specs at the start of a term, registering controllers and their
//! informers, the sync gate, informer events into keys (and the write intents that link a traced
//! write's echo to its request), the owner graph's discovery, and retiring controllers no live worker
//! runs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_common::{Reason, ResourceKind, tracing_enabled};
use flotilla_proto as proto;
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::super::mapping::{Routes, distinct};
use super::super::messages::{ControllerSpec, Primary, WriteIntent};
use super::super::owner_graph::OwnerGraph;
use super::super::shards::ShardState;
use super::super::workers::WorkerState;
use super::super::write_intents::WriteIntents;
use super::etcd_work::{EtcdWork, TermStart};
use super::items::HoldEnded;
use super::trace_spans::EventSpan;
use super::{ControllerCounters, ControllerState, Dispatcher, MAX_RETIRED_SHOWN};
use crate::informer::{InformerEvent, Informers, deletable_resources};
use crate::queue::WorkQueue;

/// The controllers a term runs. Invariant: `routes` and `graph` route exactly the controllers in
/// `states` (registering adds a controller to all three, retiring removes it from all three), so an
/// informer event queues keys only of controllers that have a queue.
#[derive(Default)]
pub(super) struct Controllers {
    /// By controller name: its spec, queue, sync gate and counters.
    pub(super) states: HashMap<String, ControllerState>,
    /// Which keys of which controllers an object's event queues (kinds, owners, indexes).
    pub(super) routes: Routes,
    /// The ownerReference graph routing owner-graph controllers, and the discoveries that feed it.
    pub(super) graph: OwnerGraph,
    /// Traced writes waiting for their echo (tracing only; empty otherwise).
    pub(super) intents: WriteIntents,
}

impl Dispatcher {
    /// Every kind a controller of the term declared, plus the owner graph's discovered kinds while an
    /// owner-graph controller runs: what the informers must keep and the cache may serve.
    pub(super) fn declared_kinds(&self) -> HashSet<ResourceKind> {
        let mut kinds: HashSet<ResourceKind> = self
            .running
            .states
            .values()
            .flat_map(|c| c.spec.kinds())
            .collect();
        if self.running.graph.has_controllers() {
            kinds.extend(self.running.graph.kinds().cloned());
        }
        kinds
    }

    /// Takes what etcd holds at the start of the term: registered workers (not yet said Hello), shard
    /// owners, and the stored controller specs.
    pub(super) fn start(&mut self, start: TermStart) {
        let now = Instant::now();
        self.membership.registry_revision = start.revision;
        let mut leaseless = 0;
        for (id, lease, capacity) in start.workers {
            if lease == 0 {
                // No worker registers without its session's lease: debris, never a worker.
                leaseless += 1;
                self.ctx.metrics.bad("leaseless_worker_key");
                continue;
            }
            let worker = WorkerState::registered(&id, lease, capacity, now);
            self.membership.workers.insert(id, worker);
        }
        if leaseless > 0 {
            // One line for them all, however many there are.
            error!(
                keys = leaseless,
                "worker registrations in etcd carry no lease (a restore or a hand edit?); ignored"
            );
        }
        for (s, owner, lease, mod_revision) in start.shards {
            if lease == 0 && s < self.handover.shards.count() {
                self.note_leaseless(s, mod_revision);
                continue;
            }
            // A key on another lease than its owner's registration — an earlier incarnation's, or the
            // lease a fenced worker's shards are kept on — is not the owner's to dispatch to: the shard
            // counts as unowned, and a claim of it waits until that key is gone.
            let current =
                self.membership.workers.get(&owner).and_then(|w| w.lease_id) == Some(lease);
            if s < self.handover.shards.count() && current {
                self.handover.shards.set_state(s, ShardState::Owned(owner));
            }
        }
        if !self.handover.leaseless.is_empty() {
            // One line for them all: a restore may have left every shard's key so.
            error!(
                shards = self.handover.leaseless.len(),
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

    pub(super) fn register_controller(&mut self, spec: ControllerSpec) {
        for kind in spec.kinds() {
            self.ctx.informers.ensure(&kind);
        }
        self.ctx
            .informers
            .declare_indexes(&spec.name, &spec.indexes);
        let limiter = match spec.rate_limiter.build::<String>() {
            Ok(limiter) => limiter,
            Err(err) => {
                warn!(controller = %spec.name, error = %err, "invalid rate limiter; using the defaults");
                crate::queue::default_controller_rate_limiter()
            }
        };
        let queue = WorkQueue::new(
            &spec.name,
            Box::new(limiter),
            self.ctx.queue_metrics.for_queue(&spec.name),
        );
        self.running.routes.add(&spec);
        if spec.primary == Primary::OwnerGraph && self.running.graph.add_controller(&spec.name) {
            let stop = self.term_tasks.child_token();
            self.discovery_stop = Some(stop.clone());
            tokio::spawn(discover(
                self.ctx.informers.client(),
                self.discovered_tx.clone(),
                stop,
            ));
        }
        let now = Instant::now();
        // Specs are checked (resync at most a day), but time arithmetic never trusts a bound elsewhere.
        let next_resync = spec.resync.and_then(|r| now.checked_add(r));
        self.access_dirty = true;
        let name = spec.name.clone();
        let counters = ControllerCounters::new(&self.ctx.metrics, &name);
        self.running.states.insert(
            name.clone(),
            ControllerState {
                spec,
                queue,
                synced: false,
                next_resync,
                last_live: now,
                counters,
            },
        );
        self.check_synced(&name);
    }

    /// Opens the sync gate of `controller` once every informer it needs has synced, enqueueing every
    /// primary object (the initial list, or the re-enqueue of a takeover).
    pub(super) fn check_synced(&mut self, controller: &str) {
        let Some(state) = self.running.states.get_mut(controller) else {
            return;
        };
        let graph_synced = state.spec.primary != Primary::OwnerGraph
            || self
                .running
                .graph
                .synced(&self.ctx.informers, Instant::now());
        if state.synced
            || !graph_synced
            || !state
                .spec
                .kinds()
                .iter()
                .all(|k| self.ctx.informers.is_synced(k))
        {
            return;
        }
        state.synced = true;
        for key in primary_keys(
            &state.spec.primary,
            &self.running.graph,
            &self.ctx.informers,
        ) {
            state.queue.add_because(key, || Reason::InitialList);
        }
        info!(controller, "caches synced; dispatching");
    }

    pub(super) fn on_informer_event(&mut self, ev: InformerEvent) {
        let mut keys = Vec::new();
        self.running.routes.observe(&ev);
        self.running
            .graph
            .keys_for(&ev, &self.ctx.informers, &mut keys);
        // The object whose event this is: the reason of every key it queues.
        let (source, event) = match &ev {
            InformerEvent::Applied { old, new } => (
                Some(Arc::clone(new)),
                if old.is_some() { "modified" } else { "added" },
            ),
            InformerEvent::Deleted { old, .. } => (Some(Arc::clone(old)), "deleted"),
            InformerEvent::Synced { .. } => (None, "synced"),
        };
        match ev {
            InformerEvent::Applied { old, new } => {
                let released =
                    self.items
                        .observe(&new.kind, &new.key(), Some(new.resource_version));
                self.release_holds(released);
                self.running
                    .routes
                    .keys_for(&new, &self.ctx.informers, &mut keys);
                if let Some(old) = old {
                    self.running
                        .routes
                        .keys_for(&old, &self.ctx.informers, &mut keys);
                }
            }
            InformerEvent::Deleted { old, .. } => {
                let released = self.items.observe(&old.kind, &old.key(), None);
                self.release_holds(released);
                self.running
                    .routes
                    .keys_for(&old, &self.ctx.informers, &mut keys);
            }
            InformerEvent::Synced { kind } => {
                let names: Vec<String> = self.running.states.keys().cloned().collect();
                for name in names {
                    self.check_synced(&name);
                }
                // A kind discovered after an owner-graph controller started: its objects join now.
                if self.running.graph.covers(&kind) {
                    let graph_keys = self.running.graph.initial_keys(&kind, &self.ctx.informers);
                    for state in self.running.states.values_mut() {
                        if state.synced && self.running.graph.routes(&state.spec.name) {
                            for key in &graph_keys {
                                state.queue.add_because(key.clone(), || Reason::InitialList);
                            }
                        }
                    }
                }
            }
        }
        let Some(source) = source else { return };
        // The echo of a traced write of the fleet's own: its trace links to the request that made it.
        let intent = if self.running.intents.is_empty() {
            None
        } else {
            let intent = self
                .running
                .intents
                .take(&source.kind, &source.key(), Instant::now());
            self.count_intent_drops();
            intent
        };
        // One add per (controller, key), naming every rule that reached it (see `distinct`).
        let keys = distinct(keys);
        // The trace of this event starts here, sampled once (or kept whatever the sampler says when
        // it echoes a traced write: sampling follows its cause), if it queues a key of a synced
        // controller (an initial list arriving is not traced).
        let traced = tracing_enabled()
            && keys
                .iter()
                .any(|(c, _, _)| self.running.states.get(c).is_some_and(|s| s.synced));
        let event_span = if traced {
            EventSpan::start(&source, event, intent)
        } else {
            None
        };
        for (controller, key, via) in keys {
            if let Some(state) = self.running.states.get_mut(&controller) {
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
                    self.running
                        .intents
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
        let drops = self.running.intents.take_drops();
        self.ctx
            .metrics
            .intents_dropped("table_full", drops.table_full);
        self.ctx.metrics.intents_dropped("expired", drops.expired);
    }

    /// A discovery finished: informers start for the kinds it found first, and owner-graph controllers
    /// may now be synced.
    pub(super) fn on_discovered(&mut self, kinds: Vec<ResourceKind>) {
        let added = self.running.graph.discovered(kinds);
        for kind in &added {
            // The graph reads metadata only; a controller that needs whole objects of the kind
            // upgrades its informer when it registers.
            self.ctx.informers.ensure_metadata(kind);
        }
        if !added.is_empty() {
            info!(kinds = added.len(), "owner graph covers new kinds");
        }
        let names: Vec<String> = self.running.states.keys().cloned().collect();
        for name in names {
            self.check_synced(&name);
        }
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
                    if let Some(state) = self.running.states.get_mut(&controller) {
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
        let running: HashSet<&str> = self
            .membership
            .workers
            .values()
            .filter(|w| w.lease_id.is_some() && w.handshaken)
            .flat_map(|w| w.concurrency.keys().map(String::as_str))
            .collect();
        let retire_after = self.ctx.config.controller_retire_after;
        let mut due = Vec::new();
        for (name, state) in &mut self.running.states {
            if running.contains(name.as_str()) {
                state.last_live = now;
            } else if now.saturating_duration_since(state.last_live) >= retire_after {
                due.push(name.clone());
            }
        }
        for name in due {
            self.retire(&name, now);
        }
    }

    /// Drops `name`'s queue and routes, stops the informers no other controller needs, and deletes its
    /// spec from etcd (beside the loop, fenced by the term). Its keys still out or held become foreign
    /// (`Items::retire`): they finish without effect, and a later registration of it waits for them.
    pub(super) fn retire(&mut self, name: &str, now: Instant) {
        let Some(state) = self.running.states.remove(name) else {
            return;
        };
        warn!(controller = name, after = ?self.ctx.config.controller_retire_after, keys = state.queue.len(),
            "retiring a controller no live worker runs: dropping its queue and spec");
        self.running.routes.remove(name);
        self.items.retire(name);
        self.ctx.informers.declare_indexes(name, &[]);
        for w in self.membership.workers.values_mut() {
            w.backlog.remove(name);
        }
        let mut stopping: Vec<ResourceKind> = state.spec.kinds();
        if state.spec.primary == Primary::OwnerGraph
            && let Some(covered) = self.running.graph.remove_controller(name)
        {
            if let Some(stop) = self.discovery_stop.take() {
                stop.cancel();
            }
            stopping.extend(covered);
        }
        let needed = self.declared_kinds();
        for kind in stopping {
            if !needed.contains(&kind) {
                self.ctx.informers.remove(&kind);
            }
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

/// Every key of a controller's primary: all cached objects of its kind, or, over the owner graph, the
/// objects of every covered kind that need action.
pub(super) fn primary_keys(
    primary: &Primary,
    graph: &OwnerGraph,
    informers: &Informers,
) -> Vec<String> {
    match primary {
        Primary::Kind(kind) => informers
            .store(kind)
            .map(|store| store.list().iter().map(|o| o.key()).collect())
            .unwrap_or_default(),
        Primary::OwnerGraph => graph
            .kinds()
            .flat_map(|kind| graph.initial_keys(kind, informers))
            .collect(),
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
