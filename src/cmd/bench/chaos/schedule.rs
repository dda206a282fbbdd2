//! The seeded fault schedule of `bench chaos`: which fault strikes when, fixed before the run starts
//! so a seed replays the same schedule (the leader killed is whoever leads at that moment; everything
//! else — which worker, which link — is chosen here).

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A link between two processes of the fleet, each through a proxy of its own (the worker ↔
/// coordinator link: the connections of that worker's process on every coordinator's proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::cmd::bench) enum Link {
    /// Worker slot ↔ the coordinators (its Dispatch stream and Cache reads).
    WorkerCoordinator(usize),
    /// Worker slot ↔ etcd (its lease).
    WorkerEtcd(usize),
    /// Worker slot ↔ the Kubernetes API (its writes).
    WorkerApi(usize),
    /// Coordinator slot ↔ etcd (election, shards).
    CoordinatorEtcd(usize),
    /// Coordinator slot ↔ the Kubernetes API (its informers).
    CoordinatorApi(usize),
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Link::WorkerCoordinator(w) => write!(f, "worker-{w}↔coordinator"),
            Link::WorkerEtcd(w) => write!(f, "worker-{w}↔etcd"),
            Link::WorkerApi(w) => write!(f, "worker-{w}↔API"),
            Link::CoordinatorEtcd(c) => write!(f, "coordinator-{c}↔etcd"),
            Link::CoordinatorApi(c) => write!(f, "coordinator-{c}↔API"),
        }
    }
}

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    /// kill -9 the worker of this slot, then start it again (a new process, a new worker id).
    KillWorker(usize),
    /// kill -9 whichever coordinator leads, then start it again.
    KillLeader,
    /// Cut the link (every connection reset, new ones refused) for this long, then heal it.
    Cut(Link, Duration),
    /// kill -9 etcd and start it again on its data.
    RestartEtcd,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::KillWorker(w) => write!(f, "kill worker-{w}"),
            Fault::KillLeader => write!(f, "kill the leader"),
            Fault::Cut(link, d) => write!(f, "cut {link} for {d:?}"),
            Fault::RestartEtcd => write!(f, "restart etcd"),
        }
    }
}

/// A fault at an offset from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Planned {
    pub at: Duration,
    pub fault: Fault,
}

/// What the schedule is made of; an interval of zero turns that fault off.
#[derive(Debug, Clone)]
pub(super) struct Shape {
    pub seed: u64,
    pub duration: Duration,
    pub workers: usize,
    pub coordinators: usize,
    pub worker_kill_every: Duration,
    pub leader_kill_every: Duration,
    pub cut_every: Duration,
    pub cut_for: Duration,
    /// Restart etcd once, at a seeded moment between 30 % and 60 % of the run.
    pub etcd_restart: bool,
}

/// The faults of `shape`, in time order: a worker kill every `worker_kill_every`, a leader kill
/// every `leader_kill_every`, a cut every `cut_every` (each starting at one interval, none at or after
/// `duration`), and the etcd restart.
pub(super) fn plan(shape: &Shape) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(shape.seed);
    let mut out = Vec::new();
    let ticks = |every: Duration| {
        let n = if every.is_zero() {
            0
        } else {
            (shape.duration.as_nanos() / every.as_nanos()) as u32
        };
        (1..=n)
            .map(move |k| every * k)
            .filter(|at| *at < shape.duration)
    };
    if shape.workers > 0 {
        for at in ticks(shape.worker_kill_every) {
            let fault = Fault::KillWorker(rng.random_range(0..shape.workers));
            out.push(Planned { at, fault });
        }
    }
    if shape.coordinators > 0 {
        for at in ticks(shape.leader_kill_every) {
            out.push(Planned {
                at,
                fault: Fault::KillLeader,
            });
        }
    }
    let links = links(shape.workers, shape.coordinators);
    if !links.is_empty() {
        for at in ticks(shape.cut_every) {
            let link = links[rng.random_range(0..links.len())];
            out.push(Planned {
                at,
                fault: Fault::Cut(link, shape.cut_for),
            });
        }
    }
    if shape.etcd_restart {
        let at = shape.duration.mul_f64(rng.random_range(0.3..0.6));
        out.push(Planned {
            at,
            fault: Fault::RestartEtcd,
        });
    }
    // Stable: faults of one instant keep the order above (worker, leader, cut, etcd).
    out.sort_by_key(|p| p.at);
    out
}

/// Every link of a fleet of `workers` and `coordinators`.
fn links(workers: usize, coordinators: usize) -> Vec<Link> {
    let mut out = Vec::new();
    for w in 0..workers {
        out.extend([
            Link::WorkerCoordinator(w),
            Link::WorkerEtcd(w),
            Link::WorkerApi(w),
        ]);
    }
    for c in 0..coordinators {
        out.extend([Link::CoordinatorEtcd(c), Link::CoordinatorApi(c)]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(seed: u64) -> Shape {
        Shape {
            seed,
            duration: Duration::from_secs(60),
            workers: 3,
            coordinators: 2,
            worker_kill_every: Duration::from_secs(5),
            leader_kill_every: Duration::from_secs(20),
            cut_every: Duration::from_secs(10),
            cut_for: Duration::from_secs(3),
            etcd_restart: true,
        }
    }

    #[test]
    fn a_seed_replays_the_same_schedule_and_another_seed_differs() {
        assert_eq!(plan(&shape(7)), plan(&shape(7)));
        assert_ne!(plan(&shape(7)), plan(&shape(8)));
    }

    #[test]
    fn the_schedule_has_every_fault_at_its_interval_in_time_order() {
        let planned = plan(&shape(1));
        let count = |f: &dyn Fn(&Fault) -> bool| planned.iter().filter(|p| f(&p.fault)).count();
        // 60 s: kills at 5 … 55 s, leader kills at 20 and 40 s, cuts at 10 … 50 s, one etcd restart.
        assert_eq!(count(&|f| matches!(f, Fault::KillWorker(w) if *w < 3)), 11);
        assert_eq!(count(&|f| matches!(f, Fault::KillLeader)), 2);
        assert_eq!(
            count(&|f| matches!(f, Fault::Cut(_, d) if *d == Duration::from_secs(3))),
            5
        );
        assert_eq!(count(&|f| matches!(f, Fault::RestartEtcd)), 1);
        assert!(planned.windows(2).all(|w| w[0].at <= w[1].at));
        let etcd = planned
            .iter()
            .find(|p| p.fault == Fault::RestartEtcd)
            .map(|p| p.at.as_secs_f64());
        assert!(etcd.is_some_and(|s| (18.0..36.0).contains(&s)), "{etcd:?}");
    }

    #[test]
    fn a_zero_interval_turns_a_fault_off() {
        let mut s = shape(1);
        s.worker_kill_every = Duration::ZERO;
        s.etcd_restart = false;
        assert!(
            plan(&s)
                .iter()
                .all(|p| !matches!(p.fault, Fault::KillWorker(_) | Fault::RestartEtcd))
        );
    }

    #[test]
    fn every_link_kind_is_cut_over_enough_ticks() {
        let mut s = shape(3);
        s.duration = Duration::from_secs(3000);
        let cut: Vec<Link> = plan(&s)
            .iter()
            .filter_map(|p| match p.fault {
                Fault::Cut(link, _) => Some(link),
                _ => None,
            })
            .collect();
        for l in links(3, 2) {
            assert!(cut.contains(&l), "{l} never cut");
        }
    }
}
