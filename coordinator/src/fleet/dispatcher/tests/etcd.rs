//! The tests' etcd: leases, the worker registry (and its watch), shard keys and specs, answering the
//! dispatcher's work as etcd's transactions would — a claim only of an absent key, a move only from the
//! owner the compare names, a put on an ended lease failing.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tokio::time::Instant;

use super::super::etcd_work::{
    EtcdDone, EtcdWork, Holder, RegistrationRead, ShardWrite, TermStart, WriteOutcome,
};
use super::super::membership::RegistryEvent;
use super::Duration;

/// What etcd holds.
#[derive(Default)]
pub(in super::super) struct Etcd {
    revision: i64,
    next_lease: i64,
    leases: BTreeSet<i64>,
    /// Leases nobody renews, with when they expire.
    expiring: BTreeMap<i64, Instant>,
    /// `workers/<id>` → the lease it is on.
    pub(in super::super) registry: BTreeMap<String, i64>,
    /// `shards/<n>` → its owner and the lease it is on.
    pub(in super::super) shards: BTreeMap<u32, (String, i64)>,
    /// `controllers/<name>` → the encoded spec.
    pub(in super::super) specs: BTreeMap<String, Vec<u8>>,
    /// Registry watch events not yet delivered.
    pub(in super::super) watch: VecDeque<(i64, RegistryEvent)>,
    /// Work handed off and not yet answered.
    pub(in super::super) pending: VecDeque<EtcdWork>,
    /// While set, etcd answers nothing and its watch delivers nothing: work and events wait.
    pub(in super::super) stalled: bool,
    /// Shard writes refused so far.
    pub(in super::super) refused_writes: usize,
}

impl Etcd {
    /// A new lease.
    pub(in super::super) fn grant(&mut self) -> i64 {
        self.next_lease += 1;
        self.leases.insert(self.next_lease);
        self.next_lease
    }

    /// Puts `workers/<id>` on `lease`.
    pub(in super::super) fn register(&mut self, id: &str, lease: i64) {
        self.revision += 1;
        self.registry.insert(id.to_owned(), lease);
        self.watch.push_back((
            self.revision,
            RegistryEvent::Up {
                id: id.to_owned(),
                lease_id: lease,
                capacity: 1,
            },
        ));
    }

    /// Lets `lease` expire at `at` (nobody renews it any more).
    pub(in super::super) fn expire_at(&mut self, lease: i64, at: Instant) {
        if self.leases.contains(&lease) {
            self.expiring.insert(lease, at);
        }
    }

    /// Ends the leases nobody renews whose TTL ran out by `now`.
    pub(in super::super) fn expire_due(&mut self, now: Instant) {
        let due: Vec<i64> = self
            .expiring
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(lease, _)| *lease)
            .collect();
        for lease in due {
            self.end_lease(lease);
        }
    }

    /// Ends `lease` (expired or revoked): every key on it goes, in one revision.
    pub(in super::super) fn end_lease(&mut self, lease: i64) {
        self.expiring.remove(&lease);
        if !self.leases.remove(&lease) {
            return;
        }
        self.revision += 1;
        let gone: Vec<String> = self
            .registry
            .iter()
            .filter(|(_, l)| **l == lease)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.registry.remove(&id);
            self.watch
                .push_back((self.revision, RegistryEvent::Down { id }));
        }
        self.shards.retain(|_, (_, l)| *l != lease);
    }

    /// What a new leader reads at the start of its term.
    pub(in super::super) fn term_start(&self) -> TermStart {
        TermStart {
            revision: self.revision,
            workers: self
                .registry
                .iter()
                .map(|(id, lease)| (id.clone(), *lease, 1))
                .collect(),
            shards: self
                .shards
                .iter()
                .map(|(s, (owner, lease))| (*s, owner.clone(), *lease, 0))
                .collect(),
            specs: self
                .specs
                .iter()
                .map(|(name, spec)| (format!("controllers/{name}"), spec.clone()))
                .collect(),
        }
    }

    /// Runs `work` and returns its results, as the loop's etcd worker would send them.
    pub(in super::super) fn answer(&mut self, work: EtcdWork, ttl: Duration) -> Vec<EtcdDone> {
        match work {
            EtcdWork::Shards(writes) => writes
                .into_iter()
                .map(|w| {
                    let outcome = self.write(&w);
                    EtcdDone::Shard(w, outcome)
                })
                .collect(),
            EtcdWork::Fence {
                worker,
                lease,
                shards,
            } => {
                // The worker's shard keys move onto a lease of its TTL, then its own lease goes.
                let kept = self.grant();
                self.expiring.insert(kept, Instant::now() + ttl);
                for s in shards {
                    if let Some((owner, on)) = self.shards.get_mut(&s)
                        && *owner == worker
                    {
                        *on = kept;
                    }
                }
                self.end_lease(lease);
                vec![EtcdDone::Fenced { worker, ttl }]
            }
            EtcdWork::CheckRegistration { conn_id, worker } => vec![EtcdDone::Registration {
                conn_id,
                read: Ok(RegistrationRead {
                    revision: self.revision,
                    found: self.registry.get(&worker).map(|lease| (*lease, 1)),
                }),
            }],
            EtcdWork::PutSpec { name, encoded } => {
                self.specs.insert(name, encoded);
                Vec::new()
            }
            EtcdWork::DeleteSpec { name } => {
                self.specs.remove(&name);
                Vec::new()
            }
        }
    }

    fn write(&mut self, w: &ShardWrite) -> WriteOutcome {
        let current = self.shards.get(&w.shard).cloned();
        let guard = match (&w.from, w.replace) {
            (None, None) => current.is_none(),
            // This etcd keeps no mod revisions: a replace stands for "still lease-less".
            (None, Some(_)) => current.as_ref().is_some_and(|(_, lease)| *lease == 0),
            (Some(from), _) => current.as_ref().map(|(owner, _)| owner) == Some(from),
        };
        if !guard {
            self.refused_writes += 1;
            // As etcd reports it: the time left of a lease nobody renews; a renewed one's is unknown here.
            let now = Instant::now();
            return WriteOutcome::Refused {
                current: current.map(|(owner, lease)| Holder {
                    owner,
                    lease,
                    mod_revision: 0,
                    ttl: self
                        .expiring
                        .get(&lease)
                        .map(|at| at.saturating_duration_since(now)),
                }),
            };
        }
        if !self.leases.contains(&w.lease) {
            // etcd refuses a put on a lease it does not know: the transaction fails.
            return WriteOutcome::Failed;
        }
        self.revision += 1;
        self.shards.insert(w.shard, (w.to.clone(), w.lease));
        WriteOutcome::Written
    }
}
