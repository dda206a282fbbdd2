//! Unit tests of the dispatcher on paused time, without etcd or gRPC. The harness ([`Fleet`]) plays
//! etcd ([`Etcd`]: it answers the work the dispatcher hands off as etcd would, keeps leases, and feeds
//! the registry watch) and the workers ([`Worker`]: they read their streams, say Hello with what they
//! hold, grant credits and finish items), and drives the dispatcher exactly as the term's loop does.
//! Every Assign a worker receives is checked against every other worker's running items: a key at two
//! workers fails the test at that step.

mod access;
mod debris;
mod etcd;
mod exclusivity;
mod failover;
mod handover;
mod retire;
mod worker_loss;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_common::{LeaderInfo, ResourceKind};
use flotilla_proto as proto;
use prometheus_client::registry::Registry;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::super::access::CacheAccess;
use super::super::messages::{Credit, Done, Hello, HelloRefused, Limits};
use super::super::progress::DispatchProgress;
use super::etcd_work::{EtcdWork, TermStart};
use super::{Command, Dispatcher, TermEnv};
use crate::config::CoordinatorConfig;
use crate::informer::{InformerEvent, Informers};
use crate::metrics::FleetMetrics;
use crate::queue::QueueMetricsFamilies;
use crate::shard::shard_of;
pub(super) use etcd::Etcd;

/// The one controller of the tests.
pub(super) const CONTROLLER: &str = "c";
/// Few shards, so tests find keys of one shard quickly.
pub(super) const SHARDS: u32 = 8;
/// Every test worker's lease TTL.
pub(super) const LEASE_TTL: Duration = Duration::from_secs(5);
/// The loop's tick.
const TICK: Duration = Duration::from_millis(250);

/// The test controller's spec: `namespace/name` keys of ConfigMaps.
pub(super) fn spec() -> proto::ControllerSpec {
    proto::ControllerSpec {
        name: CONTROLLER.into(),
        primary: Some((&configmaps()).into()),
        ..Default::default()
    }
}

fn configmaps() -> ResourceKind {
    ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)
}

/// A Kubernetes API that lists no ConfigMaps, does not stream lists (it refuses `sendInitialEvents`,
/// as a server without WatchList does) and whose watches never answer: the informer syncs at once and
/// stays quiet.
fn empty_api() -> kube::Client {
    let service = tower::service_fn(|request: http::Request<kube::client::Body>| async move {
        let query = request.uri().query().unwrap_or_default();
        if query.contains("sendInitialEvents=true") {
            let mut refused = http::Response::new(kube::client::Body::from(Vec::new()));
            *refused.status_mut() = http::StatusCode::UNPROCESSABLE_ENTITY;
            return Ok::<_, std::convert::Infallible>(refused);
        }
        if query.contains("watch=true") {
            std::future::pending::<()>().await;
        }
        let list = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMapList",
            "metadata": {"resourceVersion": "1"}, "items": []});
        let body = serde_json::to_vec(&list).unwrap_or_default();
        Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(body)))
    });
    kube::Client::new(service, "default")
}

/// An item a test worker runs (or finished and has not reported).
#[derive(Debug, Clone)]
pub(super) struct Running {
    pub(super) key: String,
    pub(super) shard: u32,
}

/// A test worker's stream to the leader.
struct Stream {
    conn_id: u64,
    rx: mpsc::UnboundedReceiver<proto::CoordinatorMessage>,
    /// The answer to its Hello, until read.
    reply: Option<oneshot::Receiver<Result<proto::Welcome, HelloRefused>>>,
    welcomed: bool,
}

/// A worker process as the tests play it.
pub(super) struct Worker {
    pub(super) id: String,
    /// Its session's lease; `None` once it lost it (it fenced itself) or crashed.
    pub(super) lease: Option<i64>,
    /// Whether the process runs.
    pub(super) alive: bool,
    concurrency: u32,
    stream: Option<Stream>,
    /// Items it runs, by (term, item id), oldest first.
    pub(super) running: BTreeMap<(u64, u64), Running>,
    /// Set when its lease was revoked: it cannot renew, so it has stopped by then at the latest.
    stops_at: Option<Instant>,
    known_term: u64,
    /// Hellos the leader refused.
    pub(super) refused: Vec<HelloRefused>,
}

impl Worker {
    /// Whether it has a welcomed stream.
    pub(super) fn welcomed(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.welcomed)
    }

    /// Whether it has a stream (welcomed or waiting for its Welcome).
    pub(super) fn has_stream(&self) -> bool {
        self.stream.is_some()
    }

    /// Whether its lease was revoked and it has not stopped yet.
    pub(super) fn is_stopping(&self) -> bool {
        self.stops_at.is_some()
    }

    /// Keys it runs.
    pub(super) fn keys(&self) -> BTreeSet<String> {
        self.running.values().map(|r| r.key.clone()).collect()
    }
}

/// One dispatcher and the world around it.
pub(super) struct Fleet {
    pub(super) d: Dispatcher,
    informers: Informers,
    events: mpsc::Receiver<InformerEvent>,
    pub(super) etcd: Etcd,
    pub(super) workers: BTreeMap<String, Worker>,
    next_conn: u64,
    /// Every Assign a worker received: (worker, key).
    pub(super) assigned: Vec<(String, String)>,
    /// Keys enqueued, or whose run was cut short, and not assigned since: each must run again.
    pub(super) owed: BTreeSet<String>,
    /// Every key ever enqueued: the objects a new leader's initial list enqueues again.
    known: BTreeSet<String>,
}

impl Fleet {
    /// A leader of `term` over a fresh etcd that already stores the test controller's spec, its caches
    /// synced.
    pub(super) async fn new(term: u64) -> Self {
        let informers = Informers::new(empty_api(), &mut Registry::default());
        let mut etcd = Etcd::default();
        etcd.specs
            .insert(CONTROLLER.into(), prost::Message::encode_to_vec(&spec()));
        let events = informers.subscribe();
        let d = Self::dispatcher(&informers, term, etcd.term_start());
        let mut fleet = Self {
            d,
            informers,
            events,
            etcd,
            workers: BTreeMap::new(),
            next_conn: 1,
            assigned: Vec::new(),
            owed: BTreeSet::new(),
            known: BTreeSet::new(),
        };
        fleet.wait_synced().await;
        fleet
    }

    fn dispatcher(informers: &Informers, term: u64, start: TermStart) -> Dispatcher {
        let mut config = CoordinatorConfig::new("test", Vec::new());
        config.shards = SHARDS;
        let mut registry = Registry::default();
        let env = TermEnv {
            config: Arc::new(config),
            term,
            leader: LeaderInfo {
                id: format!("leader-{term}"),
                address: "127.0.0.1:1".into(),
            },
            informers: informers.clone(),
            metrics: FleetMetrics::register(&mut registry),
            queue_metrics: QueueMetricsFamilies::register(&mut registry),
            access: CacheAccess::default(),
            progress: DispatchProgress::default(),
            api_link: crate::api_link::ApiLink::default(),
        };
        let (discovered_tx, _) = mpsc::channel(1);
        let mut d = Dispatcher::new(env, discovered_tx);
        d.start(start);
        d
    }

    /// Lets the informers list (paused time advances only while everything else waits) until the
    /// controller's caches synced.
    async fn wait_synced(&mut self) {
        for _ in 0..1000 {
            self.turn();
            if self.d.running.iter().all(|(_, c)| c.synced) && self.d.running.len() > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the test controller's informer never synced");
    }

    /// A new leader of `term`: this one is gone (its queues with it), every worker's stream to it
    /// breaks, and the new one starts from what etcd holds. Every key ever enqueued is enqueued again,
    /// as the new leader's initial list enqueues every object.
    pub(super) async fn failover(&mut self, term: u64) {
        self.etcd.stalled = false;
        self.etcd.pending.clear();
        self.etcd.watch.clear();
        self.events = self.informers.subscribe();
        self.d = Self::dispatcher(&self.informers, term, self.etcd.term_start());
        for w in self.workers.values_mut() {
            w.stream = None;
        }
        self.wait_synced().await;
        self.d.handle(Command::Enqueue {
            controller: CONTROLLER.into(),
            keys: self.known.iter().cloned().collect(),
        });
        self.turn();
    }

    /// Starts worker `id` (a new process on a new lease, whatever its last one left in etcd) and
    /// connects it.
    pub(super) fn start_worker(&mut self, id: &str, concurrency: u32) {
        self.register_worker(id, concurrency);
        self.connect(id);
    }

    /// Starts worker `id`'s process on a new lease and lets the leader see its registration; it has
    /// not said Hello yet.
    pub(super) fn register_worker(&mut self, id: &str, concurrency: u32) {
        let lease = self.etcd.grant();
        self.etcd.register(id, lease);
        let worker = self.workers.entry(id.to_owned()).or_insert_with(|| Worker {
            id: id.to_owned(),
            lease: None,
            alive: false,
            concurrency,
            stream: None,
            running: BTreeMap::new(),
            stops_at: None,
            known_term: 0,
            refused: Vec::new(),
        });
        assert!(
            worker.running.is_empty(),
            "a new process of {id} holds nothing"
        );
        worker.lease = Some(lease);
        worker.alive = true;
        worker.stops_at = None;
        worker.concurrency = concurrency;
        self.turn();
    }

    /// Opens a new stream for worker `id`, saying Hello with what it runs.
    pub(super) fn connect(&mut self, id: &str) {
        self.say_hello(id);
        self.turn();
    }

    /// Opens a new stream for worker `id` and hands the dispatcher its Hello, without ending the turn.
    pub(super) fn say_hello(&mut self, id: &str) {
        let conn_id = self.next_conn;
        self.next_conn += 1;
        let Some(w) = self.workers.get_mut(id) else {
            panic!("no worker {id}");
        };
        let Some(lease) = w.lease.filter(|_| w.alive) else {
            panic!("worker {id} has no session to connect with");
        };
        let hello = proto::Hello {
            worker_id: id.to_owned(),
            lease_id: lease,
            controllers: vec![proto::ControllerCapacity {
                spec: Some(spec()),
                concurrency: w.concurrency,
            }],
            known_term: w.known_term,
            held: w
                .running
                .iter()
                .map(|(&(term, item_id), r)| proto::HeldItem {
                    controller: CONTROLLER.into(),
                    key: r.key.clone(),
                    shard: r.shard,
                    item_id,
                    term,
                })
                .collect(),
        };
        let hello = Hello::from_proto(hello, &Limits::default()).expect("a valid Hello");
        let (tx, rx) = mpsc::unbounded_channel();
        let (reply, reply_rx) = oneshot::channel();
        w.stream = Some(Stream {
            conn_id,
            rx,
            reply: Some(reply_rx),
            welcomed: false,
        });
        self.d.handle(Command::Connect {
            hello,
            conn_id,
            tx,
            reply,
        });
    }

    /// Worker `id`'s stream breaks; the process goes on running its items.
    pub(super) fn disconnect(&mut self, id: &str) {
        if let Some(stream) = self.workers.get_mut(id).and_then(|w| w.stream.take()) {
            self.d.handle(Command::Disconnected {
                worker: id.to_owned(),
                conn_id: stream.conn_id,
            });
        }
        self.turn();
    }

    /// Worker `id`'s process dies: its items stop unfinished (they are owed a run), its stream breaks;
    /// its lease lives on, unrenewed, for a TTL (or until [`Fleet::expire_lease`]).
    pub(super) fn crash(&mut self, id: &str) {
        self.stop_running(id);
        if let Some(w) = self.workers.get_mut(id) {
            w.alive = false;
            if let Some(lease) = w.lease {
                self.etcd.expire_at(lease, Instant::now() + LEASE_TTL);
            }
        }
        self.disconnect(id);
    }

    /// Worker `id`'s lease ends (it could not renew): a live worker fenced itself just before, so its
    /// items stop unfinished and its stream closes; etcd deletes every key on the lease.
    pub(super) fn expire_lease(&mut self, id: &str) {
        let Some(lease) = self.workers.get_mut(id).and_then(|w| w.lease.take()) else {
            return;
        };
        self.stop_running(id);
        self.etcd.end_lease(lease);
        self.disconnect(id);
    }

    fn stop_running(&mut self, id: &str) {
        if let Some(w) = self.workers.get_mut(id) {
            let stopped = std::mem::take(&mut w.running);
            self.owed.extend(stopped.into_values().map(|r| r.key));
        }
    }

    /// Adds `keys` to the controller's queue.
    pub(super) fn enqueue(&mut self, keys: &[&str]) {
        self.d.handle(Command::Enqueue {
            controller: CONTROLLER.into(),
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        });
        self.owed.extend(keys.iter().map(|k| (*k).to_owned()));
        self.known.extend(keys.iter().map(|k| (*k).to_owned()));
        self.turn();
    }

    /// Worker `id` finishes the item of `key` with `outcome`; a welcomed worker reports it (and grants
    /// the credit back), one without a stream drops the report (its next Hello leaves the item out).
    pub(super) fn finish_with(&mut self, id: &str, key: &str, outcome: proto::Outcome) {
        self.finish_writing(id, key, outcome, Vec::new());
    }

    /// Worker `id` finishes the item of `key` with `outcome`, reporting it wrote `writes`.
    pub(super) fn finish_writing(
        &mut self,
        id: &str,
        key: &str,
        outcome: proto::Outcome,
        writes: Vec<proto::Write>,
    ) {
        let Some(w) = self.workers.get_mut(id) else {
            return;
        };
        let Some(item) = w
            .running
            .iter()
            .find(|(_, r)| r.key == key)
            .map(|(item, _)| *item)
        else {
            panic!("worker {id} does not run {key}");
        };
        w.running.remove(&item);
        let Some(conn_id) = w.stream.as_ref().filter(|s| s.welcomed).map(|s| s.conn_id) else {
            return;
        };
        let done = proto::Done {
            item_id: item.1,
            term: item.0,
            outcome: outcome.into(),
            requeue_after_ms: 1000,
            writes,
            ..Default::default()
        };
        let done = Done::try_from(done).expect("a valid Done");
        self.d.handle(Command::Done {
            worker: id.to_owned(),
            conn_id,
            done: vec![done],
        });
        self.credit(id, 1);
        self.turn();
    }

    /// Worker `id` finishes the item of `key` successfully.
    pub(super) fn finish(&mut self, id: &str, key: &str) {
        self.finish_with(id, key, proto::Outcome::Success);
    }

    /// Every worker finishes everything it runs, successfully.
    pub(super) fn finish_all(&mut self) {
        let running: Vec<(String, String)> = self
            .workers
            .values()
            .flat_map(|w| w.running.values().map(|r| (w.id.clone(), r.key.clone())))
            .collect();
        for (id, key) in running {
            self.finish(&id, &key);
        }
    }

    fn credit(&mut self, id: &str, n: u32) {
        if n == 0 {
            return;
        }
        let Some(conn_id) = self
            .workers
            .get(id)
            .and_then(|w| w.stream.as_ref())
            .map(|s| s.conn_id)
        else {
            return;
        };
        let credit = Credit::from_proto(
            proto::Credit {
                controller: CONTROLLER.into(),
                n,
            },
            &Limits::default(),
        )
        .expect("a valid Credit");
        self.d.handle(Command::Credit {
            worker: id.to_owned(),
            conn_id,
            credit,
        });
    }

    /// Time passes by `by`, tick by tick, as the loop sees it.
    pub(super) async fn advance(&mut self, by: Duration) {
        let end = Instant::now() + by;
        loop {
            let step = TICK.min(end.saturating_duration_since(Instant::now()));
            if step.is_zero() {
                return;
            }
            tokio::time::advance(step).await;
            self.stop_revoked_workers();
            self.etcd.expire_due(Instant::now());
            self.d.running.promote_due(Instant::now());
            self.d.periodic();
            self.turn();
        }
    }

    /// Workers whose revoked lease's TTL has run out have stopped (they could not renew).
    fn stop_revoked_workers(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .workers
            .values()
            .filter(|w| w.stops_at.is_some_and(|t| t <= now))
            .map(|w| w.id.clone())
            .collect();
        for id in due {
            if let Some(w) = self.workers.get_mut(&id) {
                w.stops_at = None;
                w.lease = None;
            }
            self.stop_running(&id);
            self.disconnect(&id);
        }
    }

    /// Runs the loop's turns until nothing moves: informer and registry events, etcd results (unless
    /// etcd is stalled), and what workers receive and answer.
    pub(super) fn turn(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            while let Ok(ev) = self.events.try_recv() {
                self.d.on_informer_event(ev);
                moved = true;
            }
            if !self.etcd.stalled {
                while let Some((revision, ev)) = self.etcd.watch.pop_front() {
                    self.d.on_registry(revision, ev);
                    moved = true;
                }
            }
            self.d.end_turn();
            self.etcd.pending.extend(self.d.take_etcd_work());
            if !self.etcd.stalled {
                while let Some(work) = self.etcd.pending.pop_front() {
                    if let EtcdWork::Fence { lease, .. } = &work {
                        let stops_at = Instant::now() + LEASE_TTL;
                        for w in self.workers.values_mut() {
                            if w.lease == Some(*lease) && w.alive {
                                w.stops_at = Some(stops_at);
                            }
                        }
                    }
                    for done in self.etcd.answer(work, LEASE_TTL) {
                        self.d
                            .on_etcd_done(done)
                            .expect("the tests' etcd never deposes the leader");
                    }
                    moved = true;
                }
            }
            self.check();
            moved |= self.read_streams();
            self.check();
            if !moved {
                return;
            }
        }
        panic!("the dispatcher never settled");
    }

    /// Workers read their streams: Welcome (then the initial credits), refusals, Assigns.
    fn read_streams(&mut self) -> bool {
        let mut moved = false;
        let mut credits = Vec::new();
        let ids: Vec<String> = self.workers.keys().cloned().collect();
        for id in ids {
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            let Some(stream) = w.stream.as_mut() else {
                continue;
            };
            if let Some(reply) = stream.reply.as_mut() {
                match reply.try_recv() {
                    Err(TryRecvError::Empty) => {}
                    Ok(Ok(welcome)) => {
                        stream.reply = None;
                        stream.welcomed = true;
                        w.known_term = w.known_term.max(welcome.term);
                        let held = u32::try_from(w.running.len()).unwrap_or(u32::MAX);
                        credits.push((id.clone(), w.concurrency.saturating_sub(held)));
                        moved = true;
                    }
                    Ok(Err(refused)) => {
                        w.refused.push(refused);
                        w.stream = None;
                        moved = true;
                        continue;
                    }
                    Err(TryRecvError::Closed) => {
                        w.stream = None;
                        continue;
                    }
                }
            }
            let mut assigned = Vec::new();
            while let Ok(message) = stream.rx.try_recv() {
                if let Some(proto::coordinator_message::Msg::Assign(batch)) = message.msg {
                    assert!(stream.welcomed, "{id} got an Assign before its Welcome");
                    assigned.extend(batch.items);
                }
            }
            for item in assigned {
                moved = true;
                self.receive(&id, item);
            }
        }
        for (id, n) in credits {
            self.credit(&id, n);
        }
        moved
    }

    /// Worker `id` starts `item`, unless another live worker runs its key: the promise this harness
    /// exists to check.
    fn receive(&mut self, id: &str, item: proto::Assign) {
        for other in self.workers.values() {
            if let Some(held) = other.running.values().find(|r| r.key == item.key) {
                panic!(
                    "key {} assigned to {id} (term {}, item {}) while {} still runs it (shard {})",
                    item.key, item.term, item.item_id, other.id, held.shard
                );
            }
        }
        self.owed.remove(&item.key);
        self.assigned.push((id.to_owned(), item.key.clone()));
        if let Some(w) = self.workers.get_mut(id) {
            w.running.insert(
                (item.term, item.item_id),
                Running {
                    key: item.key,
                    shard: item.shard,
                },
            );
        }
    }

    /// The worker that runs `key`, if any.
    pub(super) fn runner_of(&self, key: &str) -> Option<&str> {
        self.workers
            .values()
            .find(|w| w.running.values().any(|r| r.key == key))
            .map(|w| w.id.as_str())
    }

    /// Which workers received `key`, in order.
    pub(super) fn assignments_of(&self, key: &str) -> Vec<&str> {
        self.assigned
            .iter()
            .filter(|(_, k)| k == key)
            .map(|(w, _)| w.as_str())
            .collect()
    }
}

impl Fleet {
    /// Fails the test if the dispatcher breaks one of its invariants (`Dispatcher::check`).
    #[track_caller]
    pub(super) fn check(&self) {
        if let Err(broken) = self.d.check() {
            panic!("dispatcher invariant broken: {broken}\n{}", self.describe());
        }
    }

    /// The dispatcher's and etcd's state, for failure messages.
    pub(super) fn describe(&self) -> String {
        let mut out = format!("term {}\nshards:", self.d.term);
        for s in 0..SHARDS {
            out += &format!(
                "\n  {s}: {:?} in flight {} parked {} committing {} etcd {:?}",
                self.d.handover.table().state(s),
                self.d.handover.table().in_flight(s),
                self.d.handover.table().parked_in(s),
                self.d.handover.is_committing(s),
                self.etcd.shards.get(&s)
            );
        }
        out += "\nworkers (leader's view):";
        for w in self.d.membership.iter() {
            out += &format!(
                "\n  {}: lease {:?} conn {} handshaken {} fenced {:?} credits {:?} items {} backlog {}",
                w.id,
                w.lease_id,
                w.conn.is_some(),
                w.handshaken,
                w.fenced_until,
                w.credits,
                w.items.len(),
                w.backlog_len()
            );
        }
        out += "\nworkers (their view):";
        for w in self.workers.values() {
            out += &format!(
                "\n  {}: alive {} lease {:?} stream {} welcomed {} running {:?} refused {:?}",
                w.id,
                w.alive,
                w.lease,
                w.has_stream(),
                w.welcomed(),
                w.keys(),
                w.refused
            );
        }
        for (name, c) in self.d.running.iter() {
            out += &format!(
                "\nqueue {name}: synced {} len {} processing {}",
                c.synced,
                c.queue.len(),
                c.queue.processing_len()
            );
        }
        out += &format!(
            "\nforeign {:?} deferred {:?} pending moves {:?} needs rebalance {}",
            self.d.items.foreign(),
            self.d.items.deferred(),
            self.d.handover.pending_moves(),
            self.d.needs_rebalance
        );
        out
    }
}

/// The shard of a test key.
pub(super) fn shard(key: &str) -> u32 {
    shard_of(CONTROLLER, key, SHARDS)
}

/// `n` distinct test keys of shard `s`.
pub(super) fn keys_of_shard(s: u32, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("ns/k{i}"))
        .filter(|k| shard(k) == s)
        .take(n)
        .collect()
}
