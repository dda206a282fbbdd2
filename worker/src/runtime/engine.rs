//! The worker's life cycle: a session (lease + registration) at a time; within it, follow the leader,
//! keep one Dispatch stream to it, run what it assigns, report what finished; self-fence the moment
//! the lease is in doubt.
//!
//! This file is the I/O: etcd (session, registration, the leader watch), the gRPC stream, the
//! reconcile tasks and the timers. What to do about each event is decided by the session's state
//! machine ([`machine`], whose documentation states the rules); the loop feeds it one event at a time
//! and carries out the [`Action`]s it returns, in order. The loop watches, most urgent first: the
//! worker being killed, the lease being lost, a graceful shutdown, the drain's grace period, finished
//! reconciles, the stream, etcd's leader, and the machine's wake-up time. It never waits on a reconcile
//! and, while connected, never on the network, so a lost lease fences at once; opening a stream and
//! closing it gracefully are the two awaits inside a turn, bounded by [`CONNECT_TIMEOUT`] and
//! [`CLOSE_TIMEOUT`].

mod action;
mod machine;
mod reconcile;

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use flotilla_common::{Election, FleetKeys, Health, Leadership, Session};
use flotilla_proto as proto;
use flotilla_sdk::DynController;
use flotilla_sdk::host::{CacheSlot, ControllerEnv};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::cache_client::GrpcCache;
use super::config::WorkerConfig;
use super::connection::Connection;
use super::ledger::Ledger;
use super::metrics::{ControllerMetrics, Metrics};
use super::reconcile_journal::ReconcileJournal;
use super::registration::RegistrationRecord;
use super::wire;
use super::write_intents::WriteIntents;
use action::{Action, End};
use machine::{Finished, SessionMachine, Timing};
use reconcile::Reconciles;

/// How long opening a stream to the leader may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a shutting-down worker waits for the leader to close the stream after its last Dones.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Pause before retrying a failed session start or registration.
const SESSION_RETRY: Duration = Duration::from_secs(1);

/// What every part of a running worker shares.
pub(crate) struct Shared {
    pub(crate) config: WorkerConfig,
    pub(crate) worker_id: Arc<str>,
    pub(crate) keys: FleetKeys,
    pub(crate) controllers: HashMap<String, ControllerSlot>,
    pub(crate) metrics: Metrics,
    pub(crate) health: Health,
    /// The welcomed leader's cache, for the reconciles' cache clients; empty between leaders.
    pub(crate) cache: CacheSlot,
    /// Write intents of traced reconciles, sent to the welcomed leader outside the machine (see
    /// `write_intents`); dropped while no stream is welcomed.
    pub(crate) intents: WriteIntents,
}

/// One controller as the worker runs it.
pub(crate) struct ControllerSlot {
    pub(crate) controller: DynController,
    pub(crate) env: Arc<ControllerEnv>,
    pub(crate) metrics: ControllerMetrics,
}

/// How the worker is asked to stop.
#[derive(Clone)]
pub(crate) struct Stops {
    /// Stop taking items, drain, revoke the lease.
    pub(crate) graceful: CancellationToken,
    /// Stop at once, as if the process died: the lease expires on its own.
    pub(crate) kill: CancellationToken,
}

type Leaders = Pin<Box<dyn Stream<Item = Option<Leadership>> + Send>>;

/// Runs sessions until stopped.
pub(crate) async fn run(shared: Arc<Shared>, etcd: etcd_client::Client, stops: Stops) {
    let election = Election::new(etcd.clone(), shared.keys.election());
    let mut leaders: Leaders = Box::pin(election.observe());
    let concurrency = shared
        .controllers
        .iter()
        .map(|(name, c)| (name.clone(), c.controller.concurrency_limit()))
        .collect();
    // What outlives a session: the newest term known (in the ledger) and the leader.
    let mut ledger = Ledger::new(concurrency);
    let mut leader: Option<Leadership> = None;
    let record = RegistrationRecord::of(&shared);
    let journal = open_journal(&shared.config);
    loop {
        let Some(session) = start_session(&record, &shared, &etcd, &stops).await else {
            return;
        };
        let lease = session.lease_id();
        info!(lease = format_args!("{lease:x}"), "registered");
        let span = info_span!("session", lease = format_args!("{lease:x}"));
        // The registration is kept while the session runs, and stopped before a graceful shutdown
        // revokes the lease (which deletes the key) or the lease is lost.
        let keeper = session.lost().child_token();
        let metrics = shared.metrics.clone();
        tokio::spawn(
            record
                .clone()
                .keep(session.client().clone(), lease, keeper.clone(), move || {
                    metrics.registration_rewritten()
                })
                .instrument(span.clone()),
        );
        let machine = SessionMachine::new(
            Instant::now(),
            timing(&shared.config),
            hello(&shared, lease),
            ledger,
            leader,
            shared.health.clone(),
            shared.metrics.clone(),
        );
        let run = SessionRun::new(&shared, &session, &stops, journal.as_ref());
        let (end, machine) = run.run(machine, &mut leaders).instrument(span).await;
        (ledger, leader) = machine.into_carried();
        keeper.cancel();
        match end {
            End::Lost => {
                warn!("lease lost: cancelled every reconcile; starting a new session");
                drop(session);
            }
            End::Shutdown => {
                session.close().await;
                info!("lease revoked; worker stopped");
                return;
            }
            End::Killed => return,
        }
    }
}

/// The `--reconcile-journal` of `config`, opened; `None` without one or (logged) when it cannot be
/// opened: the journal observes reconciles and never stops the worker.
fn open_journal(config: &WorkerConfig) -> Option<Arc<ReconcileJournal>> {
    let path = config.reconcile_journal.as_deref()?;
    match ReconcileJournal::open(path) {
        Ok(journal) => Some(Arc::new(journal)),
        Err(err) => {
            tracing::error!(error = %err, "reconciles are not journalled");
            None
        }
    }
}

/// Starts a session and registers the worker on its lease, retrying until it works or the worker stops.
async fn start_session(
    record: &RegistrationRecord,
    shared: &Shared,
    etcd: &etcd_client::Client,
    stops: &Stops,
) -> Option<Session> {
    loop {
        let attempt = async {
            let session = Session::start(etcd.clone(), shared.config.session)
                .await
                .map_err(anyhow::Error::from)?;
            record.put(session.client(), session.lease_id()).await?;
            anyhow::Ok(session)
        };
        let result = tokio::select! {
            biased;
            () = stops.kill.cancelled() => return None,
            () = stops.graceful.cancelled() => return None,
            result = attempt => result,
        };
        match result {
            Ok(session) => return Some(session),
            Err(err) => {
                warn!(
                    error = format!("{err:#}"),
                    "cannot start a session; retrying"
                );
                tokio::select! {
                    biased;
                    () = stops.kill.cancelled() => return None,
                    () = stops.graceful.cancelled() => return None,
                    () = tokio::time::sleep(SESSION_RETRY) => {}
                }
            }
        }
    }
}

/// The pauses of `config` a session keeps.
fn timing(config: &WorkerConfig) -> Timing {
    Timing {
        reconnect_min: config.reconnect_min,
        reconnect_max: config.reconnect_max,
        shutdown_grace_period: config.shutdown_grace_period,
    }
}

/// The Hello of the session on `lease`: the worker and its controllers (the machine fills in the term
/// known and the items held at each connect).
fn hello(shared: &Shared, lease: i64) -> proto::Hello {
    proto::Hello {
        worker_id: shared.worker_id.to_string(),
        lease_id: lease,
        controllers: shared
            .controllers
            .values()
            .map(|c| proto::ControllerCapacity {
                spec: Some(wire::spec(c.controller.spec())),
                concurrency: c.controller.concurrency_limit(),
            })
            .collect(),
        known_term: 0,
        held: Vec::new(),
    }
}

/// One session's loop: the I/O around a [`SessionMachine`] (see the module documentation).
struct SessionRun<'a> {
    shared: &'a Arc<Shared>,
    session: &'a Session,
    stops: &'a Stops,
    journal: Option<&'a Arc<ReconcileJournal>>,
    /// Every reconcile of the session runs under a child of this token.
    reconciles: CancellationToken,
    /// Reconciles report here when they end. Its capacity is the worker's summed concurrency, a slot
    /// per reconcile that may run at once. Back-pressure: a finished reconcile whose report does not
    /// fit waits; this loop never waits on a reconcile (it spawns them and cancels them through a
    /// token), so that cannot deadlock, and when the session ends the receiver goes and they stop.
    finished_tx: mpsc::Sender<Finished>,
    finished_rx: mpsc::Receiver<Finished>,
    /// The stream to the leader; open exactly when the machine's stream is open.
    connection: Option<Connection>,
}

impl<'a> SessionRun<'a> {
    fn new(
        shared: &'a Arc<Shared>,
        session: &'a Session,
        stops: &'a Stops,
        journal: Option<&'a Arc<ReconcileJournal>>,
    ) -> Self {
        let concurrency: u64 = shared
            .controllers
            .values()
            .map(|c| u64::from(c.controller.concurrency_limit()))
            .sum();
        let capacity = usize::try_from(concurrency)
            .unwrap_or(usize::MAX)
            .clamp(1, 1 << 20);
        let (finished_tx, finished_rx) = mpsc::channel(capacity);
        Self {
            shared,
            session,
            stops,
            journal,
            reconciles: CancellationToken::new(),
            finished_tx,
            finished_rx,
            connection: None,
        }
    }

    /// Runs the session until the machine ends it; returns how, and the machine (for what outlives
    /// the session).
    async fn run(
        mut self,
        mut machine: SessionMachine,
        leaders: &mut Leaders,
    ) -> (End, SessionMachine) {
        let lost = self.session.lost();
        let stops = self.stops.clone();
        loop {
            let wake = machine.next_wake();
            let grace_over = machine.grace_deadline();
            let actions = tokio::select! {
                biased;
                () = stops.kill.cancelled() => machine.on_killed(),
                () = lost.cancelled() => machine.on_lease_lost(),
                () = stops.graceful.cancelled(), if !machine.is_draining() => {
                    machine.on_drain_requested(Instant::now())
                }
                () = sleep_until(grace_over) => machine.on_grace_over(),
                // Before the Dones: an intent must reach the leader before the write's echo can.
                () = self.shared.intents.ready() => {
                    self.send_intents(&machine);
                    Vec::new()
                }
                Some(finished) = self.finished_rx.recv() => machine.on_finished(Instant::now(), finished),
                message = next_message(&mut self.connection) => machine.on_message(Instant::now(), message),
                Some(leadership) = leaders.next() => machine.on_leader(Instant::now(), leadership),
                () = sleep_until(wake) => machine.on_wake(Instant::now()),
            };
            if let Some(end) = self.execute(&mut machine, actions).await {
                return (end, machine);
            }
        }
    }

    /// Sends the queued write intents to the welcomed leader, or drops them when none is: they bypass
    /// the machine, are advice the leader may ignore, and a failed send is the machine's to notice on
    /// its own next send.
    fn send_intents(&self, machine: &SessionMachine) {
        let messages = self.shared.intents.take();
        if let Some(connection) = self.connection.as_ref().filter(|_| machine.is_welcomed()) {
            for message in messages {
                if !connection.send(message) {
                    break;
                }
            }
        }
    }

    /// Carries out `actions` in order; the machine's answer to an action's outcome runs before the
    /// rest. Returns the end of the session when an action ends it.
    async fn execute(&mut self, machine: &mut SessionMachine, actions: Vec<Action>) -> Option<End> {
        let mut queue = VecDeque::from(actions);
        while let Some(action) = queue.pop_front() {
            let answer = match action {
                Action::Connect { address, hello } => self.connect(machine, &address, hello).await,
                Action::Send(messages) => {
                    let sent = self
                        .connection
                        .as_ref()
                        .is_some_and(|c| messages.into_iter().all(|m| c.send(m)));
                    if sent {
                        Vec::new()
                    } else {
                        machine.on_send_failed(Instant::now())
                    }
                }
                Action::UseLeaderCache => {
                    if let Some(connection) = &self.connection {
                        self.shared.cache.set(Arc::new(GrpcCache::new(
                            connection.channel.clone(),
                            self.shared.worker_id.clone(),
                            self.session.lease_id(),
                        )));
                    }
                    Vec::new()
                }
                Action::Disconnect => {
                    self.connection = None;
                    self.shared.cache.clear();
                    Vec::new()
                }
                Action::CloseGracefully => {
                    if let Some(connection) = self.connection.take() {
                        connection.close(CLOSE_TIMEOUT).await;
                    }
                    Vec::new()
                }
                Action::Spawn(item) => {
                    Reconciles {
                        shared: self.shared,
                        cancel: &self.reconciles,
                        finished: &self.finished_tx,
                        journal: self.journal,
                    }
                    .spawn(*item);
                    Vec::new()
                }
                Action::CancelReconciles => {
                    self.reconciles.cancel();
                    Vec::new()
                }
                Action::End(end) => return Some(end),
            };
            for action in answer.into_iter().rev() {
                queue.push_front(action);
            }
        }
        None
    }

    /// Opens a stream to `address`, watching only for the worker being killed or the lease being lost
    /// meanwhile; returns the machine's answer.
    async fn connect(
        &mut self,
        machine: &mut SessionMachine,
        address: &str,
        hello: proto::Hello,
    ) -> Vec<Action> {
        let lost = self.session.lost();
        let opened = tokio::select! {
            biased;
            () = self.stops.kill.cancelled() => return machine.on_killed(),
            () = lost.cancelled() => return machine.on_lease_lost(),
            opened = Connection::open(&self.shared.config.tls, address, hello, CONNECT_TIMEOUT) => opened,
        };
        match opened {
            Ok(connection) => {
                self.connection = Some(connection);
                machine.on_connected(address)
            }
            Err(err) => machine.on_connect_failed(Instant::now(), address, &err),
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn next_message(
    connection: &mut Option<Connection>,
) -> Result<Option<proto::CoordinatorMessage>, tonic::Status> {
    match connection {
        Some(connection) => connection.incoming.message().await,
        None => std::future::pending().await,
    }
}
