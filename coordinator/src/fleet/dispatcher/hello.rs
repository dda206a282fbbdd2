//! A worker joining the term: its Hello checked against its registration (read from etcd beside the loop
//! when the term does not know it yet), its controllers taken, what it says it holds reconciled with
//! what this term thinks it holds; and the registry watch's events. [`Membership`] keeps the workers;
//! this carries out what a change means for items, shards and controllers.
//!
//! [`Membership`]: super::membership::Membership

use std::collections::HashSet;

use flotilla_common::Verdict;
use flotilla_proto as proto;
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::super::messages::{Hello, HelloRefused};
use super::super::workers::{Connection, Outbound};
use super::etcd_work::{EtcdWork, RegistrationRead};
use super::membership::{Admission, PendingHello, Registered, RegistryEvent};
use super::{Dispatcher, HelloReply};
use crate::metrics::ReasonLabel;
use crate::shard::shard_of;

impl Dispatcher {
    /// A worker said Hello on a new stream. A worker this term knows registered on the lease it names
    /// is answered at once; any other waits for its registration to be read from etcd beside the loop
    /// ([`Dispatcher::on_registration_read`]), so a slow etcd delays only it.
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
        if let Admission::Registered = self.membership.registered_on(&id, hello.lease_id) {
            let welcome = self.welcome(hello, conn_id, tx);
            let _ = reply.send(welcome);
            return;
        }
        self.membership
            .wait_for_registration(conn_id, PendingHello { hello, tx, reply });
        self.etcd_work.push(EtcdWork::CheckRegistration {
            conn_id,
            worker: id,
        });
    }

    /// The registration read for the Hello waiting on `conn_id` is back (see
    /// [`Membership::registration_read`](super::membership::Membership::registration_read)). An etcd
    /// failure is the worker's to retry, not a reason to end the term.
    pub(super) fn on_registration_read(
        &mut self,
        conn_id: u64,
        read: Result<RegistrationRead, String>,
    ) {
        let Some((PendingHello { hello, tx, reply }, admission, registered)) = self
            .membership
            .registration_read(conn_id, read, Instant::now())
        else {
            return;
        };
        if let Some(registered) = registered {
            self.registered(registered);
        }
        let id = hello.worker_id.clone();
        match admission {
            Admission::Unavailable(err) => {
                warn!(worker = %id, error = %err, "cannot check a worker's registration; it will retry");
                let _ = reply.send(Err(HelloRefused::RegistryUnavailable));
            }
            Admission::Unregistered => {
                self.log_refusal(
                    &id,
                    "unregistered_worker",
                    "refusing a worker that is not registered on its lease",
                );
                let _ = reply.send(Err(HelloRefused::Unregistered {
                    worker: id,
                    lease: hello.lease_id,
                }));
            }
            Admission::Registered => {
                let welcome = self.welcome(hello, conn_id, tx);
                let _ = reply.send(welcome);
            }
        }
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
            match self.running.spec_matches(&spec) {
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
        let connection = Connection { id: conn_id, tx };
        let Some(w) = self
            .membership
            .said_hello(&id, accepted.into_iter().collect(), connection)
        else {
            return Err(HelloRefused::LostRegistration { worker: id });
        };
        for h in &hello.held {
            if h.term >= self.term || self.items.contains((h.term, h.item_id)) {
                continue;
            }
            let shards = self.handover.table_mut();
            let shard = shard_of(&h.controller, &h.key, shards.count());
            self.items
                .adopt((h.term, h.item_id), w, shards, &h.controller, &h.key, shard);
        }
        let shards = self.handover.said_hello(&id);
        self.needs_rebalance = true;
        info!(worker = %id, held = hello.held.len(), shards = shards.len(), "worker connected");
        self.warn_on_mixed_controllers();
        // Published now, not at the end of the turn: the worker may read the cache the moment its
        // Welcome arrives, which can be before this turn ends (the reply travels on another thread).
        self.publish_access();
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
    fn warn_on_mixed_controllers(&self) {
        for (worker, lacking) in self.membership.lacking_controllers() {
            if let Verdict::Log { suppressed } =
                self.ctx.metrics.refused(worker, "worker_lacks_controllers")
            {
                warn!(
                    worker,
                    ?lacking,
                    suppressed,
                    "worker lacks controllers other workers of the fleet run; their keys wait while it owns their shards (run one fleet per set of controllers)"
                );
            }
        }
    }

    /// Counts a refusal of `peer` and logs it, rate-limited per peer and reason.
    fn log_refusal(&self, peer: &str, reason: &str, message: &str) {
        if let Verdict::Log { suppressed } = self.ctx.metrics.refused(peer, reason) {
            warn!(worker = %peer, reason, suppressed, "{message}");
        }
    }

    /// An event of the registry watch, at etcd revision `revision`.
    pub(super) fn on_registry(&mut self, revision: i64, ev: RegistryEvent) {
        // A worker registering (again) may make a held shard key current: claim at once.
        self.handover.registry_changed();
        let registered = self.membership.on_registry(revision, ev, Instant::now());
        self.registered(registered);
    }

    /// Carries out a change of the worker registry.
    fn registered(&mut self, registered: Registered) {
        match registered {
            Registered::Leaseless { id } => {
                if let Verdict::Log { suppressed } =
                    self.ctx.metrics.refused("etcd", "leaseless_worker_key")
                {
                    error!(worker = %id, suppressed, "a worker registration in etcd carries no lease; ignored");
                }
            }
            Registered::Replaced(old) => self.release_worker(*old, "lease_expired"),
            Registered::Down { id } => {
                info!(worker = %id, "worker lease ended");
                self.needs_rebalance = true;
                self.access_dirty = true;
            }
            Registered::Up | Registered::Unchanged => {}
        }
    }
}
