//! A key never at two workers, and no key lost: random sequences of connects, disconnects, crashes,
//! lease expiries, restarts, Dones of every outcome, enqueues, time passing (rebalances, fencing), a
//! stalled etcd and leader failovers. The harness fails any Assign of a key another live worker runs,
//! at the step it happens; once the sequence ends and the fleet heals, every key enqueued (or cut short
//! by a crash or a lost lease) must have run after that.

use proptest::prelude::*;

use std::time::Duration;

use flotilla_proto as proto;

use super::Fleet;

const WORKERS: [&str; 3] = ["w0", "w1", "w2"];
const KEYS: u8 = 24;

#[derive(Debug, Clone)]
enum Op {
    Enqueue(Vec<u8>),
    /// A worker finishes one of its items: Success, RequeueAfter or Error.
    Finish {
        worker: usize,
        nth: usize,
        outcome: u8,
    },
    Disconnect(usize),
    Reconnect(usize),
    Crash(usize),
    ExpireLease(usize),
    Restart(usize),
    Advance(u64),
    StallEtcd(bool),
    Failover,
}

fn op() -> impl Strategy<Value = Op> {
    let worker = 0..WORKERS.len();
    prop_oneof![
        4 => proptest::collection::vec(0..KEYS, 1..6).prop_map(Op::Enqueue),
        6 => (worker.clone(), any::<usize>(), prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)])
            .prop_map(|(worker, nth, outcome)| Op::Finish { worker, nth, outcome }),
        1 => worker.clone().prop_map(Op::Disconnect),
        2 => worker.clone().prop_map(Op::Reconnect),
        1 => worker.clone().prop_map(Op::Crash),
        1 => worker.clone().prop_map(Op::ExpireLease),
        2 => worker.prop_map(Op::Restart),
        3 => (50u64..4000).prop_map(Op::Advance),
        1 => any::<bool>().prop_map(Op::StallEtcd),
        1 => Just(Op::Failover),
    ]
}

impl Fleet {
    async fn apply(&mut self, op: Op, term: &mut u64) {
        match op {
            Op::Enqueue(keys) => {
                let keys: Vec<String> = keys.iter().map(|i| format!("ns/k{i}")).collect();
                let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                self.enqueue(&refs);
            }
            Op::Finish {
                worker,
                nth,
                outcome,
            } => {
                let w = &self.workers[WORKERS[worker]];
                if !w.running.is_empty() {
                    let key = w.running.values().nth(nth % w.running.len());
                    let key = key.map(|r| r.key.clone()).unwrap_or_default();
                    let outcome = match outcome {
                        0 => proto::Outcome::Success,
                        1 => proto::Outcome::RequeueAfter,
                        _ => proto::Outcome::Error,
                    };
                    self.finish_with(WORKERS[worker], &key, outcome);
                }
            }
            Op::Disconnect(worker) => self.disconnect(WORKERS[worker]),
            Op::Reconnect(worker) => {
                if self.can_connect(WORKERS[worker]) {
                    self.connect(WORKERS[worker]);
                }
            }
            Op::Crash(worker) => {
                if self.workers[WORKERS[worker]].alive {
                    self.crash(WORKERS[worker]);
                }
            }
            Op::ExpireLease(worker) => self.expire_lease(WORKERS[worker]),
            Op::Restart(worker) => {
                // A crashed process may come back before its old lease expired.
                let w = &self.workers[WORKERS[worker]];
                if !w.alive || w.lease.is_none() {
                    self.start_worker(WORKERS[worker], 3);
                }
            }
            Op::Advance(ms) => self.advance(Duration::from_millis(ms)).await,
            Op::StallEtcd(stalled) => {
                self.etcd.stalled = stalled;
                self.turn();
            }
            Op::Failover => {
                *term += 100;
                self.failover(*term).await;
            }
        }
    }

    fn can_connect(&self, id: &str) -> bool {
        let w = &self.workers[id];
        w.alive && w.lease.is_some() && !w.has_stream() && !w.is_stopping()
    }

    /// Brings every worker back and lets the fleet run until nothing is owed or running.
    async fn heal(&mut self) {
        self.etcd.stalled = false;
        self.turn();
        for _ in 0..300 {
            for id in WORKERS {
                let w = &self.workers[id];
                if w.is_stopping() {
                    continue;
                }
                if !w.alive || w.lease.is_none() {
                    self.start_worker(id, 3);
                } else if self.can_connect(id) {
                    self.connect(id);
                }
            }
            self.finish_all();
            self.advance(Duration::from_secs(1)).await;
            let idle = self.workers.values().all(|w| w.running.is_empty());
            if self.owed.is_empty() && idle {
                return;
            }
        }
        panic!(
            "keys never ran after their last change: {:?}\n{}",
            self.owed,
            self.describe()
        );
    }
}

async fn run(ops: Vec<Op>) {
    let mut f = Fleet::new(100).await;
    let mut term = 100;
    for id in WORKERS {
        f.start_worker(id, 3);
    }
    for op in ops {
        f.apply(op, &mut term).await;
        f.check();
    }
    f.heal().await;
    f.check();
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// After every step no key runs at two workers; in the end every key enqueued, or whose run was
    /// cut short, has run again.
    #[test]
    fn no_key_runs_at_two_workers_and_every_enqueued_key_runs(ops in proptest::collection::vec(op(), 1..80)) {
        paused_runtime().block_on(run(ops));
    }
}

/// Regression: a move waiting for its old owner's Hello was dropped from the pending moves and never
/// retried once the Hello came, so keys of the shard stayed parked for good.
#[test]
fn a_key_enqueued_after_failover_while_workers_have_not_said_hello_runs_once_they_do() {
    use Op::*;
    let ops = vec![
        ExpireLease(0),
        Advance(50),
        Failover,
        Restart(0),
        Advance(2000),
        Enqueue(vec![12]),
    ];
    paused_runtime().block_on(run(ops));
}

/// Regression: revoking a silent worker's lease deleted its shard keys at once, while the worker may
/// run its items for up to its lease TTL more. The leader that revoked waited that long, but a leader of
/// the next term read the shards as free and gave `ns/k0` to w1 while w2 still ran it.
#[test]
fn a_leader_after_the_one_that_fenced_a_worker_waits_for_it_too() {
    use Op::*;
    let ops = vec![
        Enqueue(vec![0]),
        Advance(50),
        Failover,
        Advance(6284),
        ExpireLease(1),
        Advance(3716),
        Failover,
        Restart(1),
        Advance(50),
    ];
    paused_runtime().block_on(run(ops));
}

#[test]
fn a_fleet_through_crashes_stalls_and_failovers_keeps_every_key_at_one_worker() {
    use Op::*;
    let ops = vec![
        Enqueue((0..KEYS).collect()),
        Advance(1000),
        Crash(0),
        Enqueue((0..KEYS).collect()),
        StallEtcd(true),
        Finish {
            worker: 1,
            nth: 0,
            outcome: 0,
        },
        Advance(3000),
        Failover,
        Reconnect(1),
        Advance(4000),
        StallEtcd(false),
        ExpireLease(0),
        Reconnect(2),
        Restart(0),
        Advance(2000),
        Disconnect(1),
        Enqueue((0..KEYS).collect()),
        Advance(4000),
        Finish {
            worker: 2,
            nth: 1,
            outcome: 2,
        },
        Advance(4000),
        Advance(4000),
        Reconnect(1),
    ];
    paused_runtime().block_on(run(ops));
}
