//! The controllers a term runs: their specs, queues and sync gates, the routes from an object's event to
//! their keys, and the owner graph. [`Controllers`] owns them; the dispatcher's `events.rs` carries out
//! what a registration, an informer event or a retirement means for informers, items and etcd.

use std::collections::{HashMap, HashSet};

use flotilla_common::{Reason, ResourceKind};
use flotilla_proto as proto;
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;
use tracing::{info, warn};

use super::super::mapping::{RoutedKey, Routes, distinct};
use super::super::messages::{ControllerSpec, Primary};
use super::super::owner_graph::OwnerGraph;
use crate::informer::{InformerEvent, Informers};
use crate::metrics::{ControllerLabel, FleetMetrics, OutcomeLabel};
use crate::queue::{QueueMetricsFamilies, WorkQueue};

/// One controller of the term.
pub(super) struct ControllerState {
    pub(super) spec: ControllerSpec,
    /// Keys of the controller, each with why it needs a run.
    pub(super) queue: WorkQueue<String, Reason>,
    pub(super) synced: bool,
    next_resync: Option<Instant>,
    /// When a live worker (lease alive, said Hello to this leader) last ran it, or when this term
    /// registered it: retirement counts from here.
    last_live: Instant,
    /// Metric handles looked up once: the per-item path must not hash label sets.
    pub(super) counters: ControllerCounters,
}

/// A controller's per-item counters.
pub(super) struct ControllerCounters {
    pub(super) assigned: Counter,
    pub(super) success: Counter,
    pub(super) requeue_after: Counter,
    pub(super) error: Counter,
}

impl ControllerCounters {
    fn new(metrics: &FleetMetrics, controller: &str) -> Self {
        let done = |outcome: &str| {
            metrics
                .done
                .get_or_create(&OutcomeLabel {
                    controller: controller.to_owned(),
                    outcome: outcome.to_owned(),
                })
                .clone()
        };
        Self {
            assigned: metrics
                .assigned
                .get_or_create(&ControllerLabel {
                    controller: controller.to_owned(),
                })
                .clone(),
            success: done("success"),
            requeue_after: done("requeue_after"),
            error: done("error"),
        }
    }
}

/// The controllers a term runs. Invariant: `routes` and `graph` route exactly the controllers in
/// `states` (registering adds a controller to all three, retiring removes it from all three), so an
/// informer event queues keys only of controllers that have a queue.
#[derive(Default)]
pub(super) struct Controllers {
    /// By controller name: its spec, queue, sync gate and counters.
    states: HashMap<String, ControllerState>,
    /// Which keys of which controllers an object's event queues (kinds, owners, indexes).
    routes: Routes,
    /// The ownerReference graph routing owner-graph controllers, and the discoveries that feed it.
    graph: OwnerGraph,
}

/// What retiring a controller left for the caller.
pub(super) struct Retired {
    /// Keys its queue held.
    pub(super) queued: usize,
    /// Kinds no remaining controller declares: their informers can stop.
    pub(super) unneeded: Vec<ResourceKind>,
    /// It was the last owner-graph controller: the graph's discovery can stop.
    pub(super) last_of_graph: bool,
}

impl Controllers {
    /// Controller `name`.
    pub(super) fn get(&self, name: &str) -> Option<&ControllerState> {
        self.states.get(name)
    }

    /// Controller `name`, to change its queue.
    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut ControllerState> {
        self.states.get_mut(name)
    }

    /// Whether controller `name` runs in this term.
    pub(super) fn contains(&self, name: &str) -> bool {
        self.states.contains_key(name)
    }

    /// Every controller, by name.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &ControllerState)> {
        self.states.iter()
    }

    /// The names of the controllers.
    pub(super) fn names(&self) -> Vec<String> {
        self.states.keys().cloned().collect()
    }

    /// Number of controllers.
    pub(super) fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether `spec`'s controller runs with this very spec (`Some(true)`), another (`Some(false)`), or
    /// not at all (`None`).
    pub(super) fn spec_matches(&self, spec: &ControllerSpec) -> Option<bool> {
        self.states.get(&spec.name).map(|s| s.spec == *spec)
    }

    /// Every kind a controller declared, plus the owner graph's discovered kinds while an owner-graph
    /// controller runs: what the informers must keep and the cache may serve.
    pub(super) fn declared_kinds(&self) -> HashSet<ResourceKind> {
        let mut kinds: HashSet<ResourceKind> =
            self.states.values().flat_map(|c| c.spec.kinds()).collect();
        if self.graph.has_controllers() {
            kinds.extend(self.graph.kinds().cloned());
        }
        kinds
    }

    /// The kinds each of `controllers` declares, and whether one of them runs over the owner graph
    /// (whose worker may read every informed kind).
    pub(super) fn reads_of<'a>(
        &self,
        controllers: impl Iterator<Item = &'a String>,
    ) -> (HashSet<ResourceKind>, bool) {
        let mut kinds = HashSet::new();
        let mut owner_graph = false;
        for name in controllers {
            if let Some(state) = self.states.get(name) {
                kinds.extend(state.spec.kinds());
                owner_graph |= state.spec.primary == Primary::OwnerGraph;
            }
        }
        (kinds, owner_graph)
    }

    /// Registers `spec`'s controller with a new queue, its informers ensured and its indexes declared,
    /// and opens its sync gate if its kinds are listed already. Returns whether it is the first
    /// owner-graph controller (the graph's discovery must start).
    pub(super) fn register(
        &mut self,
        spec: ControllerSpec,
        informers: &Informers,
        metrics: &FleetMetrics,
        queue_metrics: &QueueMetricsFamilies,
        now: Instant,
    ) -> bool {
        for kind in spec.kinds() {
            informers.ensure(&kind);
        }
        informers.declare_indexes(&spec.name, &spec.indexes);
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
            queue_metrics.for_queue(&spec.name),
        );
        self.routes.add(&spec);
        let first_of_graph =
            spec.primary == Primary::OwnerGraph && self.graph.add_controller(&spec.name);
        // Specs are checked (resync at most a day), but time arithmetic never trusts a bound elsewhere.
        let next_resync = spec.resync.and_then(|r| now.checked_add(r));
        let name = spec.name.clone();
        let counters = ControllerCounters::new(metrics, &name);
        self.states.insert(
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
        self.check_synced(&name, informers, now);
        first_of_graph
    }

    /// Opens the sync gate of `controller` once every informer it needs has synced, enqueueing every
    /// primary object (the initial list, or the re-enqueue of a takeover).
    fn check_synced(&mut self, controller: &str, informers: &Informers, now: Instant) {
        let Some(state) = self.states.get_mut(controller) else {
            return;
        };
        let graph_synced =
            state.spec.primary != Primary::OwnerGraph || self.graph.synced(informers, now);
        if state.synced
            || !graph_synced
            || !state.spec.kinds().iter().all(|k| informers.is_synced(k))
        {
            return;
        }
        state.synced = true;
        for key in primary_keys(&state.spec.primary, &self.graph, informers) {
            state.queue.add_because(key, || Reason::InitialList);
        }
        info!(controller, "caches synced; dispatching");
    }

    /// Opens every sync gate that can open now.
    pub(super) fn check_all_synced(&mut self, informers: &Informers, now: Instant) {
        for name in self.names() {
            self.check_synced(&name, informers, now);
        }
    }

    /// Opens the owner-graph controllers that can open on time alone (a kind that never syncs, see
    /// the owner graph's sync grace).
    pub(super) fn check_graph_synced(&mut self, informers: &Informers, now: Instant) {
        let waiting: Vec<String> = self
            .states
            .values()
            .filter(|c| !c.synced && c.spec.primary == Primary::OwnerGraph)
            .map(|c| c.spec.name.clone())
            .collect();
        for name in waiting {
            self.check_synced(&name, informers, now);
        }
    }

    /// The keys an informer event queues, one per (controller, key) with every rule that reached it
    /// (see [`distinct`]). A `Synced` event queues nothing itself: it opens the sync gates it can, and
    /// a kind discovered after an owner-graph controller started has its objects queued now.
    pub(super) fn keys_for(
        &mut self,
        ev: &InformerEvent,
        informers: &Informers,
        now: Instant,
    ) -> Vec<RoutedKey> {
        let mut keys = Vec::new();
        self.routes.observe(ev);
        self.graph.keys_for(ev, informers, &mut keys);
        match ev {
            InformerEvent::Applied { old, new } => {
                self.routes.keys_for(new, informers, &mut keys);
                if let Some(old) = old {
                    self.routes.keys_for(old, informers, &mut keys);
                }
            }
            InformerEvent::Deleted { old, .. } => {
                self.routes.keys_for(old, informers, &mut keys);
            }
            InformerEvent::Synced { kind } => {
                self.check_all_synced(informers, now);
                if self.graph.covers(kind) {
                    let graph_keys = self.graph.initial_keys(kind, informers);
                    for state in self.states.values_mut() {
                        if state.synced && self.graph.routes(&state.spec.name) {
                            for key in &graph_keys {
                                state.queue.add_because(key.clone(), || Reason::InitialList);
                            }
                        }
                    }
                }
            }
        }
        distinct(keys)
    }

    /// The owner graph learned of `kinds`: the kinds new to it, whose informers must start.
    pub(super) fn discovered(&mut self, kinds: Vec<ResourceKind>) -> Vec<ResourceKind> {
        self.graph.discovered(kinds)
    }

    /// The primary object of `key` for `spec`'s controller and the prefetched related objects,
    /// straight from the cache's serialization (empty when the object is not cached).
    pub(super) fn payload(
        &self,
        spec: &ControllerSpec,
        key: &str,
        informers: &Informers,
    ) -> (bytes::Bytes, Vec<proto::PrefetchedObject>) {
        let primary = match &spec.primary {
            Primary::Kind(kind) => kind,
            Primary::OwnerGraph => {
                let Some((object, dependents)) = self.graph.payload(key, informers) else {
                    return (bytes::Bytes::new(), Vec::new());
                };
                let dependents = dependents
                    .iter()
                    .map(|d| proto::PrefetchedObject {
                        kind: Some((&*d.kind).into()),
                        object: d.json.clone(),
                    })
                    .collect();
                return (object.json.clone(), dependents);
            }
        };
        let Some(object) = informers.store(primary).and_then(|s| s.get(key)) else {
            return (bytes::Bytes::new(), Vec::new());
        };
        let mut prefetched = Vec::new();
        for kind in &spec.prefetch_owned {
            let Some(store) = informers.store(kind) else {
                continue;
            };
            for owned in store.by_owner_uid(&object.uid) {
                prefetched.push(proto::PrefetchedObject {
                    kind: Some(kind.into()),
                    object: owned.json.clone(),
                });
            }
        }
        (object.json.clone(), prefetched)
    }

    /// The time the first delayed key of any queue is due.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.states
            .values()
            .filter_map(|c| c.queue.next_deadline())
            .min()
    }

    /// Moves every delayed key that is due into its queue.
    pub(super) fn promote_due(&mut self, now: Instant) {
        for state in self.states.values_mut() {
            state.queue.promote_due(now);
        }
    }

    /// Keys queued in the controllers whose gates are open.
    pub(super) fn queued(&self) -> usize {
        self.states
            .values()
            .filter(|c| c.synced)
            .map(|c| c.queue.len())
            .sum()
    }

    /// The periodic work of the queues: their unfinished-work gauges, and every primary object of a
    /// controller whose resync period is due queued again.
    pub(super) fn resync_due(&mut self, informers: &Informers, now: Instant) {
        for state in self.states.values_mut() {
            state.queue.update_unfinished_work(now);
            if let (Some(at), Some(every)) = (state.next_resync, state.spec.resync)
                && at <= now
                && state.synced
            {
                state.next_resync = Some(now + every);
                for key in primary_keys(&state.spec.primary, &self.graph, informers) {
                    state.queue.add_because(key, || Reason::Resync);
                }
            }
        }
    }

    /// The controllers no live worker has run for `retire_after`; the others, in `live`, count as run
    /// at `now`.
    pub(super) fn due_for_retirement(
        &mut self,
        live: &HashSet<&str>,
        now: Instant,
        retire_after: std::time::Duration,
    ) -> Vec<String> {
        let mut due = Vec::new();
        for (name, state) in &mut self.states {
            if live.contains(name.as_str()) {
                state.last_live = now;
            } else if now.saturating_duration_since(state.last_live) >= retire_after {
                due.push(name.clone());
            }
        }
        due
    }

    /// Drops `name`'s queue and routes and its indexes; `None` if it does not run.
    pub(super) fn retire(&mut self, name: &str, informers: &Informers) -> Option<Retired> {
        let state = self.states.remove(name)?;
        self.routes.remove(name);
        informers.declare_indexes(name, &[]);
        let mut stopping: Vec<ResourceKind> = state.spec.kinds();
        let mut last_of_graph = false;
        if state.spec.primary == Primary::OwnerGraph
            && let Some(covered) = self.graph.remove_controller(name)
        {
            last_of_graph = true;
            stopping.extend(covered);
        }
        let needed = self.declared_kinds();
        stopping.retain(|kind| !needed.contains(kind));
        Some(Retired {
            queued: state.queue.len(),
            unneeded: stopping,
            last_of_graph,
        })
    }
}

/// Every key of a controller's primary: all cached objects of its kind, or, over the owner graph, the
/// objects of every covered kind that need action.
fn primary_keys(primary: &Primary, graph: &OwnerGraph, informers: &Informers) -> Vec<String> {
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
