//! Which workers the term knows: the etcd worker registry as the term has read it, Hellos waiting for a
//! registration, and each worker's stream, fence and lease. [`Membership`] owns that; the dispatcher's
//! `hello.rs` and `worker_loss.rs` carry out what its changes mean for items and shards.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::super::messages::Hello;
use super::super::workers::{Connection, Outbound, WorkerState};
use super::HelloReply;
use super::etcd_work::{MAX_LEASE_TTL, RegistrationRead};

/// A worker registration as stored in etcd (`workers/<id>`), written by the worker.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Registration {
    #[serde(default)]
    capacity: u32,
}

impl Registration {
    /// The advertised capacity in a registration value, at most [`MAX_REGISTERED_CAPACITY`]; an
    /// unreadable one counts as 1 (the worker still gets shards, and its Hello tells the real
    /// concurrency, which is checked against the limits).
    pub(super) fn capacity_of(value: &[u8]) -> u32 {
        serde_json::from_slice::<Registration>(value)
            .map_or(1, |r| r.capacity.min(MAX_REGISTERED_CAPACITY))
    }
}

/// A registration's capacity counts until the worker's Hello replaces it; anything above this is read
/// as this (a worker's sum over its controllers is bounded the same way by the Hello's checks).
pub(super) const MAX_REGISTERED_CAPACITY: u32 = 1_000_000;

/// A change of the worker registry (`workers/<id>`).
#[derive(Debug)]
pub(super) enum RegistryEvent {
    Up {
        id: String,
        lease_id: i64,
        capacity: u32,
    },
    Down {
        id: String,
    },
}

/// The workers the term knows. Invariant: a worker is here from its registration (read at the start of
/// the term or from the registry watch) until its lease is gone and, if it was fenced, its fence has
/// passed ([`Membership::free_due`]); it keeps its items until then, whatever its stream does.
#[derive(Default)]
pub(super) struct Membership {
    /// By worker id.
    workers: HashMap<String, WorkerState>,
    /// Hellos waiting for their worker's registration to be read, by stream.
    pending_hellos: HashMap<u64, PendingHello>,
    /// The newest etcd revision the registry watch (or the term's start) has told of.
    registry_revision: i64,
}

/// A Hello waiting for its worker's registration to be read from etcd.
pub(super) struct PendingHello {
    pub(super) hello: Hello,
    pub(super) tx: Outbound,
    pub(super) reply: HelloReply,
}

/// What a registry event changed.
#[derive(Debug)]
pub(super) enum Registered {
    /// A registration without a lease: debris, never a worker; ignored.
    Leaseless { id: String },
    /// A worker registered, or registered again on its lease.
    Up,
    /// The worker's id registered on a new lease: its old incarnation is gone (its lease ended), and
    /// is returned, no longer a member, for its items to run again.
    Replaced(Box<WorkerState>),
    /// A worker's lease ended: it stays a member, keeping its items, until [`Membership::free_due`].
    Down { id: String },
    /// Nothing the term knows changed.
    Unchanged,
}

/// Whether a registration lets a Hello in.
#[derive(Debug)]
pub(super) enum Admission {
    /// Registered on the lease it names.
    Registered,
    /// Not registered on the lease it names.
    Unregistered,
    /// etcd could not say; the worker retries.
    Unavailable(String),
}

impl Membership {
    /// The workers etcd held at the start of the term, as `(id, lease, capacity)`, read at `revision`.
    /// Returns how many registrations carried no lease (ignored).
    pub(super) fn load(
        &mut self,
        workers: Vec<(String, i64, u32)>,
        revision: i64,
        now: Instant,
    ) -> usize {
        self.registry_revision = revision;
        let mut leaseless = 0;
        for (id, lease, capacity) in workers {
            if lease == 0 {
                // No worker registers without its session's lease: debris, never a worker.
                leaseless += 1;
                continue;
            }
            let worker = WorkerState::registered(&id, lease, capacity, now);
            self.workers.insert(id, worker);
        }
        leaseless
    }

    /// Worker `id`.
    pub(super) fn get(&self, id: &str) -> Option<&WorkerState> {
        self.workers.get(id)
    }

    /// Worker `id`, to change its credits, backlog or items.
    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut WorkerState> {
        self.workers.get_mut(id)
    }

    /// Worker `id`, if `conn_id` is its current stream: messages of older streams are ignored.
    pub(super) fn on_stream(&mut self, id: &str, conn_id: u64) -> Option<&mut WorkerState> {
        self.workers
            .get_mut(id)
            .filter(|w| w.conn.as_ref().is_some_and(|c| c.id == conn_id))
    }

    /// Every worker the term knows.
    pub(super) fn iter(&self) -> impl Iterator<Item = &WorkerState> {
        self.workers.values()
    }

    /// Every worker the term knows, to change.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut WorkerState> {
        self.workers.values_mut()
    }

    /// The workers that can take items now.
    pub(super) fn dispatchable(&self) -> impl Iterator<Item = &WorkerState> {
        self.workers.values().filter(|w| w.is_dispatchable())
    }

    /// Number of workers the term knows.
    pub(super) fn len(&self) -> usize {
        self.workers.len()
    }

    /// The lease worker `id` is registered on, while it is.
    pub(super) fn lease_of(&self, id: &str) -> Option<i64> {
        self.workers.get(id).and_then(|w| w.lease_id)
    }

    /// Whether every registered worker has said Hello to this term.
    pub(super) fn all_said_hello(&self) -> bool {
        self.workers
            .values()
            .all(|w| w.handshaken || w.lease_id.is_none())
    }

    /// The controllers run by some worker with a live lease that said Hello to this term.
    pub(super) fn live_controllers(&self) -> HashSet<&str> {
        self.workers
            .values()
            .filter(|w| w.lease_id.is_some() && w.handshaken)
            .flat_map(|w| w.concurrency.keys().map(String::as_str))
            .collect()
    }

    /// Connected workers lacking a controller another connected worker runs, with what they lack.
    pub(super) fn lacking_controllers(&self) -> Vec<(&str, Vec<&str>)> {
        let connected: Vec<&WorkerState> =
            self.workers.values().filter(|w| w.conn.is_some()).collect();
        let all: BTreeSet<&str> = connected
            .iter()
            .flat_map(|w| w.concurrency.keys().map(String::as_str))
            .collect();
        connected
            .into_iter()
            .filter_map(|w| {
                let lacking: Vec<&str> = all
                    .iter()
                    .copied()
                    .filter(|c| !w.concurrency.contains_key(*c))
                    .collect();
                (!lacking.is_empty()).then_some((w.id.as_str(), lacking))
            })
            .collect()
    }

    /// A Hello on stream `conn_id` waits for its worker's registration to be read.
    pub(super) fn wait_for_registration(&mut self, conn_id: u64, pending: PendingHello) {
        self.pending_hellos.insert(conn_id, pending);
    }

    /// The registration read for the Hello waiting on `conn_id` is back: that Hello, with whether the
    /// read lets it in (`None` if no Hello waits, or its stream gave up). A read no newer than what the registry watch has told the term is not trusted
    /// over it (the worker's key may have gone since the read); a newer one is applied as a registry
    /// event (`Up`) first.
    pub(super) fn registration_read(
        &mut self,
        conn_id: u64,
        read: Result<RegistrationRead, String>,
        now: Instant,
    ) -> Option<(PendingHello, Admission, Option<Registered>)> {
        let pending = self.pending_hellos.remove(&conn_id)?;
        if pending.reply.is_closed() {
            // The stream gave up waiting: welcoming it would leave a connection nobody reads.
            return None;
        }
        let id = pending.hello.worker_id.clone();
        let lease = pending.hello.lease_id;
        let (verdict, applied) = match read {
            Err(err) => (Admission::Unavailable(err), None),
            Ok(read) if read.revision <= self.registry_revision => {
                (self.registered_on(&id, lease), None)
            }
            Ok(RegistrationRead {
                found: Some((lease_id, capacity)),
                ..
            }) if lease_id == lease => {
                let applied = self.apply(
                    RegistryEvent::Up {
                        id,
                        lease_id,
                        capacity,
                    },
                    now,
                );
                (Admission::Registered, Some(applied))
            }
            Ok(_) => (Admission::Unregistered, None),
        };
        Some((pending, verdict, applied))
    }

    /// Whether worker `id` is registered on `lease`.
    pub(super) fn registered_on(&self, id: &str, lease: i64) -> Admission {
        if self.lease_of(id) == Some(lease) {
            Admission::Registered
        } else {
            Admission::Unregistered
        }
    }

    /// An event of the registry watch, at etcd revision `revision`.
    pub(super) fn on_registry(
        &mut self,
        revision: i64,
        ev: RegistryEvent,
        now: Instant,
    ) -> Registered {
        self.registry_revision = self.registry_revision.max(revision);
        self.apply(ev, now)
    }

    /// A worker's registration appeared, changed or went.
    fn apply(&mut self, ev: RegistryEvent, now: Instant) -> Registered {
        match ev {
            RegistryEvent::Up {
                id, lease_id: 0, ..
            } => Registered::Leaseless { id },
            RegistryEvent::Up {
                id,
                lease_id,
                capacity,
            } => {
                let registered = WorkerState::registered(&id, lease_id, capacity, now);
                match self.workers.get_mut(&id) {
                    Some(w) if w.lease_id == Some(lease_id) => {
                        w.capacity = w.capacity.max(capacity);
                        Registered::Up
                    }
                    Some(_) => self
                        .workers
                        .insert(id, registered)
                        .map_or(Registered::Up, |old| Registered::Replaced(Box::new(old))),
                    None => {
                        self.workers.insert(id, registered);
                        Registered::Up
                    }
                }
            }
            RegistryEvent::Down { id } => match self.workers.get_mut(&id) {
                Some(w) => {
                    w.lease_id = None;
                    w.conn = None;
                    Registered::Down { id }
                }
                None => Registered::Unchanged,
            },
        }
    }

    /// Worker `id` said Hello on stream `conn_id`: it runs the controllers of `concurrency` (those this
    /// term accepted), and its credits start over. `None` if it is no longer a member.
    pub(super) fn said_hello(
        &mut self,
        id: &str,
        concurrency: HashMap<String, u32>,
        conn: Connection,
    ) -> Option<&mut WorkerState> {
        let w = self.workers.get_mut(id)?;
        w.concurrency = concurrency;
        w.credits.clear();
        // Its weight counts only what this leader accepted; the per-controller limit keeps the sum far
        // from overflowing, and it saturates regardless.
        w.capacity = w
            .concurrency
            .values()
            .fold(0u32, |sum, c| sum.saturating_add(*c))
            .max(1);
        w.conn = Some(conn);
        w.handshaken = true;
        w.disconnected_since = None;
        Some(w)
    }

    /// Stream `conn_id` of worker `id` ended: unless a newer one replaced it, the worker is disconnected
    /// (it keeps its items) and its credits are gone. Returns whether it was its current stream.
    pub(super) fn disconnected(&mut self, id: &str, conn_id: u64, now: Instant) -> bool {
        let Some(w) = self.on_stream(id, conn_id) else {
            return false;
        };
        w.conn = None;
        w.disconnected_since = Some(now);
        for credits in w.credits.values_mut() {
            *credits = 0;
        }
        true
    }

    /// Workers away longer than `grace` while their lease lives, not yet fenced: each is marked fenced
    /// for the longest TTL a lease may have (shortened by [`Membership::fenced`] once its lease is
    /// revoked) and returned with its lease, to revoke.
    pub(super) fn fence_silent(&mut self, now: Instant, grace: Duration) -> Vec<(String, i64)> {
        let mut silent = Vec::new();
        for w in self.workers.values_mut() {
            let away = w
                .disconnected_since
                .is_some_and(|t| now.saturating_duration_since(t) >= grace);
            if w.conn.is_none()
                && w.fenced_until.is_none()
                && away
                && let Some(lease) = w.lease_id
            {
                w.fenced_until = Some(now.checked_add(MAX_LEASE_TTL).unwrap_or(now));
                silent.push((w.id.clone(), lease));
            }
        }
        silent
    }

    /// Worker `id`'s lease is revoked (or could not be): it has certainly stopped `ttl` after `now`.
    pub(super) fn fenced(&mut self, id: &str, ttl: Duration, now: Instant) {
        if let Some(w) = self.workers.get_mut(id)
            && let Some(until) = &mut w.fenced_until
        {
            *until = (*until).min(now.checked_add(ttl).unwrap_or(now));
        }
    }

    /// Workers whose lease is gone and whose fence, if any, has passed: certainly stopped.
    pub(super) fn free_due(&self, now: Instant) -> Vec<String> {
        self.workers
            .values()
            .filter(|w| w.lease_id.is_none() && w.fenced_until.is_none_or(|t| t <= now))
            .map(|w| w.id.clone())
            .collect()
    }

    /// Forgets worker `id`, returning its state (its items and backlog) for the caller to settle.
    pub(super) fn remove(&mut self, id: &str) -> Option<WorkerState> {
        self.workers.remove(id)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use proptest::prelude::*;
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    use super::super::super::workers::Connection;
    use super::{MAX_REGISTERED_CAPACITY, Membership, Registered, Registration, RegistryEvent};

    fn connection(id: u64) -> Connection {
        let (tx, _rx) = mpsc::unbounded_channel();
        Connection { id, tx }
    }

    /// The same id registered on a new lease is a new incarnation: the old one's state (with what it
    /// held) comes back to be released, and the member is the new one, holding nothing.
    #[tokio::test(start_paused = true)]
    async fn a_registration_on_a_new_lease_replaces_the_old_incarnation() {
        let mut m = Membership::default();
        let now = Instant::now();
        m.load(vec![("w".into(), 1, 4)], 10, now);
        m.get_mut("w").map(|w| w.items.insert((1, 1)));
        let up = |lease_id| RegistryEvent::Up {
            id: "w".into(),
            lease_id,
            capacity: 4,
        };
        assert!(matches!(m.on_registry(11, up(1), now), Registered::Up));
        let Registered::Replaced(old) = m.on_registry(12, up(2), now) else {
            panic!("not replaced");
        };
        assert_eq!(old.lease_id, Some(1));
        assert!(old.items.contains(&(1, 1)));
        assert_eq!(m.lease_of("w"), Some(2));
        assert!(m.get("w").is_some_and(|w| w.items.is_empty()));
    }

    /// A worker away beyond the grace is fenced once; once its lease is gone it is free only after the
    /// fence has passed, and a stream of an older connection cannot disconnect the current one.
    #[tokio::test(start_paused = true)]
    async fn a_silent_worker_is_fenced_once_and_freed_after_its_fence() {
        let grace = Duration::from_secs(10);
        let mut m = Membership::default();
        let t0 = Instant::now();
        m.load(vec![("w".into(), 5, 1)], 1, t0);
        m.said_hello("w", HashMap::from([("c".into(), 1)]), connection(2));
        assert!(
            !m.disconnected("w", 1, t0),
            "an old stream's end changes nothing"
        );
        assert!(m.disconnected("w", 2, t0));
        assert!(m.fence_silent(t0 + grace / 2, grace).is_empty());
        assert_eq!(m.fence_silent(t0 + grace, grace), [("w".to_owned(), 5)]);
        assert!(
            m.fence_silent(t0 + grace * 2, grace).is_empty(),
            "fenced once"
        );
        m.fenced("w", Duration::from_secs(3), t0 + grace);
        assert!(matches!(
            m.on_registry(2, RegistryEvent::Down { id: "w".into() }, t0 + grace),
            Registered::Down { .. }
        ));
        assert!(m.free_due(t0 + grace + Duration::from_secs(2)).is_empty());
        assert_eq!(m.free_due(t0 + grace + Duration::from_secs(3)), ["w"]);
    }

    proptest! {
        #[test]
        fn registration_capacities_are_bounded(capacity in any::<u64>()) {
            let value = format!(r#"{{"id":"w","capacity":{capacity}}}"#);
            let read = Registration::capacity_of(value.as_bytes());
            prop_assert!(read <= MAX_REGISTERED_CAPACITY);
        }
    }
}
