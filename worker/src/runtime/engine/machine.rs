//! The decisions of one session, apart from its I/O: which leader to follow, when to (re)connect and
//! how long to back off, what a Welcome grants, which assigned items start, what finished and when it
//! is reported, how a drain ends, and what fencing drops. [`SessionMachine`] never awaits and never
//! touches the network, etcd or a clock: each event handler takes `now` and returns the [`Action`]s
//! for the loop (`engine.rs`) to carry out, and [`SessionMachine::next_wake`] says when it wants to
//! be woken.
//!
//! The stream to the leader is in one of three states: closed (with perhaps a reconnect due),
//! opening (a `Connect` is out), or open (welcomed or waiting for its Welcome). Rules it keeps:
//! - Reconnects to the same leader back off from `reconnect_min`, doubling up to `reconnect_max`;
//!   a new leader or a Welcome resets the pause. No reconnect is scheduled without a leader, nor after
//!   a Welcome of an older term than known (it waits for etcd to show a newer leader).
//! - Dones of finished items and credits collect in the [`Outbox`] and go out every
//!   [`FLUSH_INTERVAL`] or as soon as a batch is full. Before Welcome they wait (the credits are then
//!   part of the initial grant). When the stream closes abruptly they are dropped, never sent on a
//!   later stream: the items are no longer held, so the next Hello does not list them and the
//!   coordinator requeues them (a duplicate reconcile is harmless; a Done reported to a leader that
//!   never assigned the item is not). A graceful close sends them first.
//! - A draining worker grants no credit and admits nothing, lets what runs finish, reports it, closes
//!   the stream politely and ends; when the grace period is over it cancels what still runs.
//! - A lost lease fences: every reconcile is cancelled and every held item forgotten (the newest term
//!   known is kept), and the session ends.

use std::collections::HashSet;
use std::time::Duration;

use flotilla_common::{Health, Leadership};
use flotilla_proto as proto;
use flotilla_sdk::host::Write;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::super::connection::ConnectError;
use super::super::ledger::{Admission, Assigned, Ledger};
use super::super::metrics::Metrics;
use super::super::outbox::{FLUSH_INTERVAL, Outbox};
use super::super::stream_health::StreamHealth;
use super::super::wire::{self, DoneOutcome};
use super::action::{Action, End};

#[cfg(test)]
mod tests;

/// The pauses a session keeps (from the worker's configuration).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// First pause before reconnecting to the same leader.
    pub(crate) reconnect_min: Duration,
    /// Longest pause between reconnect attempts.
    pub(crate) reconnect_max: Duration,
    /// How long a drain lets running reconciles finish before cancelling them.
    pub(crate) shutdown_grace_period: Duration,
}

/// A reconcile that ended on its own (a cancelled one reports nothing).
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) controller: String,
    pub(crate) key: String,
    pub(crate) term: u64,
    pub(crate) item_id: u64,
    pub(crate) outcome: DoneOutcome,
    pub(crate) writes: Vec<Write>,
}

/// The stream to the leader, as far as the decisions go (the loop holds the connection itself).
#[derive(Debug)]
enum Stream {
    /// No stream. `reconnect_at`: when to connect to the known leader; `None` waits for etcd to show
    /// a (newer) leader.
    Closed { reconnect_at: Option<Instant> },
    /// A `Connect` is out; the loop answers before anything else happens.
    Opening,
    /// Open: Hello was sent.
    Open(Open),
}

/// An open stream.
#[derive(Debug)]
struct Open {
    /// Whether the Welcome arrived: only then are Assigns taken and the outbox sent.
    welcomed: bool,
    /// When the outbox must go; set only while welcomed and something waits in it.
    flush_at: Option<Instant>,
    /// When a welcomed stream of a flapping worker has stayed up long enough to say ready.
    ready_at: Option<Instant>,
}

/// See the module documentation.
pub(crate) struct SessionMachine {
    timing: Timing,
    /// Hello as every stream of this session opens: worker, lease, controllers. The newest term known
    /// and the held items are filled in at each connect.
    hello: proto::Hello,
    /// Outlives the session (see [`SessionMachine::into_carried`]).
    ledger: Ledger,
    /// The leader etcd shows; outlives the session. Only replaced by a leader of a term no older.
    leader: Option<Leadership>,
    health: Health,
    metrics: Metrics,
    stream: Stream,
    /// Controllers the welcoming leader refused: they get no credit.
    rejected: HashSet<String>,
    /// Empty whenever the stream is not open.
    outbox: Outbox,
    /// The pause before the next reconnect to the same leader.
    backoff: Duration,
    /// Set when a Welcome came with an older term than known: wait for etcd to show a newer leader.
    wait_newer_leader: bool,
    /// Set once a graceful shutdown began: when its grace period is over. Never unset.
    draining_until: Option<Instant>,
    /// Recent stream breaks: a stream breaking in a loop keeps the worker not ready.
    stream_health: StreamHealth,
    /// What the handler being run decided.
    actions: Vec<Action>,
}

impl SessionMachine {
    /// A new session's state at `now`, resuming `ledger` and `leader` from the previous session: with
    /// a leader known it connects at once; without, etcd's leader watch says when. `hello` is the
    /// session's Hello (its `known_term` and `held` are filled in at each connect).
    pub(crate) fn new(
        now: Instant,
        timing: Timing,
        hello: proto::Hello,
        ledger: Ledger,
        leader: Option<Leadership>,
        health: Health,
        metrics: Metrics,
    ) -> Self {
        let reconnect_at = leader.is_some().then_some(now);
        Self {
            timing,
            hello,
            ledger,
            leader,
            health,
            metrics,
            stream: Stream::Closed { reconnect_at },
            rejected: HashSet::new(),
            outbox: Outbox::default(),
            backoff: timing.reconnect_min,
            wait_newer_leader: false,
            draining_until: None,
            stream_health: StreamHealth::default(),
            actions: Vec::new(),
        }
    }

    /// What outlives the session: the ledger (the newest term known, and whatever is still held) and
    /// the leader known.
    pub(crate) fn into_carried(self) -> (Ledger, Option<Leadership>) {
        (self.ledger, self.leader)
    }

    /// When [`on_wake`](Self::on_wake) is due: a reconnect, a flush of the outbox, or a flapping
    /// stream's readiness; `None` when nothing is timed.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        match &self.stream {
            Stream::Closed { reconnect_at } => *reconnect_at,
            Stream::Opening => None,
            Stream::Open(open) => match (open.flush_at, open.ready_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// When the grace period of a drain is over ([`on_grace_over`](Self::on_grace_over)); `None`
    /// while not draining.
    pub(crate) fn grace_deadline(&self) -> Option<Instant> {
        self.draining_until
    }

    /// Whether a graceful shutdown began.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining_until.is_some()
    }

    /// Whether the stream is open and welcomed: only then may messages outside the machine (write
    /// intents) be sent on it.
    pub(crate) fn is_welcomed(&self) -> bool {
        self.welcomed()
    }

    fn take(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    // === events ===

    /// etcd shows `leadership` (`None`: no leader).
    pub(crate) fn on_leader(
        &mut self,
        now: Instant,
        leadership: Option<Leadership>,
    ) -> Vec<Action> {
        let Some(leadership) = leadership else {
            if self.leader.take().is_some() {
                info!("no leader");
            }
            self.disconnect("no leader");
            self.stream = Stream::Closed { reconnect_at: None };
            return self.take();
        };
        if !self.ledger.observe_term(leadership.term) {
            warn!(
                term = leadership.term,
                known_term = self.ledger.known_term(),
                "ignoring a leader of an older term"
            );
            return self.take();
        }
        if self.leader.as_ref() == Some(&leadership) {
            return self.take();
        }
        info!(leader = %leadership.info.id, address = %leadership.info.address, term = leadership.term, "new leader");
        self.leader = Some(leadership);
        self.disconnect("new leader");
        self.wait_newer_leader = false;
        self.backoff = self.timing.reconnect_min;
        self.stream = Stream::Closed {
            reconnect_at: Some(now),
        };
        self.take()
    }

    /// The time from [`next_wake`](Self::next_wake) came: reconnects, flushes, or says ready,
    /// whichever is due.
    pub(crate) fn on_wake(&mut self, now: Instant) -> Vec<Action> {
        match &mut self.stream {
            Stream::Closed {
                reconnect_at: Some(at),
            } if *at <= now => self.connect(),
            Stream::Open(open) => {
                if open.flush_at.is_some_and(|at| at <= now) {
                    self.flush();
                }
                if let Stream::Open(open) = &mut self.stream
                    && open.ready_at.is_some_and(|at| at <= now)
                {
                    open.ready_at = None;
                    if open.welcomed && self.draining_until.is_none() {
                        self.health.set_ready(true, "connected to the leader");
                    }
                }
            }
            _ => {}
        }
        self.take()
    }

    /// The stream asked for by `Connect` is open (Hello sent); the Welcome comes next.
    pub(crate) fn on_connected(&mut self, address: &str) -> Vec<Action> {
        debug!(address, "stream open; waiting for Welcome");
        self.stream = Stream::Open(Open {
            welcomed: false,
            flush_at: None,
            ready_at: None,
        });
        self.take()
    }

    /// The stream asked for by `Connect` could not be opened.
    pub(crate) fn on_connect_failed(
        &mut self,
        now: Instant,
        address: &str,
        error: &ConnectError,
    ) -> Vec<Action> {
        warn!(address, error = %error, "cannot open a stream to the leader");
        self.stream = Stream::Closed { reconnect_at: None };
        self.schedule_reconnect(now);
        self.take()
    }

    /// The open stream delivered `message` (`Ok(None)`: the leader ended it; `Err`: it broke).
    pub(crate) fn on_message(
        &mut self,
        now: Instant,
        message: Result<Option<proto::CoordinatorMessage>, tonic::Status>,
    ) -> Vec<Action> {
        use proto::coordinator_message::Msg;
        match message {
            Ok(Some(proto::CoordinatorMessage {
                msg: Some(Msg::Welcome(welcome)),
            })) => self.on_welcome(now, welcome),
            Ok(Some(proto::CoordinatorMessage {
                msg: Some(Msg::Assign(batch)),
            })) => {
                if !self.welcomed() {
                    warn!("the leader assigned items before Welcome; closing the stream");
                    self.stream_broke(now);
                    self.disconnect("protocol error");
                    self.schedule_reconnect(now);
                } else {
                    for item in batch.items {
                        self.admit(Assigned::from(item));
                    }
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
                self.stream_broke(now);
                self.disconnect("stream closed");
                self.schedule_reconnect(now);
            }
            Err(status) => {
                warn!(code = ?status.code(), message = status.message(), "stream to the leader broke");
                self.stream_broke(now);
                self.disconnect("stream broke");
                self.schedule_reconnect(now);
            }
        }
        self.take()
    }

    /// A reconcile this session started ended on its own.
    pub(crate) fn on_finished(&mut self, now: Instant, finished: Finished) -> Vec<Action> {
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
            return self.take();
        }
        if let Stream::Open(open) = &mut self.stream {
            // Before Welcome the Done waits in the outbox; the credit is then part of the initial grant.
            self.outbox.done(proto::Done {
                item_id,
                outcome: outcome.kind.into(),
                requeue_after_ms: outcome.requeue_after_ms,
                writes: writes.iter().map(wire::write).collect(),
                error: outcome.error,
                term,
            });
            if open.welcomed {
                if self.draining_until.is_none() && !self.rejected.contains(&controller) {
                    self.outbox.credit(&controller, 1);
                }
                if self.outbox.is_full() {
                    self.flush();
                } else if open.flush_at.is_none() {
                    open.flush_at = Some(now + FLUSH_INTERVAL);
                }
            }
        }
        if let Some(next) = next {
            self.actions.push(Action::Spawn(Box::new(next)));
        }
        self.end_if_drained();
        self.take()
    }

    /// A `Send` found the stream gone.
    pub(crate) fn on_send_failed(&mut self, now: Instant) -> Vec<Action> {
        self.disconnect("stream gone");
        self.schedule_reconnect(now);
        self.take()
    }

    /// A graceful shutdown was asked for: admit nothing more, drain, end.
    pub(crate) fn on_drain_requested(&mut self, now: Instant) -> Vec<Action> {
        if self.draining_until.is_some() {
            return self.take();
        }
        self.outbox.drop_credits();
        let dropped = self.ledger.drop_waiting();
        info!(
            running = self.ledger.running(),
            dropped, "shutting down: no new items, draining"
        );
        self.draining_until = Some(now + self.timing.shutdown_grace_period);
        self.health.set_ready(false, "shutting down");
        self.end_if_drained();
        self.take()
    }

    /// The drain's grace period is over: cancel what still runs, report what finished, end.
    pub(crate) fn on_grace_over(&mut self) -> Vec<Action> {
        warn!(
            running = self.ledger.running(),
            "grace period over; cancelling the remaining reconciles"
        );
        self.actions.push(Action::CancelReconciles);
        self.close_stream();
        self.actions.push(Action::End(End::Shutdown));
        self.take()
    }

    /// The lease is in doubt: fence and end.
    pub(crate) fn on_lease_lost(&mut self) -> Vec<Action> {
        self.actions.push(Action::CancelReconciles);
        self.ledger.clear();
        self.disconnect("lease lost");
        self.metrics.fenced();
        self.actions.push(Action::End(End::Lost));
        self.take()
    }

    /// The worker is killed: stop at once, report nothing.
    pub(crate) fn on_killed(&mut self) -> Vec<Action> {
        self.actions.push(Action::CancelReconciles);
        self.actions.push(Action::End(End::Killed));
        self.take()
    }

    // === decisions ===

    fn welcomed(&self) -> bool {
        matches!(&self.stream, Stream::Open(open) if open.welcomed)
    }

    fn connect(&mut self) {
        self.stream = Stream::Closed { reconnect_at: None };
        let Some(leader) = &self.leader else {
            return;
        };
        let hello = proto::Hello {
            known_term: self.ledger.known_term(),
            held: self.ledger.held(),
            ..self.hello.clone()
        };
        self.actions.push(Action::Connect {
            address: leader.info.address.clone(),
            hello,
        });
        self.stream = Stream::Opening;
    }

    fn on_welcome(&mut self, now: Instant, welcome: proto::Welcome) {
        let Stream::Open(open) = &self.stream else {
            return;
        };
        if open.welcomed {
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
        self.actions.push(Action::UseLeaderCache);
        self.rejected.clear();
        for rejected in welcome.rejected {
            warn!(controller = %rejected.controller, reason = %rejected.reason, "the coordinator refused a controller");
            self.rejected.insert(rejected.controller);
        }
        info!(leader = %welcome.leader_id, term = welcome.term, shards = welcome.shards.len(), "welcomed");
        self.backoff = self.timing.reconnect_min;
        let ready_at = self.stream_health.ready_at(now);
        let ready_at = if ready_at <= now {
            self.health.set_ready(true, "connected to the leader");
            None
        } else {
            warn!(
                stable_for = ?ready_at - now,
                "the stream to the leader keeps breaking; not ready until it stays up"
            );
            self.health
                .set_ready(false, "the stream to the leader keeps breaking");
            Some(ready_at)
        };
        self.stream = Stream::Open(Open {
            welcomed: true,
            flush_at: None,
            ready_at,
        });
        self.metrics.set_connected(true);
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
            Admission::Start(item) => self.actions.push(Action::Spawn(item)),
            Admission::Queued => {
                debug!(%controller, %key, "item waits for the running item of its key")
            }
            Admission::Refused(reason) => {
                self.metrics.refused(reason.label());
                warn!(%controller, %key, term, known_term = self.ledger.known_term(), reason = reason.label(), "refused an item");
            }
        }
    }

    /// Sends what the outbox holds, if the stream is welcomed.
    fn flush(&mut self) {
        let Stream::Open(open) = &mut self.stream else {
            return;
        };
        open.flush_at = None;
        if !open.welcomed || self.outbox.is_empty() {
            return;
        }
        self.actions.push(Action::Send(self.outbox.take()));
    }

    /// A draining worker whose last reconcile ended closes the stream and ends.
    fn end_if_drained(&mut self) {
        if self.draining_until.is_some() && self.ledger.running() == 0 {
            self.close_stream();
            self.actions.push(Action::End(End::Shutdown));
        }
    }

    /// Sends what is pending and closes the stream politely (graceful shutdown).
    fn close_stream(&mut self) {
        self.flush();
        if !matches!(self.stream, Stream::Closed { .. }) {
            self.actions.push(Action::CloseGracefully);
        }
        self.disconnect("shutting down");
    }

    /// Counts a break of an open stream (see [`StreamHealth`]).
    fn stream_broke(&mut self, now: Instant) {
        self.stream_health.broke(now);
        self.metrics.stream_broke();
    }

    /// Closes the stream, if any, dropping what was not sent; a pending reconnect stays due.
    fn disconnect(&mut self, reason: &str) {
        if !matches!(self.stream, Stream::Closed { .. }) {
            debug!(reason, "stream to the leader closed");
            self.stream = Stream::Closed { reconnect_at: None };
        }
        self.actions.push(Action::Disconnect);
        self.outbox.clear();
        self.metrics.set_connected(false);
        if self.draining_until.is_none() {
            self.health.set_ready(false, reason);
        }
    }

    /// Reconnects to the same leader after the current pause, and doubles the pause.
    fn schedule_reconnect(&mut self, now: Instant) {
        if self.wait_newer_leader || self.leader.is_none() {
            return;
        }
        self.stream = Stream::Closed {
            reconnect_at: Some(now + self.backoff),
        };
        self.backoff = (self.backoff * 2).min(self.timing.reconnect_max);
    }

    /// Checks the invariants the fields' documentation states; panics (tests only) when one is broken.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        match &self.stream {
            Stream::Open(open) => {
                assert!(
                    open.welcomed || (open.flush_at.is_none() && open.ready_at.is_none()),
                    "timers of a stream not welcomed: {open:?}"
                );
            }
            Stream::Closed { .. } | Stream::Opening => {
                assert!(self.outbox.is_empty(), "an outbox without an open stream");
            }
        }
        if self.leader.is_none() {
            assert!(
                matches!(self.stream, Stream::Closed { reconnect_at: None }),
                "a stream or reconnect without a leader: {:?}",
                self.stream
            );
        }
        if self.wait_newer_leader {
            assert!(
                !matches!(
                    self.stream,
                    Stream::Closed {
                        reconnect_at: Some(_)
                    }
                ),
                "a reconnect to a leader of an older term"
            );
        }
        assert!(
            self.backoff >= self.timing.reconnect_min.min(self.timing.reconnect_max)
                && self.backoff <= self.timing.reconnect_max.max(self.timing.reconnect_min),
            "backoff {:?} out of bounds",
            self.backoff
        );
    }
}
