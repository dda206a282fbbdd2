//! The leader's dispatcher: one task per term that owns the fleet workqueues, the shard table, read-your-
//! writes holds and every worker's stream state. Everything that decides who runs which key happens here,
//! on one thread, so the exclusivity argument is local:
//!
//! - a key is out of its queue (`get`) from dispatch until its Done *and* its writes are observed, so the
//!   queue never hands it out twice (client-go's processing set, fleet-wide);
//! - a key goes only to the owner of its shard, and a shard changes owner only when its old owner holds no
//!   item of it, or its lease is gone (handover without overlap);
//! - a worker that stops talking keeps its items until it reports them in a new Hello or its lease expires
//!   (the worker fences itself before that), so a broken stream never frees a key early.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, TxnOp, WatchOptions};
use flotilla_common::Verdict;
use flotilla_common::{Elected, Election, ElectionError, FleetKeys, LeaderInfo, ResourceKind};
use flotilla_proto as proto;
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::access::CacheAccess;
use super::expectations::{Expectations, Expected};
use super::mapping::Routes;
use super::messages::{ControllerSpec, Credit, Done, Hello, Outcome, Primary};
use super::owner_graph::OwnerGraph;
use super::shards::{Parked, ShardState, ShardTable};
use super::workers::{Connection, Outbound, WorkerState};
use crate::config::CoordinatorConfig;
use crate::informer::{InformerEvent, Informers, deletable_resources};
use prometheus_client::metrics::counter::Counter;

use crate::metrics::{ControllerLabel, FleetMetrics, OutcomeLabel, ReasonLabel};
use crate::queue::{QueueMetricsFamilies, WorkQueue};
use crate::shard::{WorkerWeight, assign, shard_of};

/// Requests to the dispatcher, from the gRPC services.
#[derive(Debug)]
pub enum Command {
    /// A worker said Hello on a new stream.
    Connect {
        hello: Hello,
        conn_id: u64,
        tx: Outbound,
        reply: oneshot::Sender<Result<proto::Welcome, tonic::Status>>,
    },
    /// A worker granted credits.
    Credit {
        worker: String,
        conn_id: u64,
        credit: Credit,
    },
    /// A worker finished items.
    Done {
        worker: String,
        conn_id: u64,
        done: Vec<Done>,
    },
    /// A worker's stream ended.
    Disconnected { worker: String, conn_id: u64 },
    /// Admin status.
    Status {
        reply: oneshot::Sender<proto::StatusResponse>,
    },
    /// Adds keys directly (benchmarks and tests drive the queue without objects).
    Enqueue {
        controller: String,
        keys: Vec<String>,
    },
}

/// A handle to the running dispatcher of the current term.
#[derive(Clone, Debug)]
pub struct DispatcherHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl DispatcherHandle {
    /// Sends a command; false once the term has ended.
    pub fn send(&self, cmd: Command) -> bool {
        self.tx.send(cmd).is_ok()
    }
}

/// Why a term ended early.
#[derive(Debug, thiserror::Error)]
pub enum TermError {
    /// Another coordinator leads now.
    #[error("deposed")]
    Deposed(#[source] ElectionError),
    /// etcd failed at a point the term cannot continue from.
    #[error("etcd failed")]
    Etcd(#[source] etcd_client::Error),
}

impl From<ElectionError> for TermError {
    fn from(e: ElectionError) -> Self {
        Self::Deposed(e)
    }
}

/// Everything a term needs from the process.
pub struct TermContext {
    pub config: Arc<CoordinatorConfig>,
    pub etcd: Client,
    pub election: Election,
    pub elected: Elected,
    pub leader: LeaderInfo,
    pub informers: Informers,
    pub metrics: FleetMetrics,
    pub queue_metrics: QueueMetricsFamilies,
    /// Where this term publishes who may read the cache.
    pub access: CacheAccess,
}

/// A worker registration as stored in etcd (`workers/<id>`), written by the worker.
#[derive(Debug, serde::Deserialize)]
struct Registration {
    #[serde(default)]
    capacity: u32,
}

impl Registration {
    /// The advertised capacity in a registration value, at most [`MAX_REGISTERED_CAPACITY`]; an
    /// unreadable one counts as 1 (the worker still gets shards, and its Hello tells the real
    /// concurrency, which is checked against the limits).
    fn capacity_of(value: &[u8]) -> u32 {
        serde_json::from_slice::<Registration>(value)
            .map_or(1, |r| r.capacity.min(MAX_REGISTERED_CAPACITY))
    }
}

/// A registration's capacity counts until the worker's Hello replaces it; anything above this is read
/// as this (a worker's sum over its controllers is bounded the same way by the Hello's checks).
const MAX_REGISTERED_CAPACITY: u32 = 1_000_000;

/// No worker weighs more than this many times the median live worker in shard assignment, whatever it
/// advertises: a worker twice as big gets twice the shards, but one advertisement cannot take the fleet.
const MAX_WEIGHT_RATIO: u32 = 4;

/// Controllers retired in this term that status remembers, newest last.
const MAX_RETIRED_SHOWN: usize = 64;

/// How often declared kinds whose informers stopped as unserved are tried again (a CRD may have been
/// created since).
const UNSERVED_RETRY: Duration = Duration::from_secs(300);

enum RegistryEvent {
    Up {
        id: String,
        lease_id: i64,
        capacity: u32,
    },
    Down {
        id: String,
    },
}

struct ControllerState {
    spec: ControllerSpec,
    queue: WorkQueue<String>,
    synced: bool,
    next_resync: Option<Instant>,
    /// When a live worker (lease alive, said Hello to this leader) last ran it, or when this term
    /// registered it: retirement counts from here.
    last_live: Instant,
    /// Metric handles looked up once: the per-item path must not hash label sets.
    counters: ControllerCounters,
}

struct ControllerCounters {
    assigned: Counter,
    success: Counter,
    requeue_after: Counter,
    error: Counter,
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

#[derive(Debug)]
struct Item {
    controller: String,
    key: String,
    worker: String,
    shard: u32,
    /// Reported held from an earlier term: not in this term's queue as processing.
    foreign: bool,
}

/// How long a new leader waits for the workers it finds registered to say Hello before it rebalances.
const SETTLE: Duration = Duration::from_secs(2);
/// etcd's default limit of operations in one transaction is 128; each claim is one compare and one put.
const TXN_CHUNK: usize = 60;

/// Starts the dispatcher of one term; it runs until `stop` is cancelled or the term ends on its own
/// (deposed, or etcd lost). The returned handle serves the gRPC services.
pub fn spawn(
    ctx: TermContext,
    stop: CancellationToken,
) -> (
    DispatcherHandle,
    tokio::task::JoinHandle<Result<(), TermError>>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let (discovered_tx, discovered) = mpsc::unbounded_channel();
        let mut d = Dispatcher::new(ctx, discovered_tx);
        d.run(rx, discovered, stop).await
    });
    (DispatcherHandle { tx }, task)
}

struct Dispatcher {
    ctx: TermContext,
    term: u64,
    keys: FleetKeys,
    controllers: HashMap<String, ControllerState>,
    routes: Routes,
    /// The ownerReference graph routing owner-graph controllers, and the discoveries that feed it.
    graph: OwnerGraph,
    discovered_tx: mpsc::UnboundedSender<Vec<ResourceKind>>,
    /// Cancelled when the term ends: stops the tasks the term spawned on demand.
    term_tasks: CancellationToken,
    workers: HashMap<String, WorkerState>,
    shards: ShardTable,
    items: HashMap<(u64, u64), Item>,
    next_item: u64,
    /// Keys held by a worker from an earlier term, and keys of this term waiting for them to finish.
    foreign_keys: HashSet<(String, String)>,
    deferred: HashSet<(String, String)>,
    expectations: Expectations,
    outbox: HashMap<String, Vec<proto::Assign>>,
    pending_moves: BTreeSet<u32>,
    needs_rebalance: bool,
    settle_until: Instant,
    /// Whether workers or controllers changed since the cache access view was last published.
    access_dirty: bool,
    /// Controllers retired in this term, with when.
    retired: Vec<(String, Instant)>,
    /// Stops the owner graph's discovery when its last controller retires.
    discovery_stop: Option<CancellationToken>,
    next_unserved_retry: Instant,
}

impl Dispatcher {
    fn new(ctx: TermContext, discovered_tx: mpsc::UnboundedSender<Vec<ResourceKind>>) -> Self {
        let term = ctx.elected.term();
        let keys = FleetKeys::new(&ctx.config.fleet);
        let shards = ShardTable::new(ctx.config.shards);
        Self {
            term,
            keys,
            controllers: HashMap::new(),
            routes: Routes::default(),
            graph: OwnerGraph::default(),
            discovered_tx,
            term_tasks: CancellationToken::new(),
            workers: HashMap::new(),
            shards,
            items: HashMap::new(),
            next_item: 1,
            foreign_keys: HashSet::new(),
            deferred: HashSet::new(),
            expectations: Expectations::default(),
            outbox: HashMap::new(),
            pending_moves: BTreeSet::new(),
            needs_rebalance: true,
            settle_until: Instant::now() + SETTLE,
            access_dirty: true,
            retired: Vec::new(),
            discovery_stop: None,
            next_unserved_retry: Instant::now() + UNSERVED_RETRY,
            ctx,
        }
    }

    async fn run(
        &mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut discovered: mpsc::UnboundedReceiver<Vec<ResourceKind>>,
        stop: CancellationToken,
    ) -> Result<(), TermError> {
        let mut events = self.ctx.informers.subscribe();
        let _tasks_guard = self.term_tasks.clone().drop_guard();
        let revision = self.load().await?;
        let (reg_tx, mut registry) = mpsc::unbounded_channel();
        let watch_stop = stop.child_token();
        let _watch_guard = watch_stop.clone().drop_guard();
        tokio::spawn(watch_registry(
            self.ctx.etcd.clone(),
            self.keys.clone(),
            revision + 1,
            reg_tx,
            watch_stop,
        ));
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        info!(
            term = self.term,
            workers = self.workers.len(),
            controllers = self.controllers.len(),
            "leading"
        );
        loop {
            let deadline = self.next_deadline();
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                cmd = commands.recv() => {
                    let Some(cmd) = cmd else { break };
                    self.handle(cmd).await?;
                    for _ in 0..4096 {
                        match commands.try_recv() {
                            Ok(cmd) => self.handle(cmd).await?,
                            Err(_) => break,
                        }
                    }
                }
                ev = events.recv() => {
                    if let Some(ev) = ev {
                        self.on_informer_event(ev);
                        for _ in 0..4096 {
                            match events.try_recv() {
                                Ok(ev) => self.on_informer_event(ev),
                                Err(_) => break,
                            }
                        }
                    }
                }
                Some(kinds) = discovered.recv() => self.on_discovered(kinds),
                reg = registry.recv() => match reg {
                    Some(reg) => self.on_registry(reg),
                    None => return Err(TermError::Etcd(etcd_client::Error::WatchError("worker registry watch ended".into()))),
                },
                () = sleep_until_opt(deadline) => self.promote_due(),
                _ = tick.tick() => self.periodic().await?,
            }
            self.pump();
            self.flush();
            if !self.pending_moves.is_empty() {
                self.complete_moves().await?;
                self.pump();
                self.flush();
            }
            if self.access_dirty {
                self.publish_access();
            }
        }
        Ok(())
    }

    /// Publishes who may read the cache: workers with a live lease that said Hello to this leader, and
    /// every kind a controller declared (plus the owner graph's discovered kinds while it routes).
    fn publish_access(&mut self) {
        self.access_dirty = false;
        let workers = self
            .workers
            .values()
            .filter(|w| w.handshaken)
            .filter_map(|w| w.lease_id.map(|l| (w.id.clone(), l)))
            .collect();
        let mut kinds: HashSet<ResourceKind> = self
            .controllers
            .values()
            .flat_map(|c| c.spec.kinds())
            .collect();
        if self.graph.has_controllers() {
            kinds.extend(self.graph.kinds().cloned());
        }
        self.ctx.access.publish(workers, kinds);
    }

    // ---- start of term -------------------------------------------------------------------------

    /// Reads workers, shard owners and controller specs; returns the revision to watch from.
    async fn load(&mut self) -> Result<i64, TermError> {
        let mut etcd = self.ctx.etcd.clone();
        let now = Instant::now();
        let workers = etcd
            .get(
                self.keys.workers_prefix(),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .map_err(TermError::Etcd)?;
        let revision = workers.header().map_or(0, |h| h.revision());
        for kv in workers.kvs() {
            let Some(id) = self.keys.parse_worker(kv.key()) else {
                continue;
            };
            let capacity = Registration::capacity_of(kv.value());
            self.workers.insert(
                id.to_owned(),
                WorkerState::registered(id, kv.lease(), capacity, now),
            );
        }
        let shards = etcd
            .get(
                self.keys.shards_prefix(),
                Some(GetOptions::new().with_prefix().with_revision(revision)),
            )
            .await
            .map_err(TermError::Etcd)?;
        for kv in shards.kvs() {
            let (Some(s), Ok(owner)) = (
                self.keys.parse_shard(kv.key()),
                std::str::from_utf8(kv.value()),
            ) else {
                continue;
            };
            if s < self.shards.count() {
                self.shards
                    .set_state(s, ShardState::Owned(owner.to_owned()));
            }
        }
        let specs = etcd
            .get(
                self.keys.controllers_prefix(),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .map_err(TermError::Etcd)?;
        for kv in specs.kvs() {
            match proto::ControllerSpec::decode(kv.value())
                .map_err(|e| e.to_string())
                .and_then(|p| ControllerSpec::try_from(p).map_err(|e| e.to_string()))
            {
                Ok(spec) => self.register_controller(spec),
                // The same checks as a Hello's: a spec that is invalid now (written by an older version,
                // or by hand) is skipped, never a crash of every leader that loads it. A worker that
                // still runs the controller registers a valid spec again.
                Err(err) => {
                    self.ctx.metrics.bad("invalid_stored_spec");
                    error!(key = %String::from_utf8_lossy(kv.key()), error = %err, "skipping an invalid controller spec in etcd");
                }
            }
        }
        Ok(revision)
    }

    fn register_controller(&mut self, spec: ControllerSpec) {
        for kind in spec.kinds() {
            self.ctx.informers.ensure(&kind);
        }
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
        self.routes.add(&spec);
        if spec.primary == Primary::OwnerGraph && self.graph.add_controller(&spec.name) {
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
        self.controllers.insert(
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
    fn check_synced(&mut self, controller: &str) {
        let Some(state) = self.controllers.get_mut(controller) else {
            return;
        };
        let graph_synced = state.spec.primary != Primary::OwnerGraph
            || self.graph.synced(&self.ctx.informers, Instant::now());
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
        for key in primary_keys(&state.spec.primary, &self.graph, &self.ctx.informers) {
            state.queue.add(key);
        }
        info!(controller, "caches synced; dispatching");
    }

    // ---- commands ------------------------------------------------------------------------------

    async fn handle(&mut self, cmd: Command) -> Result<(), TermError> {
        match cmd {
            Command::Connect {
                hello,
                conn_id,
                tx,
                reply,
            } => {
                let result = self.connect(hello, conn_id, tx).await?;
                let _ = reply.send(result);
            }
            Command::Credit {
                worker,
                conn_id,
                credit,
            } => {
                let Some(w) = self
                    .workers
                    .get_mut(&worker)
                    .filter(|w| w.conn.as_ref().is_some_and(|c| c.id == conn_id))
                else {
                    return Ok(());
                };
                if !w.grant(&credit.controller, credit.n)
                    && let Verdict::Log { suppressed } = self
                        .ctx
                        .metrics
                        .refused(&worker, "credit_for_unknown_controller")
                {
                    warn!(
                        worker,
                        controller = %credit.controller,
                        suppressed,
                        "credit for a controller the worker did not register; ignored"
                    );
                }
            }
            Command::Done {
                worker,
                conn_id,
                done,
            } => {
                let current = self
                    .workers
                    .get(&worker)
                    .and_then(|w| w.conn.as_ref())
                    .is_some_and(|c| c.id == conn_id);
                if !current {
                    // A stale stream: the worker's Hello on its new stream settled what it holds.
                    return Ok(());
                }
                for d in done {
                    self.on_done(&worker, d);
                }
            }
            Command::Disconnected { worker, conn_id } => {
                if let Some(w) = self.workers.get_mut(&worker)
                    && w.conn.as_ref().is_some_and(|c| c.id == conn_id)
                {
                    info!(
                        worker,
                        "worker stream ended; its items stay held until it returns or its lease expires"
                    );
                    w.conn = None;
                    w.disconnected_since = Some(Instant::now());
                    for credits in w.credits.values_mut() {
                        *credits = 0;
                    }
                    self.access_dirty = true;
                }
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Command::Enqueue { controller, keys } => {
                if let Some(state) = self.controllers.get_mut(&controller) {
                    for key in keys {
                        state.queue.add(key);
                    }
                }
            }
        }
        Ok(())
    }

    async fn connect(
        &mut self,
        hello: Hello,
        conn_id: u64,
        tx: Outbound,
    ) -> Result<Result<proto::Welcome, tonic::Status>, TermError> {
        let id = hello.worker_id.clone();
        if hello.known_term > self.term {
            self.log_refusal(
                &id,
                "stale_term",
                "refusing a worker that has seen a newer term",
            );
            return Ok(Err(tonic::Status::failed_precondition(format!(
                "worker {id} has seen term {}, newer than this leader's term {}",
                hello.known_term, self.term
            ))));
        }
        // Identity: the worker must be registered in etcd on the lease it names. (mTLS adds the
        // certificate check in front of this.) An etcd failure here is the worker's to retry, not a
        // reason to end the term.
        let registered = self.workers.get(&id).and_then(|w| w.lease_id) == Some(hello.lease_id);
        if !registered {
            match self.confirm_registration(&id, hello.lease_id).await {
                Ok(true) => {}
                Ok(false) => {
                    self.log_refusal(
                        &id,
                        "unregistered_worker",
                        "refusing a worker that is not registered on its lease",
                    );
                    return Ok(Err(tonic::Status::permission_denied(format!(
                        "worker {id} is not registered in etcd with lease {:x}",
                        hello.lease_id
                    ))));
                }
                Err(err) => {
                    warn!(worker = %id, error = %err, "cannot check a worker's registration; it will retry");
                    return Ok(Err(tonic::Status::unavailable(
                        "cannot check the registration in etcd; retry",
                    )));
                }
            }
        }
        let mut rejected = Vec::new();
        let mut accepted = Vec::new();
        for (spec, concurrency) in hello.controllers {
            // Decide before awaiting: a queue is not Sync, so no borrow of it may live across an await.
            let known = self
                .controllers
                .get(&spec.name)
                .map(|existing| existing.spec == spec);
            match known {
                Some(false) => {
                    self.log_refusal(
                        &id,
                        "controller_spec_mismatch",
                        "refusing a controller whose spec differs from the fleet's",
                    );
                    rejected.push(proto::Rejected {
                        controller: spec.name.clone(),
                        reason: "spec differs from the one the fleet runs; roll all workers to one version".into(),
                    });
                }
                Some(true) => accepted.push((spec.name.clone(), concurrency)),
                None => match self.persist_spec(&spec).await {
                    Ok(()) => {
                        accepted.push((spec.name.clone(), concurrency));
                        self.register_controller(spec);
                    }
                    Err(ElectionError::Etcd(err)) => {
                        warn!(worker = %id, controller = %spec.name, error = %err, "cannot persist a controller spec; the worker will retry");
                        return Ok(Err(tonic::Status::unavailable(
                            "cannot persist the controller spec in etcd; retry",
                        )));
                    }
                    Err(err) => return Err(err.into()),
                },
            }
        }
        // Reconcile what the worker says it holds with what this leader thinks it holds.
        let held: HashSet<(u64, u64)> = hello.held.iter().map(|h| (h.term, h.item_id)).collect();
        let ours: Vec<(u64, u64)> = self
            .workers
            .get(&id)
            .map(|w| w.items.iter().copied().collect())
            .unwrap_or_default();
        for item_id in ours {
            if !held.contains(&item_id) {
                // Finished while the stream was down, or never received: run it again to be sure.
                self.ctx
                    .metrics
                    .reclaimed
                    .get_or_create(&ReasonLabel {
                        reason: "not_held_at_reconnect".into(),
                    })
                    .inc();
                self.reclaim(item_id);
            }
        }
        let Some(w) = self.workers.get_mut(&id) else {
            return Ok(Err(tonic::Status::permission_denied(format!(
                "worker {id} lost its registration"
            ))));
        };
        for h in &hello.held {
            if h.term >= self.term || self.items.contains_key(&(h.term, h.item_id)) {
                continue;
            }
            let shard = shard_of(&h.controller, &h.key, self.shards.count());
            self.shards.item_out(shard);
            *w.in_flight.entry(h.controller.clone()).or_default() += 1;
            w.items.insert((h.term, h.item_id));
            self.foreign_keys
                .insert((h.controller.clone(), h.key.clone()));
            self.items.insert(
                (h.term, h.item_id),
                Item {
                    controller: h.controller.clone(),
                    key: h.key.clone(),
                    worker: id.clone(),
                    shard,
                    foreign: true,
                },
            );
        }
        w.concurrency = accepted.into_iter().collect();
        w.credits.clear();
        // Its weight counts only what this leader accepted; the per-controller limit keeps the sum far
        // from overflowing, and it saturates regardless.
        w.capacity = w
            .concurrency
            .values()
            .fold(0u32, |sum, c| sum.saturating_add(*c))
            .max(1);
        self.access_dirty = true;
        w.conn = Some(Connection { id: conn_id, tx });
        w.handshaken = true;
        w.disconnected_since = None;
        let shards = self.shards.owned_by(&id);
        self.needs_rebalance = true;
        info!(worker = %id, held = hello.held.len(), shards = shards.len(), "worker connected");
        self.warn_on_mixed_controllers();
        Ok(Ok(proto::Welcome {
            term: self.term,
            leader_id: self.ctx.leader.id.clone(),
            shards,
            rejected,
        }))
    }

    /// Shards are fleet-wide: a worker without a controller other connected workers run holds that
    /// controller's keys back while it owns their shards. Says so for every such worker (worker pools
    /// with different controllers belong in separate fleets).
    fn warn_on_mixed_controllers(&self) {
        let connected: Vec<&WorkerState> =
            self.workers.values().filter(|w| w.conn.is_some()).collect();
        let all: BTreeSet<&String> = connected
            .iter()
            .flat_map(|w| w.concurrency.keys())
            .collect();
        for w in connected {
            let lacking: Vec<&str> = all
                .iter()
                .filter(|c| !w.concurrency.contains_key(c.as_str()))
                .map(|c| c.as_str())
                .collect();
            if !lacking.is_empty()
                && let Verdict::Log { suppressed } =
                    self.ctx.metrics.refused(&w.id, "worker_lacks_controllers")
            {
                warn!(worker = %w.id, ?lacking, suppressed, "worker lacks controllers other workers of the fleet run; their keys wait while it owns their shards (run one fleet per set of controllers)");
            }
        }
    }

    /// Counts a refusal of `peer` and logs it, rate-limited per peer and reason.
    fn log_refusal(&self, peer: &str, reason: &str, message: &str) {
        if let Verdict::Log { suppressed } = self.ctx.metrics.refused(peer, reason) {
            warn!(worker = %peer, reason, suppressed, "{message}");
        }
    }

    async fn confirm_registration(
        &mut self,
        id: &str,
        lease_id: i64,
    ) -> Result<bool, etcd_client::Error> {
        let mut etcd = self.ctx.etcd.clone();
        let resp = etcd.get(self.keys.worker(id), None).await?;
        let Some(kv) = resp.kvs().first() else {
            return Ok(false);
        };
        if kv.lease() != lease_id {
            return Ok(false);
        }
        let capacity = Registration::capacity_of(kv.value());
        self.on_registry(RegistryEvent::Up {
            id: id.to_owned(),
            lease_id,
            capacity,
        });
        Ok(true)
    }

    async fn persist_spec(&mut self, spec: &ControllerSpec) -> Result<(), ElectionError> {
        let encoded = super::spec_codec::encode(spec);
        self.ctx
            .election
            .fenced_txn(
                &self.ctx.elected,
                vec![],
                vec![TxnOp::put(self.keys.controller(&spec.name), encoded, None)],
            )
            .await?;
        Ok(())
    }

    // ---- items ---------------------------------------------------------------------------------

    fn on_done(&mut self, worker: &str, d: Done) {
        let id = (d.term, d.item_id);
        match self.items.get(&id) {
            Some(item) if item.worker == worker => {}
            _ => {
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
            }
        }
        let Some(item) = self.items.remove(&id) else {
            return;
        };
        self.release(&item, id);
        if d.outcome == Outcome::Error {
            debug!(controller = %item.controller, key = %item.key, error = %d.error, "reconcile failed; retrying with backoff");
        }
        let Some(state) = self.controllers.get_mut(&item.controller) else {
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
                state.queue.add_after(item.key.clone(), after);
            }
            Outcome::Error => {
                state.counters.error.inc();
                state.queue.add_rate_limited(item.key.clone());
            }
        }
        if item.foreign {
            self.finish_foreign(&item.controller, &item.key);
            return;
        }
        // Read-your-writes: hold the key (keep it processing) until the cache shows every write.
        let mut unobserved = Vec::new();
        for w in d.writes {
            let Some(expected) = Expected::of(w.op, w.resource_version) else {
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
            state.queue.done(&item.key);
        } else {
            let now = Instant::now();
            let deadline = now
                .checked_add(self.ctx.config.expectations_timeout)
                .unwrap_or(now);
            self.expectations
                .hold(&item.controller, &item.key, unobserved, deadline);
            self.ctx
                .metrics
                .ryw_holds
                .set(i64::try_from(self.expectations.len()).unwrap_or(i64::MAX));
        }
    }

    /// Bookkeeping of an item that left its worker.
    fn release(&mut self, item: &Item, id: (u64, u64)) {
        if let Some(w) = self.workers.get_mut(&item.worker) {
            w.items.remove(&id);
            if let Some(n) = w.in_flight.get_mut(&item.controller) {
                *n = n.saturating_sub(1);
            }
        }
        if self.shards.item_back(item.shard) == 0
            && matches!(self.shards.state(item.shard), ShardState::Moving { .. })
        {
            self.pending_moves.insert(item.shard);
        }
    }

    /// Takes an item back without a Done and runs its key again.
    fn reclaim(&mut self, id: (u64, u64)) {
        let Some(item) = self.items.remove(&id) else {
            return;
        };
        self.release(&item, id);
        if item.foreign {
            self.finish_foreign(&item.controller, &item.key);
            if let Some(state) = self.controllers.get_mut(&item.controller) {
                state.queue.add(item.key);
            }
            return;
        }
        if let Some(state) = self.controllers.get_mut(&item.controller) {
            state.queue.done(&item.key);
            state.queue.add(item.key);
        }
    }

    fn finish_foreign(&mut self, controller: &str, key: &str) {
        let pair = (controller.to_owned(), key.to_owned());
        self.foreign_keys.remove(&pair);
        if self.deferred.remove(&pair) {
            self.route(pair.0, pair.1);
        }
    }

    // ---- routing -------------------------------------------------------------------------------

    /// Moves keys from the queues to workers while workers have credits.
    fn pump(&mut self) {
        let names: Vec<String> = self.controllers.keys().cloned().collect();
        for name in names {
            // Keys already routed to a worker go first.
            let ready: Vec<String> = self
                .workers
                .values()
                .filter(|w| {
                    w.is_dispatchable()
                        && w.credits(&name) > 0
                        && w.backlog.get(&name).is_some_and(|b| !b.is_empty())
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
                .workers
                .values()
                .filter(|w| w.is_dispatchable())
                .map(|w| u64::from(w.credits(&name)))
                .sum();
            while credits > 0 {
                let Some(state) = self.controllers.get_mut(&name) else {
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
        let backlog = self
            .workers
            .values()
            .map(WorkerState::backlog_len)
            .sum::<usize>()
            + self.shards.parked_len();
        self.ctx
            .metrics
            .backlog
            .set(i64::try_from(backlog).unwrap_or(i64::MAX));
    }

    /// Sends `key` (processing in its queue) to the owner of its shard, or keeps it until it can be sent.
    /// Returns whether it was sent (using one credit).
    fn route(&mut self, controller: String, key: String) -> bool {
        if !self.controllers.contains_key(&controller) {
            // Retired while the key waited: its queue is gone, and so is the key.
            return false;
        }
        let pair = (controller, key);
        if self.foreign_keys.contains(&pair) {
            self.deferred.insert(pair);
            return false;
        }
        let (controller, key) = pair;
        let shard = shard_of(&controller, &key, self.shards.count());
        let Some(owner) = self.shards.dispatch_owner(shard).map(str::to_owned) else {
            self.shards.park(shard, Parked { controller, key });
            return false;
        };
        let Some(w) = self.workers.get_mut(&owner) else {
            self.shards.park(shard, Parked { controller, key });
            return false;
        };
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

    fn drain_backlog(&mut self, worker: &str, controller: &str) {
        loop {
            let Some(w) = self.workers.get_mut(worker) else {
                return;
            };
            if !w.is_dispatchable() || w.credits(controller) == 0 {
                return;
            }
            let Some((key, shard)) = w.backlog.get_mut(controller).and_then(|b| b.pop_front())
            else {
                return;
            };
            self.send_item(worker, controller.to_owned(), key, shard);
        }
    }

    fn send_item(&mut self, worker: &str, controller: String, key: String, shard: u32) {
        let item_id = self.next_item;
        self.next_item += 1;
        let Some(state) = self.controllers.get(&controller) else {
            return;
        };
        state.counters.assigned.inc();
        let attempt = state.queue.num_requeues(&key);
        let (object, prefetched) = self.payload(&state.spec, &key);
        let Some(w) = self.workers.get_mut(worker) else {
            return;
        };
        if let Some(c) = w.credits.get_mut(&controller) {
            *c -= 1;
        }
        *w.in_flight.entry(controller.clone()).or_default() += 1;
        w.items.insert((self.term, item_id));
        self.shards.item_out(shard);
        self.outbox
            .entry(worker.to_owned())
            .or_default()
            .push(proto::Assign {
                item_id,
                term: self.term,
                controller: controller.clone(),
                key: key.clone(),
                shard,
                attempt,
                object,
                prefetched,
                traceparent: String::new(),
            });
        self.items.insert(
            (self.term, item_id),
            Item {
                controller,
                key,
                worker: worker.to_owned(),
                shard,
                foreign: false,
            },
        );
    }

    /// The primary object and the prefetched related objects, straight from the cache's serialization.
    fn payload(
        &self,
        spec: &ControllerSpec,
        key: &str,
    ) -> (bytes::Bytes, Vec<proto::PrefetchedObject>) {
        let primary = match &spec.primary {
            Primary::Kind(kind) => kind,
            Primary::OwnerGraph => {
                let Some((object, dependents)) = self.graph.payload(key, &self.ctx.informers)
                else {
                    return (bytes::Bytes::new(), Vec::new());
                };
                let dependents = dependents
                    .iter()
                    .map(|d| proto::PrefetchedObject {
                        kind: Some((&d.kind).into()),
                        object: d.json.clone(),
                    })
                    .collect();
                return (object.json.clone(), dependents);
            }
        };
        let Some(object) = self.ctx.informers.store(primary).and_then(|s| s.get(key)) else {
            return (bytes::Bytes::new(), Vec::new());
        };
        let mut prefetched = Vec::new();
        for kind in &spec.prefetch_owned {
            let Some(store) = self.ctx.informers.store(kind) else {
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

    fn flush(&mut self) {
        for (worker, items) in self.outbox.drain() {
            if let Some(w) = self.workers.get(&worker) {
                // A failed send means the stream just broke: the items stay held by the worker until it
                // reports them in its next Hello or its lease expires.
                w.send(proto::coordinator_message::Msg::Assign(
                    proto::AssignBatch { items },
                ));
            }
        }
    }

    // ---- informer events -----------------------------------------------------------------------

    fn on_informer_event(&mut self, ev: InformerEvent) {
        let mut keys = Vec::new();
        self.graph.keys_for(&ev, &self.ctx.informers, &mut keys);
        match ev {
            InformerEvent::Applied { old, new } => {
                let released =
                    self.expectations
                        .observe(&new.kind, &new.key(), Some(new.resource_version));
                self.release_holds(released);
                self.routes.keys_for(&new, &self.ctx.informers, &mut keys);
                if let Some(old) = old {
                    self.routes.keys_for(&old, &self.ctx.informers, &mut keys);
                }
            }
            InformerEvent::Deleted { old, .. } => {
                let released = self.expectations.observe(&old.kind, &old.key(), None);
                self.release_holds(released);
                self.routes.keys_for(&old, &self.ctx.informers, &mut keys);
            }
            InformerEvent::Synced { kind } => {
                let names: Vec<String> = self.controllers.keys().cloned().collect();
                for name in names {
                    self.check_synced(&name);
                }
                // A kind discovered after an owner-graph controller started: its objects join now.
                if self.graph.covers(&kind) {
                    let graph_keys = self.graph.initial_keys(&kind, &self.ctx.informers);
                    for state in self.controllers.values_mut() {
                        if state.synced && self.graph.routes(&state.spec.name) {
                            for key in &graph_keys {
                                state.queue.add(key.clone());
                            }
                        }
                    }
                }
            }
        }
        for (controller, key) in keys {
            if let Some(state) = self.controllers.get_mut(&controller) {
                state.queue.add(key);
            }
        }
    }

    /// A discovery finished: informers start for the kinds it found first, and owner-graph controllers
    /// may now be synced.
    fn on_discovered(&mut self, kinds: Vec<ResourceKind>) {
        let added = self.graph.discovered(kinds);
        for kind in &added {
            self.ctx.informers.ensure(kind);
        }
        if !added.is_empty() {
            info!(kinds = added.len(), "owner graph covers new kinds");
        }
        let names: Vec<String> = self.controllers.keys().cloned().collect();
        for name in names {
            self.check_synced(&name);
        }
    }

    fn release_holds(&mut self, released: Vec<(String, String)>) {
        if released.is_empty() {
            return;
        }
        for (controller, key) in released {
            if let Some(state) = self.controllers.get_mut(&controller) {
                state.queue.done(&key);
            }
        }
        self.ctx
            .metrics
            .ryw_holds
            .set(i64::try_from(self.expectations.len()).unwrap_or(i64::MAX));
    }

    // ---- time ----------------------------------------------------------------------------------

    fn next_deadline(&self) -> Option<Instant> {
        self.controllers
            .values()
            .filter_map(|c| c.queue.next_deadline())
            .min()
    }

    fn promote_due(&mut self) {
        let now = Instant::now();
        for state in self.controllers.values_mut() {
            state.queue.promote_due(now);
        }
    }

    async fn periodic(&mut self) -> Result<(), TermError> {
        let now = Instant::now();
        self.promote_due();
        // An owner-graph controller may open on time alone (a kind that never syncs, see SYNC_GRACE).
        let waiting: Vec<String> = self
            .controllers
            .values()
            .filter(|c| !c.synced && c.spec.primary == Primary::OwnerGraph)
            .map(|c| c.spec.name.clone())
            .collect();
        for name in waiting {
            self.check_synced(&name);
        }
        for state in self.controllers.values_mut() {
            state.queue.update_unfinished_work(now);
            if let (Some(at), Some(every)) = (state.next_resync, state.spec.resync)
                && at <= now
                && state.synced
            {
                state.next_resync = Some(now + every);
                for key in primary_keys(&state.spec.primary, &self.graph, &self.ctx.informers) {
                    state.queue.add(key);
                }
            }
        }
        let expired = self.expectations.expire(now);
        if !expired.is_empty() {
            self.ctx.metrics.ryw_expired.inc_by(expired.len() as u64);
            warn!(
                keys = expired.len(),
                "writes not observed within the bound; dispatching anyway"
            );
            self.release_holds(expired);
        }
        self.retire_controllers(now).await?;
        if now >= self.next_unserved_retry {
            self.next_unserved_retry = now + UNSERVED_RETRY;
            self.ctx.informers.retry_unserved();
        }
        self.fence_silent_workers(now).await?;
        let free: Vec<String> = self
            .workers
            .values()
            .filter(|w| w.lease_id.is_none() && w.fenced_until.is_none_or(|t| t <= now))
            .map(|w| w.id.clone())
            .collect();
        for id in free {
            self.free_worker(&id, "lease_expired");
        }
        let all_connected = self
            .workers
            .values()
            .all(|w| w.handshaken || w.lease_id.is_none());
        if self.needs_rebalance && (all_connected || now >= self.settle_until) {
            self.rebalance().await?;
        }
        Ok(())
    }

    /// A worker that stays away longer than the grace while its lease lives would keep its shards
    /// forever; revoke its lease (it fences itself on the next renewal) and free its items a lease
    /// TTL later, when it has certainly stopped.
    async fn fence_silent_workers(&mut self, now: Instant) -> Result<(), TermError> {
        let grace = self.ctx.config.worker_reconnect_grace;
        let silent: Vec<(String, i64)> = self
            .workers
            .values()
            .filter(|w| {
                w.conn.is_none()
                    && w.fenced_until.is_none()
                    && w.disconnected_since
                        .is_some_and(|t| now.saturating_duration_since(t) >= grace)
            })
            .filter_map(|w| w.lease_id.map(|l| (w.id.clone(), l)))
            .collect();
        for (id, lease) in silent {
            let mut etcd = self.ctx.etcd.clone();
            let ttl = etcd
                .lease_time_to_live(lease, None)
                .await
                .map(|r| r.granted_ttl())
                .unwrap_or(0);
            // The worker chose its lease's TTL: bound it before doing arithmetic with it.
            let ttl =
                Duration::from_secs(u64::try_from(ttl).unwrap_or(0).clamp(1, MAX_LEASE_TTL_SECS));
            warn!(worker = %id, "worker silent beyond the reconnect grace; revoking its lease");
            if let Err(err) = etcd.lease_revoke(lease).await {
                debug!(worker = %id, error = %err, "lease revoke failed (already gone?)");
            }
            if let Some(w) = self.workers.get_mut(&id) {
                w.fenced_until = Some(now.checked_add(ttl).unwrap_or(now));
                self.access_dirty = true;
            }
        }
        Ok(())
    }

    fn on_registry(&mut self, ev: RegistryEvent) {
        match ev {
            RegistryEvent::Up {
                id,
                lease_id,
                capacity,
            } => {
                let now = Instant::now();
                match self.workers.get_mut(&id) {
                    Some(w) if w.lease_id == Some(lease_id) => {
                        w.capacity = w.capacity.max(capacity)
                    }
                    Some(_) => {
                        // Same id on a new lease: the old incarnation is gone (its lease ended).
                        self.free_worker(&id, "lease_expired");
                        self.workers.insert(
                            id.clone(),
                            WorkerState::registered(&id, lease_id, capacity, now),
                        );
                    }
                    None => {
                        self.workers.insert(
                            id.clone(),
                            WorkerState::registered(&id, lease_id, capacity, now),
                        );
                    }
                }
            }
            RegistryEvent::Down { id } => {
                if let Some(w) = self.workers.get_mut(&id) {
                    info!(worker = %id, "worker lease ended");
                    w.lease_id = None;
                    w.conn = None;
                    self.needs_rebalance = true;
                    self.access_dirty = true;
                }
            }
        }
    }

    /// Forgets a worker whose lease is gone: its items run again elsewhere, its shards are free.
    fn free_worker(&mut self, id: &str, reason: &str) {
        let Some(mut w) = self.workers.remove(id) else {
            return;
        };
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
                worker = id,
                items = items.len(),
                "re-dispatching the items of a worker whose lease ended"
            );
        }
        for item_id in items {
            self.reclaim(item_id);
        }
        for s in 0..self.shards.count() {
            match self.shards.state(s).clone() {
                // Its ownership keys died with its lease.
                ShardState::Owned(o) if o == id => self.shards.set_state(s, ShardState::Unowned),
                ShardState::Moving { from, .. } if from == id => {
                    self.shards.set_state(s, ShardState::Unowned)
                }
                ShardState::Moving { from, to } if to == id => {
                    self.shards.set_state(s, ShardState::Owned(from));
                    self.unpark(s);
                }
                _ => {}
            }
        }
        for (controller, keys) in w.backlog.drain() {
            for (key, _) in keys {
                self.route(controller.clone(), key);
            }
        }
        self.needs_rebalance = true;
        self.access_dirty = true;
    }

    // ---- controller lifetime -------------------------------------------------------------------

    /// Retires every controller no live worker has run for `--controller-retire-after`: a controller a
    /// stray or departed worker declared must not keep its informers, queue and spec for good.
    async fn retire_controllers(&mut self, now: Instant) -> Result<(), TermError> {
        let running: HashSet<&str> = self
            .workers
            .values()
            .filter(|w| w.lease_id.is_some() && w.handshaken)
            .flat_map(|w| w.concurrency.keys().map(String::as_str))
            .collect();
        let retire_after = self.ctx.config.controller_retire_after;
        let mut due = Vec::new();
        for (name, state) in &mut self.controllers {
            if running.contains(name.as_str()) {
                state.last_live = now;
            } else if now.saturating_duration_since(state.last_live) >= retire_after {
                due.push(name.clone());
            }
        }
        for name in due {
            self.retire(&name, now).await?;
        }
        Ok(())
    }

    /// Drops `name`'s queue and routes, stops the informers no other controller needs, and deletes its
    /// spec from etcd (fenced by the term). Items of it still out finish without effect.
    async fn retire(&mut self, name: &str, now: Instant) -> Result<(), TermError> {
        let Some(state) = self.controllers.remove(name) else {
            return Ok(());
        };
        warn!(controller = name, after = ?self.ctx.config.controller_retire_after, keys = state.queue.len(),
            "retiring a controller no live worker runs: dropping its queue and spec");
        self.routes.remove(name);
        for w in self.workers.values_mut() {
            w.backlog.remove(name);
        }
        let mut stopping: Vec<ResourceKind> = state.spec.kinds();
        if state.spec.primary == Primary::OwnerGraph && self.graph.remove_controller(name) {
            if let Some(stop) = self.discovery_stop.take() {
                stop.cancel();
            }
            stopping.extend(self.graph.kinds().cloned());
        }
        let mut needed: HashSet<ResourceKind> = self
            .controllers
            .values()
            .flat_map(|c| c.spec.kinds())
            .collect();
        if self.graph.has_controllers() {
            needed.extend(self.graph.kinds().cloned());
        }
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
        let deleted = self
            .ctx
            .election
            .fenced_txn(
                &self.ctx.elected,
                vec![],
                vec![TxnOp::delete(self.keys.controller(name), None)],
            )
            .await;
        match deleted {
            Ok(_) => Ok(()),
            // The next leader loads it and retires it again after the same wait.
            Err(ElectionError::Etcd(err)) => {
                warn!(controller = name, error = %err, "cannot delete a retired controller's spec");
                Ok(())
            }
            Err(err) => Err(err.into()),
        }
    }

    // ---- shards --------------------------------------------------------------------------------

    async fn rebalance(&mut self) -> Result<(), TermError> {
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
    async fn claim(&mut self, claims: Vec<(u32, String)>) -> Result<(), TermError> {
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

    async fn claim_one(&mut self, s: u32, owner: &str) -> Result<(), TermError> {
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
    async fn complete_moves(&mut self) -> Result<(), TermError> {
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

    fn owned(&mut self, s: u32, owner: String) {
        self.shards.set_state(s, ShardState::Owned(owner));
        self.unpark(s);
    }

    fn unpark(&mut self, s: u32) {
        for parked in self.shards.unpark(s) {
            self.route(parked.controller, parked.key);
        }
    }

    fn take_backlog_of_shard(&mut self, worker: &str, s: u32) {
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

    // ---- status --------------------------------------------------------------------------------

    fn status(&self) -> proto::StatusResponse {
        let mut workers: Vec<proto::WorkerStatus> = self
            .workers
            .values()
            .map(|w| proto::WorkerStatus {
                id: w.id.clone(),
                connected: w.is_dispatchable(),
                capacity: w.capacity,
                in_flight: w.in_flight_total(),
                shards: u32::try_from(self.shards.owned_by(&w.id).len()).unwrap_or(u32::MAX),
                lacking: if w.handshaken {
                    let mut lacking: Vec<String> = self
                        .controllers
                        .keys()
                        .filter(|c| !w.concurrency.contains_key(*c))
                        .cloned()
                        .collect();
                    lacking.sort();
                    lacking
                } else {
                    Vec::new()
                },
            })
            .collect();
        workers.sort_by(|a, b| a.id.cmp(&b.id));
        let mut queues: Vec<proto::QueueStatus> = self
            .controllers
            .iter()
            .map(|(name, c)| {
                let routed: usize = self
                    .workers
                    .values()
                    .map(|w| w.backlog.get(name).map_or(0, |b| b.len()))
                    .sum();
                proto::QueueStatus {
                    controller: name.clone(),
                    depth: (c.queue.len() + routed) as u64,
                    processing: c.queue.processing_len() as u64,
                    waiting: 0,
                }
            })
            .collect();
        queues.sort_by(|a, b| a.controller.cmp(&b.controller));
        let informers = self
            .ctx
            .informers
            .kinds()
            .into_iter()
            .map(|s| proto::InformerStatus {
                kind: s.kind.to_string(),
                synced: s.synced,
                objects: s.objects as u64,
                unserved: s.unserved,
            })
            .collect();
        let now = Instant::now();
        let retired = self
            .retired
            .iter()
            .map(|(controller, at)| proto::RetiredController {
                controller: controller.clone(),
                seconds_ago: now.saturating_duration_since(*at).as_secs(),
            })
            .collect();
        proto::StatusResponse {
            leader_id: self.ctx.leader.id.clone(),
            leader_address: self.ctx.leader.address.clone(),
            term: self.term,
            workers,
            queues,
            informers,
            shard_count: self.shards.count(),
            retired,
        }
    }
}

/// A worker's lease TTL is its own choice; the leader waits at most this long after revoking it.
const MAX_LEASE_TTL_SECS: u64 = 3600;

/// Caps each weight at [`MAX_WEIGHT_RATIO`] times the (lower) median weight, so one worker advertising
/// a huge capacity gets a bounded share of the shards rather than nearly all of them.
fn fair_weights(mut workers: Vec<WorkerWeight>) -> Vec<WorkerWeight> {
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

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Follows `workers/` from `revision`, turning puts and deletes into registry events.
async fn watch_registry(
    mut etcd: Client,
    keys: FleetKeys,
    revision: i64,
    tx: mpsc::UnboundedSender<RegistryEvent>,
    stop: CancellationToken,
) {
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(revision);
    let mut stream = match etcd.watch(keys.workers_prefix(), Some(options)).await {
        Ok(stream) => stream,
        Err(err) => {
            warn!(error = %err, "cannot watch worker registrations; ending the term");
            return;
        }
    };
    loop {
        let message = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            m = stream.message() => m,
        };
        let Ok(Some(resp)) = message else {
            warn!("worker registration watch ended; ending the term");
            return;
        };
        if resp.canceled() {
            warn!("worker registration watch cancelled (compacted?); ending the term");
            return;
        }
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            let Some(id) = keys.parse_worker(kv.key()) else {
                continue;
            };
            let ev = match event.event_type() {
                etcd_client::EventType::Put => RegistryEvent::Up {
                    id: id.to_owned(),
                    lease_id: kv.lease(),
                    capacity: Registration::capacity_of(kv.value()),
                },
                etcd_client::EventType::Delete => RegistryEvent::Down { id: id.to_owned() },
            };
            if tx.send(ev).is_err() {
                return;
            }
        }
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

/// How often the owner graph rediscovers the served resources (upstream's garbage collector: 30 s).
pub const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);

/// Discovers the deletable resources now and every [`DISCOVERY_PERIOD`] until `stop`; failures are
/// logged and retried at the next period.
async fn discover(
    client: kube::Client,
    tx: mpsc::UnboundedSender<Vec<ResourceKind>>,
    stop: CancellationToken,
) {
    loop {
        match deletable_resources(&client).await {
            Ok(kinds) => {
                if tx.send(kinds).is_err() {
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

        #[test]
        fn registration_capacities_are_bounded(capacity in any::<u64>()) {
            let value = format!(r#"{{"id":"w","capacity":{capacity}}}"#);
            let read = Registration::capacity_of(value.as_bytes());
            prop_assert!(read <= MAX_REGISTERED_CAPACITY);
        }
    }
}
