//! Unit tests of the session's state machine on paused time, without etcd or gRPC: the tests play the
//! loop (they carry out nothing, they read the actions) and the leader (Welcome, Assign, a broken
//! stream). The machine's invariants are checked after every step.

use std::collections::HashMap;

use flotilla_common::LeaderInfo;
use prometheus_client::registry::Registry;

use super::super::super::outbox::MAX_BATCH;
use super::super::super::stream_health::STABLE;
use super::*;

const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);
const GRACE: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn leader(id: &str, term: u64) -> Leadership {
    Leadership {
        info: LeaderInfo {
            id: id.into(),
            address: format!("{id}:9443"),
        },
        term,
    }
}

/// A machine, its health as `/readyz` reads it, and steps that check the invariants after each.
struct Harness {
    m: SessionMachine,
    health: Health,
}

impl Harness {
    /// A session of a worker running `journal` (concurrency 2) and `one-child` (1).
    fn new(leader: Option<Leadership>) -> Self {
        Self::with(&[("journal", 2), ("one-child", 1)], leader)
    }

    /// A session resuming `leader`, whose term an earlier session saw.
    fn with(concurrency: &[(&str, u32)], leader: Option<Leadership>) -> Self {
        let mut ledger = Ledger::new(
            concurrency
                .iter()
                .map(|(c, n)| ((*c).to_owned(), *n))
                .collect::<HashMap<_, _>>(),
        );
        if let Some(leader) = &leader {
            ledger.observe_term(leader.term);
        }
        Self::resume(ledger, leader)
    }

    fn resume(ledger: Ledger, leader: Option<Leadership>) -> Self {
        let health = Health::new();
        let timing = Timing {
            reconnect_min: RECONNECT_MIN,
            reconnect_max: RECONNECT_MAX,
            shutdown_grace_period: GRACE,
        };
        let hello = proto::Hello {
            worker_id: "w1".into(),
            lease_id: 7,
            ..Default::default()
        };
        let metrics = Metrics::register(&mut Registry::default());
        let m = SessionMachine::new(
            Instant::now(),
            timing,
            hello,
            ledger,
            leader,
            health.clone(),
            metrics,
        );
        m.check();
        Self { m, health }
    }

    fn step(&mut self, f: impl FnOnce(&mut SessionMachine, Instant) -> Vec<Action>) -> Vec<Action> {
        let actions = f(&mut self.m, Instant::now());
        self.m.check();
        actions
    }

    /// Advances the clock to the machine's wake-up time and wakes it.
    async fn wake(&mut self) -> Vec<Action> {
        let at = self.m.next_wake().expect("the machine asked to be woken");
        tokio::time::advance(at.saturating_duration_since(Instant::now())).await;
        self.step(|m, now| m.on_wake(now))
    }

    /// Wakes the machine for its reconnect; returns where it connects and its Hello.
    async fn reconnect(&mut self) -> (String, proto::Hello) {
        let actions = self.wake().await;
        connect_of(&actions).expect("a reconnect was due")
    }

    fn connected(&mut self, address: &str) {
        let actions = self.step(|m, _| m.on_connected(address));
        assert!(actions.is_empty(), "{actions:?}");
    }

    fn message(&mut self, msg: proto::coordinator_message::Msg) -> Vec<Action> {
        self.step(|m, now| {
            m.on_message(now, Ok(Some(proto::CoordinatorMessage { msg: Some(msg) })))
        })
    }

    fn welcome(&mut self, term: u64) -> Vec<Action> {
        self.message(proto::coordinator_message::Msg::Welcome(proto::Welcome {
            term,
            leader_id: "a".into(),
            ..Default::default()
        }))
    }

    /// Reconnects, opens the stream and is welcomed by a leader of `term`.
    async fn join(&mut self, term: u64) -> Vec<Action> {
        let (address, _) = self.reconnect().await;
        self.connected(&address);
        self.welcome(term)
    }

    fn assign(&mut self, items: &[(u64, u64, &str, &str)]) -> Vec<Action> {
        let items = items
            .iter()
            .map(|&(item_id, term, controller, key)| proto::Assign {
                item_id,
                term,
                controller: controller.into(),
                key: key.into(),
                ..Default::default()
            })
            .collect();
        self.message(proto::coordinator_message::Msg::Assign(
            proto::AssignBatch { items },
        ))
    }

    fn finish(&mut self, item_id: u64, term: u64, controller: &str, key: &str) -> Vec<Action> {
        let finished = Finished {
            controller: controller.into(),
            key: key.into(),
            term,
            item_id,
            outcome: DoneOutcome {
                kind: proto::Outcome::Success,
                requeue_after_ms: 0,
                error: String::new(),
            },
            writes: Vec::new(),
        };
        self.step(|m, now| m.on_finished(now, finished))
    }

    fn broke(&mut self) -> Vec<Action> {
        self.step(|m, now| m.on_message(now, Err(tonic::Status::unavailable("reset"))))
    }
}

fn connect_of(actions: &[Action]) -> Option<(String, proto::Hello)> {
    actions.iter().find_map(|a| match a {
        Action::Connect { address, hello } => Some((address.clone(), hello.clone())),
        _ => None,
    })
}

fn sent(actions: &[Action]) -> Vec<&proto::WorkerMessage> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(messages) => Some(messages),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The item ids of the Dones sent, in order.
fn dones(actions: &[Action]) -> Vec<u64> {
    sent(actions)
        .into_iter()
        .filter_map(|m| match &m.msg {
            Some(proto::worker_message::Msg::Done(batch)) => Some(batch.items.iter()),
            _ => None,
        })
        .flatten()
        .map(|d| d.item_id)
        .collect()
}

/// The credits sent, by controller.
fn credits(actions: &[Action]) -> Vec<(String, u32)> {
    sent(actions)
        .into_iter()
        .filter_map(|m| match &m.msg {
            Some(proto::worker_message::Msg::Credit(c)) => Some((c.controller.clone(), c.n)),
            _ => None,
        })
        .collect()
}

fn spawned(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Spawn(item) => Some(item.item_id),
            _ => None,
        })
        .collect()
}

fn end_of(actions: &[Action]) -> Option<End> {
    actions.iter().find_map(|a| match a {
        Action::End(end) => Some(*end),
        _ => None,
    })
}

fn disconnects(actions: &[Action]) -> bool {
    actions.iter().any(|a| matches!(a, Action::Disconnect))
}

fn position(actions: &[Action], f: impl Fn(&Action) -> bool) -> usize {
    actions
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("missing from {actions:?}"))
}

/// (item id, term) of each held item a Hello lists, sorted.
fn held(hello: &proto::Hello) -> Vec<(u64, u64)> {
    let mut held: Vec<_> = hello.held.iter().map(|h| (h.item_id, h.term)).collect();
    held.sort_unstable();
    held
}

// === connecting and backoff ===

#[tokio::test(start_paused = true)]
async fn a_session_resuming_a_known_leader_connects_at_once_and_backs_off_after_failures() {
    let mut h = Harness::new(Some(leader("a", 5)));
    assert_eq!(h.m.next_wake(), Some(Instant::now()), "connects at once");
    for pause in [100, 200, 400, 800, 1600, 2000, 2000] {
        let (address, hello) = h.reconnect().await;
        assert_eq!(address, "a:9443");
        assert_eq!((hello.worker_id.as_str(), hello.lease_id), ("w1", 7));
        assert_eq!(hello.known_term, 5, "the term of the leader etcd showed");
        assert_eq!(
            h.m.next_wake(),
            None,
            "nothing is timed while a stream opens"
        );
        let failed = h.step(|m, now| m.on_connect_failed(now, &address, &ConnectError::Timeout));
        assert!(connect_of(&failed).is_none());
        assert_eq!(h.m.next_wake(), Some(Instant::now() + ms(pause)));
        assert!(!h.health.is_ready());
    }
    // A Welcome resets the pause: the next break reconnects after the shortest one.
    let (address, _) = h.reconnect().await;
    h.connected(&address);
    h.welcome(5);
    assert!(h.health.is_ready());
    let broke = h.broke();
    assert!(disconnects(&broke));
    assert!(!h.health.is_ready());
    assert_eq!(h.m.next_wake(), Some(Instant::now() + RECONNECT_MIN));
}

#[tokio::test(start_paused = true)]
async fn a_session_without_a_leader_waits_for_etcd_to_show_one() {
    let mut h = Harness::new(None);
    assert_eq!(h.m.next_wake(), None);
    h.step(|m, now| m.on_leader(now, None));
    assert_eq!(h.m.next_wake(), None, "no leader, nothing to connect to");
    h.step(|m, now| m.on_leader(now, Some(leader("b", 3))));
    assert_eq!(h.m.next_wake(), Some(Instant::now()));
    let (address, hello) = h.reconnect().await;
    assert_eq!((address.as_str(), hello.known_term), ("b:9443", 3));
}

#[tokio::test(start_paused = true)]
async fn losing_the_leader_closes_the_stream_and_schedules_no_reconnect() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    let actions = h.step(|m, now| m.on_leader(now, None));
    assert!(disconnects(&actions));
    assert!(!h.health.is_ready());
    assert_eq!(h.m.next_wake(), None);
    // A failed send of a stream already gone does not reconnect to no leader either.
    h.step(|m, now| m.on_send_failed(now));
    assert_eq!(h.m.next_wake(), None);
}

// === Welcome ===

#[tokio::test(start_paused = true)]
async fn a_welcome_shares_the_leaders_cache_grants_each_controllers_concurrency_and_says_ready() {
    let mut h = Harness::new(Some(leader("a", 5)));
    let (address, _) = h.reconnect().await;
    h.connected(&address);
    assert!(!h.health.is_ready(), "an open stream is not a welcome");
    let actions = h.welcome(5);
    let cache = position(&actions, |a| matches!(a, Action::UseLeaderCache));
    let send = position(&actions, |a| matches!(a, Action::Send(_)));
    assert!(cache < send);
    assert_eq!(
        credits(&actions),
        [("journal".to_owned(), 2), ("one-child".to_owned(), 1)]
    );
    assert!(h.health.is_ready());
    // A second Welcome on the same stream grants nothing more.
    assert!(h.welcome(5).is_empty());
}

#[tokio::test(start_paused = true)]
async fn controllers_the_leader_rejected_get_no_credit() {
    let mut h = Harness::new(Some(leader("a", 5)));
    let (address, _) = h.reconnect().await;
    h.connected(&address);
    let actions = h.message(proto::coordinator_message::Msg::Welcome(proto::Welcome {
        term: 5,
        rejected: vec![proto::Rejected {
            controller: "one-child".into(),
            reason: "unknown kind".into(),
        }],
        ..Default::default()
    }));
    assert_eq!(credits(&actions), [("journal".to_owned(), 2)]);
}

#[tokio::test(start_paused = true)]
async fn a_welcome_of_an_older_term_than_known_is_refused_until_a_newer_leader_shows() {
    let mut h = Harness::new(Some(leader("a", 5)));
    let (address, _) = h.reconnect().await;
    h.connected(&address);
    let actions = h.welcome(4);
    assert!(disconnects(&actions));
    assert!(
        !actions.iter().any(|a| matches!(a, Action::UseLeaderCache)),
        "{actions:?}"
    );
    assert!(sent(&actions).is_empty(), "no credit for a stale leader");
    assert!(!h.health.is_ready());
    assert_eq!(h.m.next_wake(), None, "no reconnect to the stale leader");
    h.step(|m, now| m.on_leader(now, Some(leader("a", 5))));
    assert_eq!(
        h.m.next_wake(),
        None,
        "the same leader again changes nothing"
    );
    h.step(|m, now| m.on_leader(now, Some(leader("b", 6))));
    let (address, hello) = h.reconnect().await;
    assert_eq!((address.as_str(), hello.known_term), ("b:9443", 6));
}

#[tokio::test(start_paused = true)]
async fn items_assigned_before_welcome_break_the_stream() {
    let mut h = Harness::new(Some(leader("a", 5)));
    let (address, _) = h.reconnect().await;
    h.connected(&address);
    let actions = h.assign(&[(1, 5, "journal", "ns/a")]);
    assert!(spawned(&actions).is_empty());
    assert!(disconnects(&actions));
    assert_eq!(h.m.next_wake(), Some(Instant::now() + RECONNECT_MIN));
    let (_, hello) = h.reconnect().await;
    assert!(hello.held.is_empty(), "the early item was never taken");
}

// === leader changes ===

#[tokio::test(start_paused = true)]
async fn a_leader_change_mid_stream_reconnects_to_the_new_leader_reporting_held_items() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    let actions = h.assign(&[
        (1, 5, "journal", "ns/a"),
        (2, 5, "journal", "ns/b"),
        (3, 5, "journal", "ns/a"),
    ]);
    assert_eq!(spawned(&actions), [1, 2], "3 waits for 1, of the same key");
    let actions = h.finish(2, 5, "journal", "ns/b");
    assert!(sent(&actions).is_empty(), "the Done waits for the flush");
    let actions = h.step(|m, now| m.on_leader(now, Some(leader("b", 6))));
    assert!(disconnects(&actions));
    assert!(sent(&actions).is_empty(), "nothing goes to the old leader");
    assert_eq!(h.m.next_wake(), Some(Instant::now()), "reconnects at once");
    let (address, hello) = h.reconnect().await;
    assert_eq!(address, "b:9443");
    assert_eq!(hello.known_term, 6);
    assert_eq!(held(&hello), [(1, 5), (3, 5)], "running and waiting items");
    h.connected(&address);
    let actions = h.welcome(6);
    assert!(dones(&actions).is_empty(), "item 2 is not reported to b");
    assert_eq!(credits(&actions), [("one-child".to_owned(), 1)]);
}

#[tokio::test(start_paused = true)]
async fn a_leader_of_an_older_term_seen_in_etcd_is_ignored() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    let actions = h.step(|m, now| m.on_leader(now, Some(leader("old", 4))));
    assert!(actions.is_empty(), "{actions:?}");
    assert!(h.health.is_ready());
    h.assign(&[(1, 5, "journal", "ns/a")]);
    h.finish(1, 5, "journal", "ns/a");
    assert_eq!(dones(&h.wake().await), [1], "the stream to a still reports");
}

// === Done batching ===

#[tokio::test(start_paused = true)]
async fn dones_are_batched_until_the_flush_interval_and_return_their_credits() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    h.assign(&[(1, 5, "journal", "ns/a"), (2, 5, "one-child", "ns/b")]);
    let finished_at = Instant::now();
    assert!(sent(&h.finish(1, 5, "journal", "ns/a")).is_empty());
    tokio::time::advance(FLUSH_INTERVAL / 2).await;
    assert!(sent(&h.finish(2, 5, "one-child", "ns/b")).is_empty());
    assert_eq!(
        h.m.next_wake(),
        Some(finished_at + FLUSH_INTERVAL),
        "the first Done sets the deadline"
    );
    let actions = h.wake().await;
    assert_eq!(dones(&actions), [1, 2], "one batch");
    assert_eq!(
        credits(&actions),
        [("journal".to_owned(), 1), ("one-child".to_owned(), 1)]
    );
    assert_eq!(h.m.next_wake(), None);
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_goes_at_once() {
    let n = u64::try_from(MAX_BATCH).expect("small");
    let mut h = Harness::with(&[("journal", 1000)], Some(leader("a", 5)));
    h.join(5).await;
    let items: Vec<_> = (1..=n).map(|i| (i, format!("ns/{i}"))).collect();
    let assign: Vec<_> = items
        .iter()
        .map(|(i, k)| (*i, 5, "journal", k.as_str()))
        .collect();
    assert_eq!(spawned(&h.assign(&assign)).len(), MAX_BATCH);
    for (i, key) in &items[..MAX_BATCH - 1] {
        assert!(sent(&h.finish(*i, 5, "journal", key)).is_empty());
    }
    let (last, key) = &items[MAX_BATCH - 1];
    let actions = h.finish(*last, 5, "journal", key);
    assert_eq!(dones(&actions).len(), MAX_BATCH, "sent without waiting");
    assert_eq!(h.m.next_wake(), None, "nothing left to flush");
}

#[tokio::test(start_paused = true)]
async fn dones_of_items_finished_before_welcome_go_with_the_welcome_and_the_initial_grant() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    h.assign(&[(1, 5, "journal", "ns/a"), (2, 5, "journal", "ns/b")]);
    h.broke();
    let (address, hello) = h.reconnect().await;
    assert_eq!(held(&hello), [(1, 5), (2, 5)]);
    h.connected(&address);
    let actions = h.finish(1, 5, "journal", "ns/a");
    assert!(sent(&actions).is_empty(), "no Done before Welcome");
    assert_eq!(h.m.next_wake(), None, "nor a flush timer");
    let actions = h.welcome(5);
    assert_eq!(dones(&actions), [1]);
    assert_eq!(
        credits(&actions),
        [("journal".to_owned(), 1), ("one-child".to_owned(), 1)],
        "journal: concurrency 2 minus item 2, still held; no extra credit for item 1"
    );
}

#[tokio::test(start_paused = true)]
async fn dones_pending_when_the_stream_breaks_are_never_sent_on_the_next_stream() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    h.assign(&[(1, 5, "journal", "ns/a")]);
    h.finish(1, 5, "journal", "ns/a");
    let actions = h.step(|m, now| m.on_message(now, Ok(None)));
    assert!(disconnects(&actions));
    assert!(sent(&actions).is_empty());
    let (address, hello) = h.reconnect().await;
    assert!(hello.held.is_empty(), "item 1 is no longer held");
    h.connected(&address);
    let actions = h.welcome(5);
    assert!(dones(&actions).is_empty());
    assert_eq!(
        credits(&actions),
        [("journal".to_owned(), 2), ("one-child".to_owned(), 1)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_send_closes_the_stream_and_reconnects_after_a_pause() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    let actions = h.step(|m, now| m.on_send_failed(now));
    assert!(disconnects(&actions));
    assert!(!h.health.is_ready());
    assert_eq!(h.m.next_wake(), Some(Instant::now() + RECONNECT_MIN));
}

// === draining ===

#[tokio::test(start_paused = true)]
async fn a_drain_admits_nothing_lets_running_items_finish_reports_them_and_ends() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    let actions = h.assign(&[
        (1, 5, "journal", "ns/a"),
        (2, 5, "one-child", "ns/b"),
        (3, 5, "journal", "ns/a"),
    ]);
    assert_eq!(spawned(&actions), [1, 2]);
    let actions = h.step(|m, now| m.on_drain_requested(now));
    assert!(end_of(&actions).is_none(), "two items still run");
    assert!(!h.health.is_ready());
    assert_eq!(h.m.grace_deadline(), Some(Instant::now() + GRACE));
    assert!(spawned(&h.assign(&[(4, 5, "journal", "ns/d")])).is_empty());
    let actions = h.finish(1, 5, "journal", "ns/a");
    assert!(spawned(&actions).is_empty(), "item 3 waited: it is dropped");
    assert!(end_of(&actions).is_none());
    let actions = h.finish(2, 5, "one-child", "ns/b");
    assert_eq!(dones(&actions), [1, 2], "both reported before the close");
    assert!(
        credits(&actions).is_empty(),
        "a draining worker wants nothing more"
    );
    let send = position(&actions, |a| matches!(a, Action::Send(_)));
    let close = position(&actions, |a| matches!(a, Action::CloseGracefully));
    let end = position(&actions, |a| matches!(a, Action::End(End::Shutdown)));
    assert!(send < close && close < end, "{actions:?}");
    assert!(!h.health.is_ready(), "still not ready after the close");
}

#[tokio::test(start_paused = true)]
async fn an_idle_worker_asked_to_drain_ends_at_once() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    let actions = h.step(|m, now| m.on_drain_requested(now));
    assert!(credits(&actions).is_empty());
    assert_eq!(end_of(&actions), Some(End::Shutdown));
}

#[tokio::test(start_paused = true)]
async fn when_the_grace_period_is_over_what_still_runs_is_cancelled_and_what_finished_is_reported()
{
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    h.assign(&[(1, 5, "journal", "ns/a"), (2, 5, "journal", "ns/b")]);
    h.step(|m, now| m.on_drain_requested(now));
    h.finish(2, 5, "journal", "ns/b");
    let deadline = h.m.grace_deadline().expect("draining");
    tokio::time::advance(deadline - Instant::now()).await;
    let actions = h.step(|m, _| m.on_grace_over());
    assert!(matches!(actions.first(), Some(Action::CancelReconciles)));
    assert_eq!(dones(&actions), [2]);
    let send = position(&actions, |a| matches!(a, Action::Send(_)));
    let close = position(&actions, |a| matches!(a, Action::CloseGracefully));
    assert!(send < close);
    assert_eq!(end_of(&actions), Some(End::Shutdown));
}

// === fencing ===

#[tokio::test(start_paused = true)]
async fn a_lost_lease_cancels_and_forgets_every_item_but_keeps_the_term_and_leader() {
    let mut h = Harness::new(Some(leader("a", 5)));
    h.join(5).await;
    h.assign(&[(1, 5, "journal", "ns/a"), (2, 5, "one-child", "ns/b")]);
    let actions = h.step(|m, _| m.on_lease_lost());
    assert!(matches!(actions.first(), Some(Action::CancelReconciles)));
    assert!(disconnects(&actions));
    assert_eq!(end_of(&actions), Some(End::Lost));
    assert!(!h.health.is_ready());
    let (ledger, known) = h.m.into_carried();
    assert!(ledger.held().is_empty());
    assert_eq!(ledger.known_term(), 5);
    // The next session resumes the leader at once, holding nothing.
    let mut next = Harness::resume(ledger, known);
    let (address, hello) = next.reconnect().await;
    assert_eq!((address.as_str(), hello.known_term), ("a:9443", 5));
    assert!(hello.held.is_empty());
    // A reconcile of the old session that ends anyway is not reported.
    next.connected(&address);
    next.welcome(5);
    assert!(sent(&next.finish(1, 5, "journal", "ns/a")).is_empty());
    assert_eq!(next.m.next_wake(), None);
}

// === readiness ===

#[tokio::test(start_paused = true)]
async fn a_stream_that_keeps_breaking_makes_the_worker_ready_only_once_it_stays_up() {
    let mut h = Harness::new(Some(leader("a", 5)));
    for _ in 0..3 {
        h.join(5).await;
        h.broke();
    }
    h.join(5).await;
    assert!(!h.health.is_ready(), "flapping");
    assert_eq!(h.m.next_wake(), Some(Instant::now() + STABLE));
    assert!(h.wake().await.is_empty());
    assert!(h.health.is_ready(), "stayed up for {STABLE:?}");
}
