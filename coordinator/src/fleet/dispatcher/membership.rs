//! Which workers the term knows: Hello and registration checks, the etcd worker registry, workers that
//! went silent (fenced by revoking their lease) and workers whose lease ended (their items run again).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use flotilla_common::Verdict;
use flotilla_proto as proto;
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::super::messages::{Hello, HelloRefused};
use super::super::shards::ShardState;
use super::super::workers::{Connection, Outbound, WorkerState};
use super::etcd_work::{EtcdWork, MAX_LEASE_TTL, RegistrationRead};
use super::{Dispatcher, HelloReply};
use crate::metrics::ReasonLabel;
use crate::shard::shard_of;

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
/// passed ([`Dispatcher::free_worker`]); it keeps its items until then, whatever its stream does.
#[derive(Default)]
pub(super) struct Membership {
    /// By worker id.
    pub(super) workers: HashMap<String, WorkerState>,
    /// Hellos waiting for their worker's registration to be read, by stream.
    pub(super) pending_hellos: HashMap<u64, PendingHello>,
    /// The newest etcd revision the registry watch (or the term's start) has told of.
    pub(super) registry_revision: i64,
}

/// A Hello waiting for its worker's registration to be read from etcd.
pub(super) struct PendingHello {
    pub(super) hello: Hello,
    pub(super) tx: Outbound,
    pub(super) reply: HelloReply,
}

impl Dispatcher {
    /// A worker said Hello on a new stream. A worker this term knows registered on the lease it names
    /// is answered at once; any other waits (in `pending_hellos`) for its registration to be read from
    /// etcd beside the loop ([`Dispatcher::on_registration_read`]), so a slow etcd delays only it.
    pub(super) fn connect(&mut self, hello: Hello, conn_id: u64, tx: Outbound, reply: HelloReply) {
        let id = hello.worker_id.clone();
        if hello.known_term > self.term {
            self.log_refusal(
                &id,
                "stale_term",
                "refusing a worker that has seen a newer term",
            );
            let _ = reply.send(Err(HelloRefused::NewerTerm {
                worker: id,
                seen: hello.known_term,
                term: self.term,
            }));
            return;
        }
        // Identity: the worker must be registered in etcd on the lease it names. (mTLS adds the
        // certificate check in front of this.)
        let registered =
            self.membership.workers.get(&id).and_then(|w| w.lease_id) == Some(hello.lease_id);
        if registered {
            let welcome = self.welcome(hello, conn_id, tx);
            let _ = reply.send(welcome);
            return;
        }
        self.membership
            .pending_hellos
            .insert(conn_id, PendingHello { hello, tx, reply });
        self.etcd_work.push(EtcdWork::CheckRegistration {
            conn_id,
            worker: id,
        });
    }

    /// The registration read for the Hello waiting on `conn_id` is back. A read no newer than what the
    /// registry watch has told the term is not trusted over it (the worker's key may have gone since
    /// the read); a newer one is applied as a registry event. An etcd failure is the worker's to retry,
    /// not a reason to end the term.
    pub(super) fn on_registration_read(
        &mut self,
        conn_id: u64,
        read: Result<RegistrationRead, String>,
    ) {
        let Some(PendingHello { hello, tx, reply }) =
            self.membership.pending_hellos.remove(&conn_id)
        else {
            return;
        };
        if reply.is_closed() {
            // The stream gave up waiting: welcoming it would leave a connection nobody reads.
            return;
        }
        let id = hello.worker_id.clone();
        let registered = match read {
            Err(err) => {
                warn!(worker = %id, error = %err, "cannot check a worker's registration; it will retry");
                let _ = reply.send(Err(HelloRefused::RegistryUnavailable));
                return;
            }
            Ok(read) if read.revision <= self.membership.registry_revision => {
                self.membership.workers.get(&id).and_then(|w| w.lease_id) == Some(hello.lease_id)
            }
            Ok(RegistrationRead {
                found: Some((lease_id, capacity)),
                ..
            }) if lease_id == hello.lease_id => {
                self.apply_registration(RegistryEvent::Up {
                    id: id.clone(),
                    lease_id,
                    capacity,
                });
                true
            }
            Ok(_) => false,
        };
        if !registered {
            self.log_refusal(
                &id,
                "unregistered_worker",
                "refusing a worker that is not registered on its lease",
            );
            let _ = reply.send(Err(HelloRefused::Unregistered {
                worker: id,
                lease: hello.lease_id,
            }));
            return;
        }
        let welcome = self.welcome(hello, conn_id, tx);
        let _ = reply.send(welcome);
    }

    /// Takes a registered worker's Hello: its controllers, what it says it holds, its new stream.
    fn welcome(
        &mut self,
        hello: Hello,
        conn_id: u64,
        tx: Outbound,
    ) -> Result<proto::Welcome, HelloRefused> {
        let id = hello.worker_id.clone();
        let mut rejected = Vec::new();
        let mut accepted = Vec::new();
        for (spec, concurrency) in hello.controllers {
            let known = self
                .running
                .states
                .get(&spec.name)
                .map(|existing| existing.spec == spec);
            match known {
                Some(false) => {
                    self.log_refusal(
                        &id,
                        "controller_spec_mismatch",
                        "refusing a controller whose spec differs from the fleet's",
                    );
                    rejected.push(proto::Rejected {
                        controller: spec.name.clone(),
                        reason: "spec differs from the one the fleet runs; roll all workers to one version".into(),
                    });
                }
                Some(true) => accepted.push((spec.name.clone(), concurrency)),
                None => {
                    // Stored beside the loop, for hot standbys and the next leader (which also learn
                    // it from the workers' Hellos).
                    self.etcd_work.push(EtcdWork::PutSpec {
                        name: spec.name.clone(),
                        encoded: crate::fleet::spec_codec::encode(&spec),
                    });
                    accepted.push((spec.name.clone(), concurrency));
                    self.register_controller(spec);
                }
            }
        }
        // Reconcile what the worker says it holds with what this leader thinks it holds.
        let held: HashSet<(u64, u64)> = hello.held.iter().map(|h| (h.term, h.item_id)).collect();
        let ours: Vec<(u64, u64)> = self
            .membership
            .workers
            .get(&id)
            .map(|w| w.items.iter().copied().collect())
            .unwrap_or_default();
        for item_id in ours {
            if !held.contains(&item_id) {
                // Finished while the stream was down, or never received: run it again to be sure.
                self.ctx
                    .metrics
                    .reclaimed
                    .get_or_create(&ReasonLabel {
                        reason: "not_held_at_reconnect".into(),
                    })
                    .inc();
                self.reclaim(item_id);
            }
        }
        let Some(w) = self.membership.workers.get_mut(&id) else {
            return Err(HelloRefused::LostRegistration { worker: id });
        };
        for h in &hello.held {
            if h.term >= self.term || self.items.contains((h.term, h.item_id)) {
                continue;
            }
            let shard = shard_of(&h.controller, &h.key, self.handover.shards.count());
            self.items.adopt(
                (h.term, h.item_id),
                w,
                &mut self.handover.shards,
                &h.controller,
                &h.key,
                shard,
            );
        }
        w.concurrency = accepted.into_iter().collect();
        w.credits.clear();
        // Its weight counts only what this leader accepted; the per-controller limit keeps the sum far
        // from overflowing, and it saturates regardless.
        w.capacity = w
            .concurrency
            .values()
            .fold(0u32, |sum, c| sum.saturating_add(*c))
            .max(1);
        self.access_dirty = true;
        w.conn = Some(Connection { id: conn_id, tx });
        w.handshaken = true;
        w.disconnected_since = None;
        let shards = self.handover.shards.owned_by(&id);
        // Moves away from it waited for this Hello (it might have held items nobody here knew of):
        // what it holds is known now, so they can finish once those are done.
        for &s in &shards {
            if matches!(self.handover.shards.state(s), ShardState::Moving { .. }) {
                self.handover.pending_moves.insert(s);
            }
        }
        self.needs_rebalance = true;
        info!(worker = %id, held = hello.held.len(), shards = shards.len(), "worker connected");
        self.warn_on_mixed_controllers();
        Ok(proto::Welcome {
            term: self.term,
            leader_id: self.ctx.leader.id.clone(),
            shards,
            rejected,
        })
    }

    /// Shards are fleet-wide: a worker without a controller other connected workers run holds that
    /// controller's keys back while it owns their shards. Says so for every such worker (worker pools
    /// with different controllers belong in separate fleets).
    pub(super) fn warn_on_mixed_controllers(&self) {
        let connected: Vec<&WorkerState> = self
            .membership
            .workers
            .values()
            .filter(|w| w.conn.is_some())
            .collect();
        let all: BTreeSet<&String> = connected
            .iter()
            .flat_map(|w| w.concurrency.keys())
            .collect();
        for w in connected {
            let lacking: Vec<&str> = all
                .iter()
                .filter(|c| !w.concurrency.contains_key(c.as_str()))
                .map(|c| c.as_str())
                .collect();
            if !lacking.is_empty()
                && let Verdict::Log { suppressed } =
                    self.ctx.metrics.refused(&w.id, "worker_lacks_controllers")
            {
                warn!(worker = %w.id, ?lacking, suppressed, "worker lacks controllers other workers of the fleet run; their keys wait while it owns their shards (run one fleet per set of controllers)");
            }
        }
    }

    /// Counts a refusal of `peer` and logs it, rate-limited per peer and reason.
    pub(super) fn log_refusal(&self, peer: &str, reason: &str, message: &str) {
        if let Verdict::Log { suppressed } = self.ctx.metrics.refused(peer, reason) {
            warn!(worker = %peer, reason, suppressed, "{message}");
        }
    }

    /// A worker that stays away longer than the grace while its lease lives would keep its shards
    /// forever; revoke its lease (it fences itself on the next renewal) and free its items a lease
    /// TTL later, when it has certainly stopped. The revoke runs beside the loop; until its result
    /// (`on_fenced`) the worker counts as fenced for the longest TTL a lease may have.
    pub(super) fn fence_silent_workers(&mut self, now: Instant) {
        let grace = self.ctx.config.worker_reconnect_grace;
        let silent: Vec<(String, i64)> = self
            .membership
            .workers
            .values()
            .filter(|w| {
                w.conn.is_none()
                    && w.fenced_until.is_none()
                    && w.disconnected_since
                        .is_some_and(|t| now.saturating_duration_since(t) >= grace)
            })
            .filter_map(|w| w.lease_id.map(|l| (w.id.clone(), l)))
            .collect();
        for (worker, lease) in silent {
            // Limited, not per worker: a thousand workers gone at once are one event.
            if let Verdict::Log { suppressed } = self.ctx.metrics.log_limiter.check(
                "fleet",
                "silent_worker",
                std::time::Instant::now(),
            ) {
                warn!(%worker, suppressed, "worker silent beyond the reconnect grace; revoking its lease");
            }
            if let Some(w) = self.membership.workers.get_mut(&worker) {
                w.fenced_until = Some(now.checked_add(MAX_LEASE_TTL).unwrap_or(now));
                self.access_dirty = true;
            }
            let shards = self.handover.shards.owned_by(&worker);
            self.etcd_work.push(EtcdWork::Fence {
                worker,
                lease,
                shards,
            });
        }
    }

    /// A silent worker's lease is revoked (or could not be): its items are free `ttl` from now.
    pub(super) fn on_fenced(&mut self, worker: &str, ttl: Duration) {
        let now = Instant::now();
        if let Some(w) = self.membership.workers.get_mut(worker)
            && let Some(until) = &mut w.fenced_until
        {
            *until = (*until).min(now.checked_add(ttl).unwrap_or(now));
        }
    }

    /// An event of the registry watch, at etcd revision `revision`.
    pub(super) fn on_registry(&mut self, revision: i64, ev: RegistryEvent) {
        self.membership.registry_revision = self.membership.registry_revision.max(revision);
        // A worker registering (again) may make a held shard key current: claim at once.
        self.handover.claim_retry.clear();
        self.apply_registration(ev);
    }

    /// A worker's registration appeared, changed or went.
    pub(super) fn apply_registration(&mut self, ev: RegistryEvent) {
        match ev {
            RegistryEvent::Up {
                id, lease_id: 0, ..
            } => {
                if let Verdict::Log { suppressed } =
                    self.ctx.metrics.refused("etcd", "leaseless_worker_key")
                {
                    error!(worker = %id, suppressed, "a worker registration in etcd carries no lease; ignored");
                }
            }
            RegistryEvent::Up {
                id,
                lease_id,
                capacity,
            } => {
                let now = Instant::now();
                match self.membership.workers.get_mut(&id) {
                    Some(w) if w.lease_id == Some(lease_id) => {
                        w.capacity = w.capacity.max(capacity)
                    }
                    Some(_) => {
                        // Same id on a new lease: the old incarnation is gone (its lease ended).
                        self.free_worker(&id, "lease_expired");
                        self.membership.workers.insert(
                            id.clone(),
                            WorkerState::registered(&id, lease_id, capacity, now),
                        );
                    }
                    None => {
                        self.membership.workers.insert(
                            id.clone(),
                            WorkerState::registered(&id, lease_id, capacity, now),
                        );
                    }
                }
            }
            RegistryEvent::Down { id } => {
                if let Some(w) = self.membership.workers.get_mut(&id) {
                    info!(worker = %id, "worker lease ended");
                    w.lease_id = None;
                    w.conn = None;
                    self.needs_rebalance = true;
                    self.access_dirty = true;
                }
            }
        }
    }

    /// Forgets a worker whose lease is gone: its items run again elsewhere, its shards are free.
    pub(super) fn free_worker(&mut self, id: &str, reason: &str) {
        let Some(mut w) = self.membership.workers.remove(id) else {
            return;
        };
        let items: Vec<(u64, u64)> = w.items.drain().collect();
        if !items.is_empty() {
            self.ctx
                .metrics
                .reclaimed
                .get_or_create(&ReasonLabel {
                    reason: reason.into(),
                })
                .inc_by(items.len() as u64);
            info!(
                worker = id,
                items = items.len(),
                "re-dispatching the items of a worker whose lease ended"
            );
        }
        for item_id in items {
            self.reclaim(item_id);
        }
        for s in 0..self.handover.shards.count() {
            if self.handover.committing.contains(&s) {
                // Its write is in flight; settling the result accounts for the worker's end.
                continue;
            }
            match self.handover.shards.state(s).clone() {
                // Its ownership keys died with its lease (or, fenced, live on until it has certainly
                // stopped: a claim waits for them).
                ShardState::Owned(o) if o == id => {
                    self.handover.shards.set_state(s, ShardState::Unowned)
                }
                ShardState::Moving { from, .. } if from == id => {
                    self.handover.shards.set_state(s, ShardState::Unowned)
                }
                ShardState::Moving { from, to } if to == id => {
                    self.handover.shards.set_state(s, ShardState::Owned(from));
                    self.unpark(s);
                }
                _ => {}
            }
        }
        for (controller, keys) in w.backlog.drain() {
            for (key, _) in keys {
                self.route(controller.clone(), key);
            }
        }
        self.needs_rebalance = true;
        self.access_dirty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_REGISTERED_CAPACITY, Registration};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn registration_capacities_are_bounded(capacity in any::<u64>()) {
            let value = format!(r#"{{"id":"w","capacity":{capacity}}}"#);
            let read = Registration::capacity_of(value.as_bytes());
            prop_assert!(read <= MAX_REGISTERED_CAPACITY);
        }
    }
}
