//! etcd work beside the dispatcher's loop: the loop decides and hands writes off here, so a slow or
//! stalled etcd never stops dispatching to the keys it does not concern; each result comes back to the
//! loop as an [`EtcdDone`] event. Every write is fenced by the term (a deposed leader writes nothing).
//!
//! Shard writes are batched, up to [`TXN_CHUNK`] per transaction; a batch that fails as a whole is
//! retried shard by shard, so one shard taken meanwhile does not fail the others.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, TxnOp};
use flotilla_common::{Elected, Election, ElectionError, FleetKeys};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

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
}

/// How a shard write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum WriteOutcome {
    /// etcd now says `to` owns the shard (until `to`'s lease ends).
    Written,
    /// The guard failed: the shard was not free (a claim) or no longer `from`'s (a move); `current` is
    /// its owner in etcd now, if any.
    Refused { current: Option<String> },
    /// etcd failed; nothing is known to have changed.
    Failed,
}

/// Work for etcd.
#[derive(Debug)]
pub(super) enum EtcdWork {
    /// Claims and moves of shards.
    Shards(Vec<ShardWrite>),
    /// Revoke a silent worker's lease; the result says how long after it its items are free.
    Fence { worker: String, lease: i64 },
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
    /// A fenced write found another leader: the term must end.
    Deposed(ElectionError),
}

/// What the work needs of the term.
#[derive(Clone)]
pub(super) struct EtcdWorker {
    pub(super) etcd: etcd_client::Client,
    pub(super) election: Election,
    pub(super) elected: Elected,
    pub(super) keys: FleetKeys,
    /// Results go back to the loop. Unbounded, and bounded in practice: at most one result per shard
    /// write, fenced worker or spec the loop handed off, and the loop hands a shard off only once until
    /// its result is back.
    pub(super) done: mpsc::UnboundedSender<EtcdDone>,
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
                        let _ = self.done.send(EtcdDone::Deposed(deposed));
                        return;
                    }
                }
            }
            EtcdWork::Fence { worker, lease } => {
                let ttl = self.fence(&worker, lease).await;
                let _ = self.done.send(EtcdDone::Fenced { worker, ttl });
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
                        .send(EtcdDone::Shard(w.clone(), WriteOutcome::Written));
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
            let _ = self.done.send(EtcdDone::Shard(w.clone(), outcome));
        }
        Ok(())
    }

    /// The guard and the put of one shard write.
    fn guarded(&self, w: &ShardWrite) -> (Compare, TxnOp) {
        let key = self.keys.shard(w.shard);
        let compare = match &w.from {
            None => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            Some(from) => Compare::value(key.clone(), CompareOp::Equal, from.clone()),
        };
        let put = TxnOp::put(
            key,
            w.to.clone(),
            Some(PutOptions::new().with_lease(w.lease)),
        );
        (compare, put)
    }

    /// The shard's owner in etcd now; `None` when it has none or etcd does not answer.
    async fn owner(&self, shard: u32) -> Option<String> {
        let mut etcd = self.etcd.clone();
        let resp = etcd.get(self.keys.shard(shard), None).await.ok()?;
        let kv = resp.kvs().first()?;
        std::str::from_utf8(kv.value()).ok().map(str::to_owned)
    }

    /// Revokes `lease`; returns how long its holder may still believe it holds it: the lease's granted
    /// TTL, at least 1 s and at most [`MAX_LEASE_TTL`].
    async fn fence(&self, worker: &str, lease: i64) -> Duration {
        let mut etcd = self.etcd.clone();
        let ttl = etcd
            .lease_time_to_live(lease, None)
            .await
            .map(|r| r.granted_ttl())
            .unwrap_or(0);
        // The worker chose its lease's TTL: bound it before the loop does arithmetic with it.
        let ttl = Duration::from_secs(u64::try_from(ttl).unwrap_or(0).max(1)).min(MAX_LEASE_TTL);
        if let Err(err) = etcd.lease_revoke(lease).await {
            debug!(worker, error = %err, "lease revoke failed (already gone?)");
        }
        ttl
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
                let _ = self.done.send(EtcdDone::Deposed(deposed));
            }
        }
    }
}
