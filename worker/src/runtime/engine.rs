//! The worker's life cycle: a session (lease + registration) at a time; within it, follow the leader,
//! keep one Dispatch stream to it, run what it assigns, report what finished; self-fence the moment
//! the lease is in doubt.
//!
//! Items that finish while no stream is open are not reported later: they are simply no longer held,
//! so the next Hello does not list them, and the coordinator treats a key no longer held as finished
//! and requeues it. A duplicate reconcile is harmless (reconciles are idempotent); a lost Done would
//! instead keep the key blocked until the lease expires.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use flotilla_common::{
    Election, FleetKeys, Health, Leadership, Session, TRACE_TARGET, sample_new_trace,
};
use flotilla_proto as proto;
use flotilla_sdk::host::{CacheSlot, ControllerEnv, Outcome, WorkItem, Write, WriteJournal};
use flotilla_sdk::{Context, DynController};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::cache_client::GrpcCache;
use super::config::WorkerConfig;
use super::connection::Connection;
use super::ledger::{Admission, Assigned, Ledger};
use super::metrics::{ControllerMetrics, Metrics};
use super::outbox::{FLUSH_INTERVAL, Outbox};
use super::prefetch;
use super::reconcile_journal::{self, JournalEntry, ReconcileJournal};
use super::registration::RegistrationRecord;
use super::stream_health::StreamHealth;
use super::wire::{self, DoneOutcome};

/// The `reconcile` span of `item` on `worker`, of the given target (exported) or the default one.
macro_rules! reconcile_span {
    ($(target: $target:expr,)? parent: $parent:expr, $item:expr, $worker:expr) => {
        info_span!(
            $(target: $target,)?
            parent: $parent,
            "reconcile",
            controller = %$item.controller,
            key = %$item.key,
            shard = $item.shard,
            term = $item.term,
            worker = %$worker,
            attempt = $item.attempt,
            reason = %$item.reason,
            outcome = tracing::field::Empty,
        )
    };
}

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

/// How a session ended.
enum End {
    Lost,
    Shutdown,
    Killed,
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
        let mut run = SessionRun::new(&shared, &session, &stops, &mut ledger, &mut leader);
        run.journal = journal.clone();
        let end = run.run(&mut leaders).instrument(span).await;
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

/// A reconcile that ended on its own.
struct Finished {
    controller: String,
    key: String,
    term: u64,
    item_id: u64,
    outcome: DoneOutcome,
    writes: Vec<Write>,
}

struct LeaderStream {
    connection: Connection,
    welcomed: bool,
}

/// One session's loop; see the module documentation.
struct SessionRun<'a> {
    shared: &'a Arc<Shared>,
    session: &'a Session,
    stops: &'a Stops,
    ledger: &'a mut Ledger,
    leader: &'a mut Option<Leadership>,
    reconciles: CancellationToken,
    /// Reconciles report here when they end. Its capacity is the worker's summed concurrency, a slot
    /// per reconcile that may run at once. Back-pressure: a finished reconcile whose report does not
    /// fit waits; this loop never waits on a reconcile (it spawns them and cancels them through a
    /// token), so that cannot deadlock, and when the session ends the receiver goes and they stop.
    finished_tx: mpsc::Sender<Finished>,
    finished_rx: mpsc::Receiver<Finished>,
    stream: Option<LeaderStream>,
    rejected: HashSet<String>,
    outbox: Outbox,
    flush_at: Option<Instant>,
    reconnect_at: Option<Instant>,
    backoff: Duration,
    /// Set when a Welcome came with an older term than known: wait for etcd to show a newer leader.
    wait_newer_leader: bool,
    draining_until: Option<Instant>,
    /// Recent stream breaks: a stream breaking in a loop keeps the worker not ready.
    stream_health: StreamHealth,
    /// When a welcomed stream of a flapping worker has stayed up long enough to say ready.
    ready_at: Option<Instant>,
    /// `--reconcile-journal`: every reconcile's start and end.
    journal: Option<Arc<ReconcileJournal>>,
}

impl<'a> SessionRun<'a> {
    fn new(
        shared: &'a Arc<Shared>,
        session: &'a Session,
        stops: &'a Stops,
        ledger: &'a mut Ledger,
        leader: &'a mut Option<Leadership>,
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
        // A new session resumes the leader already known; with none, the leader stream says when.
        let reconnect_at = leader.is_some().then(Instant::now);
        Self {
            shared,
            session,
            stops,
            ledger,
            leader,
            reconciles: CancellationToken::new(),
            finished_tx,
            finished_rx,
            stream: None,
            rejected: HashSet::new(),
            outbox: Outbox::default(),
            flush_at: None,
            reconnect_at,
            backoff: shared.config.reconnect_min,
            wait_newer_leader: false,
            draining_until: None,
            stream_health: StreamHealth::default(),
            ready_at: None,
            journal: None,
        }
    }

    async fn run(mut self, leaders: &mut Leaders) -> End {
        let lost = self.session.lost();
        let stops = self.stops.clone();
        loop {
            if self.draining_until.is_some() && self.ledger.running() == 0 {
                self.close_stream().await;
                return End::Shutdown;
            }
            let reconnect_at = if self.stream.is_none() {
                self.reconnect_at
            } else {
                None
            };
            tokio::select! {
                biased;
                () = stops.kill.cancelled() => {
                    self.reconciles.cancel();
                    return End::Killed;
                }
                () = lost.cancelled() => {
                    self.fence();
                    return End::Lost;
                }
                () = stops.graceful.cancelled(), if self.draining_until.is_none() => self.start_draining(),
                () = sleep_until(self.draining_until) => {
                    warn!(running = self.ledger.running(), "grace period over; cancelling the remaining reconciles");
                    self.reconciles.cancel();
                    self.close_stream().await;
                    return End::Shutdown;
                }
                Some(finished) = self.finished_rx.recv() => self.on_finished(finished),
                message = next_message(&mut self.stream) => self.on_message(message),
                Some(leadership) = leaders.next() => self.on_leader(leadership),
                () = sleep_until(reconnect_at) => {
                    if let Some(end) = self.connect().await {
                        return end;
                    }
                }
                () = sleep_until(self.flush_at) => self.flush(),
                () = sleep_until(self.ready_at) => {
                    self.ready_at = None;
                    if self.stream.as_ref().is_some_and(|s| s.welcomed) && self.draining_until.is_none() {
                        self.shared.health.set_ready(true, "connected to the leader");
                    }
                }
            }
        }
    }

    fn on_leader(&mut self, leadership: Option<Leadership>) {
        let Some(leadership) = leadership else {
            if self.leader.take().is_some() {
                info!("no leader");
            }
            self.disconnect("no leader");
            self.reconnect_at = None;
            return;
        };
        if !self.ledger.observe_term(leadership.term) {
            warn!(
                term = leadership.term,
                known_term = self.ledger.known_term(),
                "ignoring a leader of an older term"
            );
            return;
        }
        if self.leader.as_ref() == Some(&leadership) {
            return;
        }
        info!(leader = %leadership.info.id, address = %leadership.info.address, term = leadership.term, "new leader");
        *self.leader = Some(leadership);
        self.disconnect("new leader");
        self.wait_newer_leader = false;
        self.backoff = self.shared.config.reconnect_min;
        self.reconnect_at = Some(Instant::now());
    }

    /// Opens a stream to the leader; `Some` when the session ended meanwhile.
    async fn connect(&mut self) -> Option<End> {
        self.reconnect_at = None;
        let leader = self.leader.clone()?;
        let hello = proto::Hello {
            worker_id: self.shared.worker_id.to_string(),
            lease_id: self.session.lease_id(),
            controllers: self
                .shared
                .controllers
                .values()
                .map(|c| proto::ControllerCapacity {
                    spec: Some(wire::spec(c.controller.spec())),
                    concurrency: c.controller.concurrency_limit(),
                })
                .collect(),
            known_term: self.ledger.known_term(),
            held: self.ledger.held(),
        };
        let lost = self.session.lost();
        let opened = tokio::select! {
            biased;
            () = self.stops.kill.cancelled() => {
                self.reconciles.cancel();
                return Some(End::Killed);
            }
            () = lost.cancelled() => {
                self.fence();
                return Some(End::Lost);
            }
            opened = Connection::open(
                &self.shared.config.tls,
                &leader.info.address,
                hello,
                CONNECT_TIMEOUT,
            ) => opened,
        };
        match opened {
            Ok(connection) => {
                debug!(address = %leader.info.address, "stream open; waiting for Welcome");
                self.stream = Some(LeaderStream {
                    connection,
                    welcomed: false,
                });
            }
            Err(err) => {
                warn!(address = %leader.info.address, error = %err, "cannot open a stream to the leader");
                self.schedule_reconnect();
            }
        }
        None
    }

    fn on_message(&mut self, message: Result<Option<proto::CoordinatorMessage>, tonic::Status>) {
        use proto::coordinator_message::Msg;
        match message {
            Ok(Some(proto::CoordinatorMessage {
                msg: Some(Msg::Welcome(welcome)),
            })) => self.on_welcome(welcome),
            Ok(Some(proto::CoordinatorMessage {
                msg: Some(Msg::Assign(batch)),
            })) => {
                if !self.stream.as_ref().is_some_and(|s| s.welcomed) {
                    warn!("the leader assigned items before Welcome; closing the stream");
                    self.stream_broke();
                    self.disconnect("protocol error");
                    self.schedule_reconnect();
                    return;
                }
                for item in batch.items {
                    self.admit(Assigned::from(item));
                }
            }
            Ok(Some(proto::CoordinatorMessage {
                msg: Some(Msg::Revoke(revoke)),
            })) => {
                debug!(shards = ?revoke.shards, "shards revoked");
            }
            Ok(Some(proto::CoordinatorMessage { msg: None })) => {
                debug!("ignoring an empty message")
            }
            Ok(None) => {
                info!("the leader closed the stream");
                self.stream_broke();
                self.disconnect("stream closed");
                self.schedule_reconnect();
            }
            Err(status) => {
                warn!(code = ?status.code(), message = status.message(), "stream to the leader broke");
                self.stream_broke();
                self.disconnect("stream broke");
                self.schedule_reconnect();
            }
        }
    }

    fn on_welcome(&mut self, welcome: proto::Welcome) {
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        if stream.welcomed {
            warn!("a second Welcome on one stream; ignoring it");
            return;
        }
        if !self.ledger.observe_term(welcome.term) {
            warn!(
                term = welcome.term,
                known_term = self.ledger.known_term(),
                "welcomed by a leader of an older term; waiting for a newer one"
            );
            self.disconnect("stale leader");
            self.wait_newer_leader = true;
            return;
        }
        stream.welcomed = true;
        self.shared.cache.set(Arc::new(GrpcCache::new(
            stream.connection.channel.clone(),
            self.shared.worker_id.clone(),
            self.session.lease_id(),
        )));
        self.rejected.clear();
        for rejected in welcome.rejected {
            warn!(controller = %rejected.controller, reason = %rejected.reason, "the coordinator refused a controller");
            self.rejected.insert(rejected.controller);
        }
        info!(leader = %welcome.leader_id, term = welcome.term, shards = welcome.shards.len(), "welcomed");
        self.backoff = self.shared.config.reconnect_min;
        let now = Instant::now();
        let ready_at = self.stream_health.ready_at(now);
        if ready_at <= now {
            self.shared
                .health
                .set_ready(true, "connected to the leader");
        } else {
            warn!(
                stable_for = ?ready_at - now,
                "the stream to the leader keeps breaking; not ready until it stays up"
            );
            self.shared
                .health
                .set_ready(false, "the stream to the leader keeps breaking");
            self.ready_at = Some(ready_at);
        }
        self.shared.metrics.set_connected(true);
        if self.draining_until.is_none() {
            for (controller, n) in self.ledger.initial_credits() {
                if !self.rejected.contains(&controller) {
                    self.outbox.credit(&controller, n);
                }
            }
        }
        self.flush();
    }

    fn admit(&mut self, item: Assigned) {
        let (controller, key, term) = (item.controller.clone(), item.key.clone(), item.term);
        match self.ledger.admit(item, self.draining_until.is_some()) {
            Admission::Start(item) => self.spawn(*item),
            Admission::Queued => {
                debug!(%controller, %key, "item waits for the running item of its key")
            }
            Admission::Refused(reason) => {
                self.shared.metrics.refused(reason.label());
                warn!(%controller, %key, term, known_term = self.ledger.known_term(), reason = reason.label(), "refused an item");
            }
        }
    }

    fn on_finished(&mut self, finished: Finished) {
        let Finished {
            controller,
            key,
            term,
            item_id,
            outcome,
            writes,
        } = finished;
        let (held, next) = self.ledger.finish(&controller, &key, term, item_id);
        if !held {
            return;
        }
        if let Some(stream) = &self.stream {
            // Before Welcome the Done waits in the outbox; the credit is then part of the initial grant.
            let welcomed = stream.welcomed;
            self.outbox.done(proto::Done {
                item_id,
                outcome: outcome.kind.into(),
                requeue_after_ms: outcome.requeue_after_ms,
                writes: writes.iter().map(wire::write).collect(),
                error: outcome.error,
                term,
            });
            if welcomed {
                if self.draining_until.is_none() && !self.rejected.contains(&controller) {
                    self.outbox.credit(&controller, 1);
                }
                if self.outbox.is_full() {
                    self.flush();
                } else if self.flush_at.is_none() {
                    self.flush_at = Some(Instant::now() + FLUSH_INTERVAL);
                }
            }
        }
        if let Some(next) = next {
            self.spawn(next);
        }
    }

    fn flush(&mut self) {
        self.flush_at = None;
        let Some(stream) = self.stream.as_ref().filter(|s| s.welcomed) else {
            return;
        };
        if self.outbox.is_empty() {
            return;
        }
        let sent = self
            .outbox
            .take()
            .into_iter()
            .all(|message| stream.connection.send(message));
        if !sent {
            self.disconnect("stream gone");
            self.schedule_reconnect();
        }
    }

    /// Sends what is pending and closes the stream politely (graceful shutdown).
    async fn close_stream(&mut self) {
        self.flush();
        if let Some(stream) = self.stream.take() {
            stream.connection.close(CLOSE_TIMEOUT).await;
        }
        self.disconnect("shutting down");
    }

    /// Counts a break of an open stream (see [`StreamHealth`]).
    fn stream_broke(&mut self) {
        self.stream_health.broke(Instant::now());
        self.shared.metrics.stream_broke();
    }

    fn disconnect(&mut self, reason: &str) {
        if self.stream.take().is_some() {
            debug!(reason, "stream to the leader closed");
        }
        self.ready_at = None;
        self.outbox.clear();
        self.flush_at = None;
        self.shared.cache.clear();
        self.shared.metrics.set_connected(false);
        if self.draining_until.is_none() {
            self.shared.health.set_ready(false, reason);
        }
    }

    fn schedule_reconnect(&mut self) {
        if self.wait_newer_leader || self.leader.is_none() {
            return;
        }
        self.reconnect_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(self.shared.config.reconnect_max);
    }

    fn fence(&mut self) {
        self.reconciles.cancel();
        self.ledger.clear();
        self.disconnect("lease lost");
        self.shared.metrics.fenced();
    }

    fn start_draining(&mut self) {
        self.outbox.drop_credits();
        let dropped = self.ledger.drop_waiting();
        info!(
            running = self.ledger.running(),
            dropped, "shutting down: no new items, draining"
        );
        self.draining_until = Some(Instant::now() + self.shared.config.shutdown_grace_period);
        self.shared.health.set_ready(false, "shutting down");
    }

    fn spawn(&self, item: Assigned) {
        let Some(slot) = self.shared.controllers.get(&item.controller) else {
            return;
        };
        // Exported — the child of the leader's dispatch span, or (a retry, a key the leader did not
        // trace) a root the sampler keeps — a reconcile is a span of the trace target with no `tracing`
        // parent: under this session's span every reconcile would join one endless trace. Otherwise it
        // is a log span under the session span, which the exporter never sees.
        let traced = item.trace.as_ref().is_some_and(|t| t.parent.is_some()) || sample_new_trace();
        let span = if traced {
            reconcile_span!(target: TRACE_TARGET, parent: None, item, self.shared.worker_id)
        } else {
            let parent = tracing::Span::current().id();
            reconcile_span!(parent: parent, item, self.shared.worker_id)
        };
        if let Some(trace) = &item.trace {
            if let Some(dispatch) = &trace.parent {
                dispatch.set_parent_of(&span);
            }
            for merged in &trace.links {
                merged.link_from(&span);
            }
        }
        // Written here, before the task is spawned: the start line is in the file before the
        // reconcile can run, and the end line once it ended or was cancelled.
        let mut journalled = self.journal.clone().map(|journal| {
            let entry = JournalEntry {
                key: item.key.clone(),
                controller: item.controller.clone(),
                worker: self.shared.worker_id.to_string(),
                start_ns: reconcile_journal::now_ns(),
                end_ns: 0,
                rv: reconcile_journal::resource_version(&item.object),
                reason: item.reason.to_string(),
            };
            journal.append(&entry);
            (journal, entry)
        });
        let cancel = self.reconciles.child_token();
        let journal = WriteJournal::default();
        // What the leader could not ship with the item is read through the cache first; the reconcile
        // then sees the same Context as if it had come with the item.
        let left_out = prefetch::complete(
            self.shared.cache.client(),
            item.object.clone(),
            item.prefetched,
            item.prefetch_from_cache,
        );
        let (env, controller, ctx_span, ctx_cancel, ctx_journal) = (
            slot.env.clone(),
            slot.controller.clone(),
            span.clone(),
            cancel.clone(),
            journal.clone(),
        );
        let work = WorkItem {
            key: item.key.clone(),
            object: item.object.clone(),
            attempt: item.attempt,
            reason: item.reason,
        };
        let run = async move {
            match left_out.await {
                Ok(prefetched) => {
                    let ctx = Context::new(env, ctx_journal, prefetched, ctx_span, ctx_cancel);
                    controller.run(work, ctx).await
                }
                Err(err) => Outcome::error(format!("{:#}", anyhow::Error::from(err))),
            }
        };
        let metrics = slot.metrics.clone();
        let finished_tx = self.finished_tx.clone();
        let (controller, key, term, item_id) = (item.controller, item.key, item.term, item.item_id);
        tokio::spawn(
            async move {
                metrics.started();
                let started = Instant::now();
                let outcome = tokio::select! {
                    biased;
                    () = cancel.cancelled() => None,
                    outcome = run => Some(DoneOutcome::from(outcome)),
                };
                if let Some((journal, entry)) = journalled.as_mut() {
                    entry.end_ns = reconcile_journal::now_ns();
                    journal.append(entry);
                }
                metrics.finished(
                    outcome.as_ref().map(DoneOutcome::label),
                    started.elapsed().as_secs_f64(),
                );
                tracing::Span::current().record(
                    "outcome",
                    outcome.as_ref().map_or("cancelled", DoneOutcome::label),
                );
                let Some(outcome) = outcome else {
                    debug!("reconcile cancelled");
                    return;
                };
                if !outcome.error.is_empty() {
                    warn!(error = %outcome.error, "reconcile failed");
                }
                let writes = journal.take();
                // A closed channel means the session ended; the item is no longer held by anyone here.
                let _ = finished_tx
                    .send(Finished {
                        controller,
                        key,
                        term,
                        item_id,
                        outcome,
                        writes,
                    })
                    .await;
            }
            .instrument(span),
        );
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn next_message(
    stream: &mut Option<LeaderStream>,
) -> Result<Option<proto::CoordinatorMessage>, tonic::Status> {
    match stream {
        Some(stream) => stream.connection.incoming.message().await,
        None => std::future::pending().await,
    }
}
