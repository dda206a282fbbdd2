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
//!
//! Its state is four parts, each a type that owns its fields, states the invariant it keeps and offers
//! a few operations; none reaches into another, and each is handed what it needs of the others:
//!
//! - [`Items`] (`items.rs`): every item counted at its worker and its shard together, foreign and
//!   deferred keys, read-your-writes holds — assign, adopt, done, reclaim, hold, retire;
//! - [`Membership`] (`membership.rs`): the workers, Hellos waiting for a registration, the registry
//!   revision — load, registration reads and events, Hello, disconnect, fence, free;
//! - [`Handover`] (`handover.rs`): the shard table and the moves, claims and commits changing it —
//!   rebalance, complete moves, settle a write, a worker gone;
//! - [`Controllers`] (`controllers.rs`): specs, queues, sync gates, routes and the owner graph —
//!   register, keys for an event, resync, retire.
//!
//! The dispatcher keeps the orchestration: it carries a command, an informer event, an etcd result or
//! the end of a turn through the parts (`mod.rs`, `routing.rs` for items and timers, `hello.rs` and
//! `worker_loss.rs` for workers joining and leaving, `shard_moves.rs` for shard writes, `events.rs` for
//! the controllers). The invariants that span the parts are asserted together, in one place, by
//! `Dispatcher::check` (`check.rs`, tests only), after every step of the unit tests.
//!
//! The [`Dispatcher`] itself never awaits: it decides, sends to worker streams (which never block), and
//! queues what it wants of etcd as [`EtcdWork`]; the term's loop (`run`) runs that work beside it and
//! feeds results back as events. So a slow etcd stops only what waits for it, and the unit tests
//! (`tests`) drive the dispatcher on paused time, playing etcd and the workers themselves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use flotilla_common::{
    Elected, Election, ElectionError, LeaderInfo, Reason, ResourceKind, Verdict,
};
use flotilla_proto as proto;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::access::CacheAccess;
use super::messages::{Credit, Done, Hello, HelloRefused, WriteIntent};
use super::progress::{DispatchProgress, StallClock};
use super::workers::Outbound;
use super::write_intents::WriteIntents;
use crate::config::CoordinatorConfig;
use crate::informer::Informers;
use crate::metrics::FleetMetrics;
use crate::queue::QueueMetricsFamilies;

mod assign_budget;
#[cfg(test)]
mod check;
mod controllers;
mod etcd_work;
mod events;
mod handover;
mod hello;
mod items;
mod membership;
mod routing;
mod run;
mod shard_moves;
mod status;
#[cfg(test)]
mod tests;
mod trace_spans;
mod worker_gauges;
mod worker_loss;

use controllers::Controllers;
use etcd_work::{EtcdDone, EtcdWork};
pub use events::DISCOVERY_PERIOD;
use handover::Handover;
use items::Items;
use membership::Membership;
pub use run::spawn;

/// Where the answer to a Hello goes: the Welcome, or why the worker is refused.
pub type HelloReply = oneshot::Sender<Result<proto::Welcome, HelloRefused>>;

/// Requests to the dispatcher, from the gRPC services.
#[derive(Debug)]
pub enum Command {
    /// A worker said Hello on a new stream.
    Connect {
        hello: Hello,
        conn_id: u64,
        tx: Outbound,
        reply: HelloReply,
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
    /// A worker's traced reconciles are about to write these objects: their echoes get linked.
    Intents { intents: Vec<WriteIntent> },
}

/// Commands wait for the dispatcher in a channel of this capacity (the loop takes up to 4096 at a time).
/// Back-pressure: a sender whose command does not fit waits — a worker stream's task, and through it
/// gRPC flow control, the worker's sends; an admin call; a benchmark's enqueue. That cannot deadlock:
/// the dispatcher never waits on any of them (it answers through oneshots and unbounded worker streams,
/// and never sends on this channel itself).
pub const COMMAND_CAPACITY: usize = 1024;

/// A handle to the running dispatcher of the current term.
#[derive(Clone, Debug)]
pub struct DispatcherHandle {
    tx: mpsc::Sender<Command>,
}

impl DispatcherHandle {
    /// Sends a command, waiting while [`COMMAND_CAPACITY`] commands are queued; false once the term
    /// has ended.
    ///
    /// # Cancel safety
    /// A send cancelled while waiting sends nothing.
    pub async fn send(&self, cmd: Command) -> bool {
        self.tx.send(cmd).await.is_ok()
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

/// Everything a term needs from the process. The loop keeps the etcd parts; the dispatcher gets the rest
/// ([`TermEnv`]).
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
    /// Where this term publishes whether its dispatching is stalled (for `/readyz`).
    pub progress: DispatchProgress,
    /// Whether the Kubernetes API answers: read-your-writes holds do not expire while it is in doubt.
    pub api_link: crate::api_link::ApiLink,
}

/// What the dispatcher's decisions need of the process: no etcd (what it wants of etcd it queues as
/// [`EtcdWork`] and hears back as [`EtcdDone`]).
pub(super) struct TermEnv {
    pub(super) config: Arc<CoordinatorConfig>,
    /// The term: the create revision of the leader's election key.
    pub(super) term: u64,
    pub(super) leader: LeaderInfo,
    pub(super) informers: Informers,
    pub(super) metrics: FleetMetrics,
    pub(super) queue_metrics: QueueMetricsFamilies,
    pub(super) access: CacheAccess,
    pub(super) progress: DispatchProgress,
    pub(super) api_link: crate::api_link::ApiLink,
}

/// No worker weighs more than this many times the median live worker in shard assignment, whatever it
/// advertises: a worker twice as big gets twice the shards, but one advertisement cannot take the fleet.
const MAX_WEIGHT_RATIO: u32 = 4;

/// Controllers retired in this term that status remembers, newest last.
const MAX_RETIRED_SHOWN: usize = 64;

/// How often declared kinds whose informers stopped as unserved are tried again (a CRD may have been
/// created since).
const UNSERVED_RETRY: Duration = Duration::from_secs(300);

/// How long a new leader waits for the workers it finds registered to say Hello before it rebalances.
const SETTLE: Duration = Duration::from_secs(2);

/// The state of one term and every decision on it; see the module documentation.
struct Dispatcher {
    ctx: TermEnv,
    term: u64,
    /// The controllers of the term: their queues, routes and the owner graph.
    running: Controllers,
    /// Traced writes waiting for their echo (tracing only; empty otherwise).
    intents: WriteIntents,
    discovered_tx: mpsc::Sender<Vec<ResourceKind>>,
    /// Cancelled when the term ends: stops the tasks the term spawned on demand.
    term_tasks: CancellationToken,
    /// The workers the term knows, and Hellos waiting for their registration.
    membership: Membership,
    /// Shard ownership and the moves, claims and commits changing it.
    handover: Handover,
    /// Items out at workers, foreign and deferred keys, read-your-writes holds.
    items: Items,
    outbox: HashMap<String, Vec<proto::Assign>>,
    /// etcd work decided and not yet handed to the loop ([`Dispatcher::take_etcd_work`]); results come
    /// back through [`Dispatcher::on_etcd_done`].
    etcd_work: Vec<EtcdWork>,
    needs_rebalance: bool,
    settle_until: Instant,
    /// Whether workers or controllers changed since the cache access view was last published.
    access_dirty: bool,
    /// Controllers retired in this term, with when.
    retired: Vec<(String, Instant)>,
    /// Stops the owner graph's discovery when its last controller retires.
    discovery_stop: Option<CancellationToken>,
    next_unserved_retry: Instant,
    /// When dispatching last made progress (see [`StallClock`]).
    stall: StallClock,
}

impl Dispatcher {
    /// A dispatcher with nothing known yet; [`Dispatcher::start`] gives it what etcd holds. Owner-graph
    /// discoveries it starts report on `discovered_tx`.
    pub(super) fn new(ctx: TermEnv, discovered_tx: mpsc::Sender<Vec<ResourceKind>>) -> Self {
        let handover = Handover::new(ctx.config.shards);
        Self {
            term: ctx.term,
            running: Controllers::default(),
            intents: WriteIntents::default(),
            discovered_tx,
            term_tasks: CancellationToken::new(),
            membership: Membership::default(),
            handover,
            items: Items::default(),
            outbox: HashMap::new(),
            etcd_work: Vec::new(),
            needs_rebalance: true,
            settle_until: Instant::now() + SETTLE,
            access_dirty: true,
            retired: Vec::new(),
            discovery_stop: None,
            next_unserved_retry: Instant::now() + UNSERVED_RETRY,
            stall: StallClock::new(ctx.config.dispatch_stall_timeout, Instant::now()),
            ctx,
        }
    }

    /// What every turn of the loop ends with, after its events: hands off the moves that can finish,
    /// sends what workers have credits for, and publishes the cache access view if it changed.
    pub(super) fn end_turn(&mut self) {
        if self.handover.has_pending_moves() {
            self.complete_moves();
        }
        self.pump();
        self.flush();
        if self.access_dirty {
            self.publish_access();
        }
    }

    /// The etcd work decided since the last call, for the loop to run beside itself.
    pub(super) fn take_etcd_work(&mut self) -> Vec<EtcdWork> {
        std::mem::take(&mut self.etcd_work)
    }

    /// A result of etcd work.
    ///
    /// # Errors
    /// [`TermError::Deposed`] when a fenced write found another leader: the term must end.
    pub(super) fn on_etcd_done(&mut self, done: EtcdDone) -> Result<(), TermError> {
        match done {
            EtcdDone::Shard(write, outcome) => self.on_shard_written(write, outcome),
            EtcdDone::Fenced { worker, ttl } => self.on_fenced(&worker, ttl),
            EtcdDone::Registration { conn_id, read } => self.on_registration_read(conn_id, read),
            EtcdDone::Deposed(err) => return Err(err.into()),
        }
        Ok(())
    }

    /// Publishes who may read the cache: workers with a live lease that said Hello to this leader, each
    /// with the kinds its own accepted controllers declared (and, for a worker running an owner-graph
    /// controller, every informed kind). Not the fleet's union: a controller one worker declares (say,
    /// of Secrets) must not open its kinds to every other worker.
    pub(super) fn publish_access(&mut self) {
        self.access_dirty = false;
        let workers = self
            .membership
            .iter()
            .filter(|w| w.handshaken)
            .filter_map(|w| {
                let lease = w.lease_id?;
                // Its accepted controllers (a rejected spec never reaches `concurrency`); one retired
                // meanwhile declares nothing any more.
                let (kinds, owner_graph) = self.running.reads_of(w.concurrency.keys());
                let reads = super::access::WorkerReads {
                    lease,
                    kinds,
                    owner_graph,
                };
                Some((w.id.clone(), reads))
            })
            .collect();
        self.ctx.access.publish(workers);
    }

    /// A command from the gRPC services.
    pub(super) fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Connect {
                hello,
                conn_id,
                tx,
                reply,
            } => self.connect(hello, conn_id, tx, reply),
            Command::Credit {
                worker,
                conn_id,
                credit,
            } => {
                let Some(w) = self.membership.on_stream(&worker, conn_id) else {
                    return;
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
                if self.membership.on_stream(&worker, conn_id).is_none() {
                    // A stale stream: the worker's Hello on its new stream settled what it holds.
                    return;
                }
                for d in done {
                    self.on_done(&worker, d);
                }
            }
            Command::Disconnected { worker, conn_id } => {
                if self
                    .membership
                    .disconnected(&worker, conn_id, Instant::now())
                {
                    info!(
                        worker,
                        "worker stream ended; its items stay held until it returns or its lease expires"
                    );
                    self.access_dirty = true;
                }
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Command::Intents { intents } => self.on_intents(intents),
            Command::Enqueue { controller, keys } => {
                if let Some(state) = self.running.get_mut(&controller) {
                    for key in keys {
                        match trace_spans::EventSpan::requested(&controller, &key) {
                            None => state.queue.add_because(key, || Reason::Requested),
                            Some(request) => {
                                let (span, trace) =
                                    request.enqueue(&controller, &key, Default::default());
                                let added =
                                    state.queue.add_traced(key, || Reason::Requested, trace);
                                span.record("coalesced", !added);
                            }
                        }
                    }
                }
            }
        }
    }
}
