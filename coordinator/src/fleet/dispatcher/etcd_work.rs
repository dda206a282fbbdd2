//! All of a term's etcd I/O: what the term starts from ([`read_term_start`]), the worker registry watch
//! ([`watch_registry`]), and the work the dispatcher hands off ([`EtcdWork`]). The dispatcher decides and
//! queues work; the loop runs it here, beside itself, so a slow or stalled etcd never stops dispatching
//! to the keys it does not concern; each result comes back to the loop as an [`EtcdDone`] event. Every
//! write is fenced by the term (a deposed leader writes nothing). Unit tests play this part themselves.
//!
//! Shard writes are batched, up to [`TXN_CHUNK`] per transaction; a batch that fails as a whole is
//! retried shard by shard, so one shard taken meanwhile does not fail the others.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, TxnOp, WatchOptions};
use flotilla_common::{Elected, Election, ElectionError, FleetKeys, get_prefix_paged};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::membership::{Registration, RegistryEvent};

/// etcd's default limit of operations in one transaction is 128; each shard write is one compare and
/// one put (plus the term's compare).
pub(super) const TXN_CHUNK: usize = 60;

/// A worker's lease TTL is its own choice; the leader waits at most this long after revoking it.
pub(super) const MAX_LEASE_TTL: Duration = Duration::from_secs(3600);

/// One shard's ownership write: a claim (`from` is `None`: the shard must be unowned) or a move (the
/// shard must still be owned by `from`). The key is put on `to`'s lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ShardWrite {
    pub(super) shard: u32,
    pub(super) from: Option<String>,
    pub(super) to: String,
    pub(super) lease: i64,
    /// A claim over a key that carries no lease (no write of the fleet's makes one: a bad restore or a
    /// hand edit left it, and it would never expire): the key's mod revision, which must not have
    /// changed since it was read.
    pub(super) replace: Option<i64>,
}

/// Who holds a shard's key in etcd, as a refused write found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Holder {
    pub(super) owner: String,
    /// The lease the key is on; 0 when it has none.
    pub(super) lease: i64,
    pub(super) mod_revision: i64,
    /// How long that lease has left, when etcd said.
    pub(super) ttl: Option<Duration>,
}

/// How a shard write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum WriteOutcome {
    /// etcd now says `to` owns the shard (until `to`'s lease ends).
    Written,
    /// The guard failed: the shard was not free (a claim) or no longer `from`'s (a move); `current` is
    /// its owner in etcd now, if any.
    Refused { current: Option<Holder> },
    /// etcd failed; nothing is known to have changed.
    Failed,
}

/// Work for etcd.
#[derive(Debug)]
pub(super) enum EtcdWork {
    /// Claims and moves of shards.
    Shards(Vec<ShardWrite>),
    /// Revoke a silent worker's lease, keeping the keys of `shards` (those it owns) for as long as it
    /// may still run their items; the result says how long after it its items are free.
    Fence {
        worker: String,
        lease: i64,
        shards: Vec<u32>,
    },
    /// Read a worker's registration: a Hello on `conn_id` names a lease the term has not seen it on.
    CheckRegistration { conn_id: u64, worker: String },
    /// Store a controller spec (for hot standbys and the next leader).
    PutSpec { name: String, encoded: Vec<u8> },
    /// Delete a retired controller's spec.
    DeleteSpec { name: String },
}

/// A result of [`EtcdWork`], for the loop.
#[derive(Debug)]
pub(super) enum EtcdDone {
    Shard(ShardWrite, WriteOutcome),
    /// The worker's lease was revoked (or could not be); its items are free `ttl` from now.
    Fenced {
        worker: String,
        ttl: Duration,
    },
    /// The registration read for the Hello waiting on `conn_id`; `Err` when etcd did not answer.
    Registration {
        conn_id: u64,
        read: Result<RegistrationRead, String>,
    },
    /// A fenced write found another leader: the term must end.
    Deposed(ElectionError),
}

/// A worker's registration as one etcd read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RegistrationRead {
    /// The store revision the read saw: the dispatcher compares it with how far the registry watch has
    /// told it, so an old read never overrides a newer watch event.
    pub(super) revision: i64,
    /// The registration's lease and advertised capacity; `None` when the worker is not registered.
    pub(super) found: Option<(i64, u32)>,
}

/// What a term starts from, read from etcd before it dispatches anything.
#[derive(Debug, Default)]
pub(super) struct TermStart {
    /// The revision of the reads: the registry watch starts after it.
    pub(super) revision: i64,
    /// Registered workers: id, lease and advertised capacity.
    pub(super) workers: Vec<(String, i64, u32)>,
    /// Shard owners as etcd says (at `revision`), with the lease each key is on and its mod revision.
    pub(super) shards: Vec<(u32, String, i64, i64)>,
    /// Stored controller specs: the etcd key (for logs) and the encoded spec.
    pub(super) specs: Vec<(String, Vec<u8>)>,
}

/// Reads workers, shard owners and controller specs.
///
/// # Errors
/// Any etcd failure: the term cannot start without them.
pub(super) async fn read_term_start(
    etcd: &Client,
    keys: &FleetKeys,
) -> Result<TermStart, etcd_client::Error> {
    let mut start = TermStart::default();
    // Each prefix in pages: anyone who may register can make these prefixes large, and one read over
    // the client's 4 MiB limit would otherwise end every term at its start.
    let (workers, revision) = get_prefix_paged(etcd, &keys.workers_prefix(), 0).await?;
    start.revision = revision;
    for kv in &workers {
        if let Some(id) = keys.parse_worker(kv.key()) {
            let capacity = Registration::capacity_of(kv.value());
            start.workers.push((id.to_owned(), kv.lease(), capacity));
        }
    }
    let (shards, _) = get_prefix_paged(etcd, &keys.shards_prefix(), start.revision).await?;
    for kv in &shards {
        if let (Some(s), Ok(owner)) = (keys.parse_shard(kv.key()), std::str::from_utf8(kv.value()))
        {
            start
                .shards
                .push((s, owner.to_owned(), kv.lease(), kv.mod_revision()));
        }
    }
    let (specs, _) = get_prefix_paged(etcd, &keys.controllers_prefix(), 0).await?;
    for kv in &specs {
        start.specs.push((
            String::from_utf8_lossy(kv.key()).into_owned(),
            kv.value().to_vec(),
        ));
    }
    Ok(start)
}

/// Results of etcd work go back to the loop on a channel of this capacity. Back-pressure: a task
/// whose result does not fit waits; the loop never waits on those tasks (it spawns them and reads
/// results in its `select!`), so this cannot deadlock, and etcd work is already bounded by what the
/// loop hands off (a shard only once until its result is back).
pub(super) const ETCD_DONE_CAPACITY: usize = 256;

/// Worker registry events reach the loop on a channel of this capacity. Back-pressure: the watch
/// task waits, and etcd's watch stream (flow-controlled by gRPC) waits with it; the loop never waits
/// on the watch task.
pub(super) const REGISTRY_CAPACITY: usize = 256;

/// What the work needs of the term.
#[derive(Clone)]
pub(super) struct EtcdWorker {
    pub(super) etcd: etcd_client::Client,
    pub(super) election: Election,
    pub(super) elected: Elected,
    pub(super) keys: FleetKeys,
    /// Results go back to the loop (capacity [`ETCD_DONE_CAPACITY`]).
    pub(super) done: mpsc::Sender<EtcdDone>,
    /// The term's stop: work not yet finished is abandoned when the term ends.
    pub(super) stop: CancellationToken,
}

impl EtcdWorker {
    /// Runs `work` on its own task; its results arrive on `done`.
    pub(super) fn spawn(&self, work: EtcdWork) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                biased;
                () = this.stop.cancelled() => {}
                () = this.run(work) => {}
            }
        });
    }

    async fn run(&self, work: EtcdWork) {
        match work {
            EtcdWork::Shards(writes) => {
                for chunk in writes.chunks(TXN_CHUNK) {
                    if let Err(deposed) = self.shard_chunk(chunk).await {
                        let _ = self.done.send(EtcdDone::Deposed(deposed)).await;
                        return;
                    }
                }
            }
            EtcdWork::Fence {
                worker,
                lease,
                shards,
            } => {
                let done = match self.fence(&worker, lease, &shards).await {
                    Ok(ttl) => EtcdDone::Fenced { worker, ttl },
                    Err(deposed) => EtcdDone::Deposed(deposed),
                };
                let _ = self.done.send(done).await;
            }
            EtcdWork::CheckRegistration { conn_id, worker } => {
                let read = self
                    .read_registration(&worker)
                    .await
                    .map_err(|e| e.to_string());
                let _ = self
                    .done
                    .send(EtcdDone::Registration { conn_id, read })
                    .await;
            }
            EtcdWork::PutSpec { name, encoded } => {
                let put = TxnOp::put(self.keys.controller(&name), encoded, None);
                self.spec_write(&name, put, "store").await;
            }
            EtcdWork::DeleteSpec { name } => {
                let delete = TxnOp::delete(self.keys.controller(&name), None);
                self.spec_write(&name, delete, "delete").await;
            }
        }
    }

    /// One transaction for the whole chunk; if it does not go through, one per shard.
    async fn shard_chunk(&self, chunk: &[ShardWrite]) -> Result<(), ElectionError> {
        let (compares, ops): (Vec<_>, Vec<_>) = chunk.iter().map(|w| self.guarded(w)).unzip();
        match self.election.fenced_txn(&self.elected, compares, ops).await {
            Ok(true) => {
                for w in chunk {
                    let _ = self
                        .done
                        .send(EtcdDone::Shard(w.clone(), WriteOutcome::Written))
                        .await;
                }
                return Ok(());
            }
            Ok(false) | Err(ElectionError::Etcd(_)) => {}
            Err(deposed) => return Err(deposed),
        }
        for w in chunk {
            let (compare, op) = self.guarded(w);
            let outcome = match self
                .election
                .fenced_txn(&self.elected, vec![compare], vec![op])
                .await
            {
                Ok(true) => WriteOutcome::Written,
                Ok(false) => WriteOutcome::Refused {
                    current: self.owner(w.shard).await,
                },
                Err(ElectionError::Etcd(err)) => {
                    debug!(shard = w.shard, error = %err, "shard write failed; the loop retries it");
                    WriteOutcome::Failed
                }
                Err(deposed) => return Err(deposed),
            };
            let _ = self.done.send(EtcdDone::Shard(w.clone(), outcome)).await;
        }
        Ok(())
    }

    /// The guard and the put of one shard write.
    fn guarded(&self, w: &ShardWrite) -> (Compare, TxnOp) {
        let key = self.keys.shard(w.shard);
        let compare = match (&w.from, w.replace) {
            (None, None) => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            (None, Some(revision)) => {
                Compare::mod_revision(key.clone(), CompareOp::Equal, revision)
            }
            (Some(from), _) => Compare::value(key.clone(), CompareOp::Equal, from.clone()),
        };
        let put = TxnOp::put(
            key,
            w.to.clone(),
            Some(PutOptions::new().with_lease(w.lease)),
        );
        (compare, put)
    }

    /// The worker's registration now.
    async fn read_registration(
        &self,
        worker: &str,
    ) -> Result<RegistrationRead, etcd_client::Error> {
        let mut etcd = self.etcd.clone();
        let resp = etcd.get(self.keys.worker(worker), None).await?;
        Ok(RegistrationRead {
            revision: resp.header().map_or(0, |h| h.revision()),
            found: resp
                .kvs()
                .first()
                .map(|kv| (kv.lease(), Registration::capacity_of(kv.value()))),
        })
    }

    /// Who holds the shard's key in etcd now; `None` when no one does or etcd does not answer.
    async fn owner(&self, shard: u32) -> Option<Holder> {
        let mut etcd = self.etcd.clone();
        let resp = etcd.get(self.keys.shard(shard), None).await.ok()?;
        let kv = resp.kvs().first()?;
        let owner = String::from_utf8_lossy(kv.value()).into_owned();
        let ttl = if kv.lease() == 0 {
            None
        } else {
            etcd.lease_time_to_live(kv.lease(), None)
                .await
                .ok()
                .and_then(|r| u64::try_from(r.ttl()).ok())
                .map(Duration::from_secs)
        };
        Some(Holder {
            owner,
            lease: kv.lease(),
            mod_revision: kv.mod_revision(),
            ttl,
        })
    }

    /// Revokes `lease`; returns how long its holder may still believe it holds it: the lease's granted
    /// TTL, at least 1 s and at most [`MAX_LEASE_TTL`].
    ///
    /// Revoking deletes the worker's shard keys at once, while the worker may run its items for up to
    /// that TTL more (it fences itself when it cannot renew). This term waits the TTL itself, but a
    /// leader of a later term would read the shards as free. So first the keys of `shards` (those the
    /// worker owns) move onto a lease of their own with that TTL, plus a second: whichever leader reads
    /// them sees them owned until the worker has certainly stopped, and a claim waits for them.
    ///
    /// # Errors
    /// A fenced write found another leader.
    async fn fence(
        &self,
        worker: &str,
        lease: i64,
        shards: &[u32],
    ) -> Result<Duration, ElectionError> {
        let mut etcd = self.etcd.clone();
        let ttl = etcd
            .lease_time_to_live(lease, None)
            .await
            .map(|r| r.granted_ttl())
            .unwrap_or(0);
        // The worker chose its lease's TTL: bound it before the loop does arithmetic with it.
        let ttl = Duration::from_secs(u64::try_from(ttl).unwrap_or(0).max(1)).min(MAX_LEASE_TTL);
        if !shards.is_empty() {
            self.keep_shards(worker, shards, ttl).await?;
        }
        if let Err(err) = etcd.lease_revoke(lease).await {
            debug!(worker, error = %err, "lease revoke failed (already gone?)");
        }
        Ok(ttl)
    }

    /// Puts the keys of `shards` still owned by `worker` on a new lease of `ttl` plus a second (same
    /// value), one transaction per chunk, shard by shard where a chunk's guard fails.
    async fn keep_shards(
        &self,
        worker: &str,
        shards: &[u32],
        ttl: Duration,
    ) -> Result<(), ElectionError> {
        let secs = i64::try_from(ttl.as_secs())
            .unwrap_or(i64::MAX)
            .saturating_add(1);
        let kept = match self.etcd.clone().lease_grant(secs, None).await {
            Ok(grant) => grant.id(),
            Err(err) => {
                warn!(worker, error = %err, "cannot keep a fenced worker's shards past its lease; a leader of a later term could claim them before the worker stopped");
                return Ok(());
            }
        };
        let keep = |s: u32| {
            let key = self.keys.shard(s);
            let compare = Compare::value(key.clone(), CompareOp::Equal, worker);
            let put = TxnOp::put(key, worker, Some(PutOptions::new().with_lease(kept)));
            (compare, put)
        };
        for chunk in shards.chunks(TXN_CHUNK) {
            let (compares, ops): (Vec<_>, Vec<_>) = chunk.iter().map(|s| keep(*s)).unzip();
            match self.election.fenced_txn(&self.elected, compares, ops).await {
                Ok(true) => continue,
                Ok(false) | Err(ElectionError::Etcd(_)) => {}
                Err(deposed) => return Err(deposed),
            }
            for s in chunk {
                let (compare, op) = keep(*s);
                match self
                    .election
                    .fenced_txn(&self.elected, vec![compare], vec![op])
                    .await
                {
                    // Refused: the shard is no longer the worker's (a move went through).
                    Ok(_) => {}
                    Err(ElectionError::Etcd(err)) => {
                        warn!(worker, shard = s, error = %err, "cannot keep a fenced worker's shard past its lease")
                    }
                    Err(deposed) => return Err(deposed),
                }
            }
        }
        Ok(())
    }

    async fn spec_write(&self, name: &str, op: TxnOp, what: &str) {
        match self
            .election
            .fenced_txn(&self.elected, vec![], vec![op])
            .await
        {
            Ok(_) => {}
            // A spec not stored is learnt again from the workers' Hellos; one not deleted is retired
            // again by the next leader.
            Err(ElectionError::Etcd(err)) => {
                warn!(controller = name, error = %err, "cannot {what} a controller spec in etcd")
            }
            Err(deposed) => {
                let _ = self.done.send(EtcdDone::Deposed(deposed)).await;
            }
        }
    }
}

/// Follows `workers/` from `revision`, turning puts and deletes into registry events, each with the
/// revision of its change (a delete's is the revision it happened at). Ends when the watch does (the
/// loop then ends the term) or on `stop`.
pub(super) async fn watch_registry(
    mut etcd: Client,
    keys: FleetKeys,
    revision: i64,
    tx: mpsc::Sender<(i64, RegistryEvent)>,
    stop: CancellationToken,
) {
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(revision);
    let mut stream = match etcd.watch(keys.workers_prefix(), Some(options)).await {
        Ok(stream) => stream,
        Err(err) => {
            warn!(error = %err, "cannot watch worker registrations; ending the term");
            return;
        }
    };
    loop {
        let message = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            m = stream.message() => m,
        };
        let Ok(Some(resp)) = message else {
            warn!("worker registration watch ended; ending the term");
            return;
        };
        if resp.canceled() {
            warn!("worker registration watch cancelled (compacted?); ending the term");
            return;
        }
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            let Some(id) = keys.parse_worker(kv.key()) else {
                continue;
            };
            let ev = match event.event_type() {
                etcd_client::EventType::Put => RegistryEvent::Up {
                    id: id.to_owned(),
                    lease_id: kv.lease(),
                    capacity: Registration::capacity_of(kv.value()),
                },
                etcd_client::EventType::Delete => RegistryEvent::Down { id: id.to_owned() },
            };
            let sent = tokio::select! {
                biased;
                () = stop.cancelled() => return,
                sent = tx.send((kv.mod_revision(), ev)) => sent,
            };
            if sent.is_err() {
                return;
            }
        }
    }
}
