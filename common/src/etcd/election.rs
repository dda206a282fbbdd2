//! Leader election on etcd's election API: campaign on a session's lease, learn the leader and its term,
//! resign. The term of a leader is the create revision of its election key — unique and increasing
//! across leaders, so it fences every write and message of a deposed leader.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, LeaderKey, ResignOptions, Txn, TxnOp};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use super::Session;

/// What a leader publishes about itself in its election key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderInfo {
    /// The coordinator's identity.
    pub id: String,
    /// Where workers reach its gRPC services (`host:port`).
    pub address: String,
}

/// A leader as seen by anyone: who, and since which term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// The leader's published info.
    pub info: LeaderInfo,
    /// The create revision of the leader's election key.
    pub term: u64,
}

/// Errors of an [`Election`].
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// etcd failed.
    #[error("etcd election operation failed")]
    Etcd(#[source] etcd_client::Error),
    /// The session's lease was lost before or while campaigning.
    #[error("session lost")]
    SessionLost,
    /// A leader key holds something that is not a [`LeaderInfo`].
    #[error("leader key holds an unreadable value")]
    BadValue(#[source] serde_json::Error),
    /// A fenced write found that this process no longer leads.
    #[error("not the leader of term {0} any more")]
    Deposed(u64),
}

/// One election name in etcd.
#[derive(Clone)]
pub struct Election {
    client: Client,
    /// The client campaigns go through; `client` unless [`Election::campaigning_with`].
    campaign_client: Client,
    name: String,
}

/// Proof of being elected; fences writes with [`Election::fenced_txn`].
#[derive(Debug, Clone)]
pub struct Elected {
    key: LeaderKey,
}

impl Elected {
    /// The term: create revision of this leader's election key.
    pub fn term(&self) -> u64 {
        u64::try_from(self.key.rev()).unwrap_or(0)
    }
}

impl Election {
    /// The election `name` (see [`crate::FleetKeys::election`]).
    pub fn new(client: Client, name: String) -> Self {
        Self {
            campaign_client: client.clone(),
            client,
            name,
        }
    }

    /// Campaigns through `client`, one without a request timeout
    /// ([`crate::EtcdClientConfig::connect_for_campaigns`]): a campaign waits for as long as another
    /// process leads, and one cut off by a timeout loses its place in line (etcd deletes the key of a
    /// cancelled campaign), so a standby could be overtaken by a candidate that came after it.
    #[must_use]
    pub fn campaigning_with(mut self, client: Client) -> Self {
        self.campaign_client = client;
        self
    }

    /// Waits until this process leads, then returns its term.
    ///
    /// # Errors
    /// [`ElectionError::SessionLost`] if the session is lost first; [`ElectionError::Etcd`] on etcd errors.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the campaign; the candidate key stays until the session ends, so a
    /// caller that gives up campaigning should also close the session.
    pub async fn campaign(
        &self,
        session: &Session,
        info: &LeaderInfo,
    ) -> Result<Elected, ElectionError> {
        let value = serde_json::to_vec(info).map_err(ElectionError::BadValue)?;
        let mut client = self.campaign_client.clone();
        let lost = session.lost();
        let response = tokio::select! {
            biased;
            () = lost.cancelled() => return Err(ElectionError::SessionLost),
            r = client.campaign(self.name.as_str(), value, session.lease_id()) => r.map_err(ElectionError::Etcd)?,
        };
        let key = response
            .leader()
            .cloned()
            .ok_or(ElectionError::SessionLost)?;
        Ok(Elected { key })
    }

    /// Gives up leadership at once, so a standby takes over without waiting for the lease to expire.
    ///
    /// # Errors
    /// [`ElectionError::Etcd`] when etcd cannot be reached (the lease expiry then ends the term).
    pub async fn resign(&self, elected: &Elected) -> Result<(), ElectionError> {
        let mut client = self.client.clone();
        client
            .resign(Some(ResignOptions::new().with_leader(elected.key.clone())))
            .await
            .map_err(ElectionError::Etcd)?;
        Ok(())
    }

    /// Deletes the keys under the election prefix that carry no lease, and returns how many. Every
    /// campaign puts its key on its session's lease, so a lease-less key is debris (a restore, a hand
    /// edit); at the head of the election it would never expire, and every campaign would wait behind
    /// it for good. Each delete is guarded by the key's mod revision, so a key rewritten meanwhile stays.
    ///
    /// # Errors
    /// [`ElectionError::Etcd`] on etcd errors.
    pub async fn clear_leaseless(&self) -> Result<usize, ElectionError> {
        let mut client = self.client.clone();
        let resp = client
            .get(
                self.prefix(),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_keys_only(),
                ),
            )
            .await
            .map_err(ElectionError::Etcd)?;
        let mut cleared = 0;
        for kv in resp.kvs().iter().filter(|kv| kv.lease() == 0) {
            let guarded = Txn::new()
                .when(vec![Compare::mod_revision(
                    kv.key(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then(vec![TxnOp::delete(kv.key(), None)]);
            if client
                .txn(guarded)
                .await
                .map_err(ElectionError::Etcd)?
                .succeeded()
            {
                cleared += 1;
            }
        }
        Ok(cleared)
    }

    /// The current leader, if any: `None` also while the key at the head of the election does not hold
    /// a leader's description (a garbled value names no one a worker could reach).
    ///
    /// # Errors
    /// [`ElectionError::Etcd`] on etcd errors.
    pub async fn leader(&self) -> Result<Option<Leadership>, ElectionError> {
        Ok(self.leader_at().await?.0)
    }

    /// The current leader and the etcd revision of that read, from which a watch misses nothing.
    async fn leader_at(&self) -> Result<(Option<Leadership>, i64), ElectionError> {
        let mut client = self.client.clone();
        // etcd answers "election: no leader" as an error rather than an empty response; a plain range
        // over the prefix tells the two apart.
        let resp = client
            .get(
                self.prefix(),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_sort(
                            etcd_client::SortTarget::Create,
                            etcd_client::SortOrder::Ascend,
                        )
                        .with_limit(1),
                ),
            )
            .await
            .map_err(ElectionError::Etcd)?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let Some(kv) = resp.kvs().first() else {
            return Ok((None, revision));
        };
        let Ok(info) = serde_json::from_slice::<LeaderInfo>(kv.value()) else {
            return Ok((None, revision));
        };
        let leadership = Leadership {
            info,
            term: u64::try_from(kv.create_revision()).unwrap_or(0),
        };
        Ok((Some(leadership), revision))
    }

    fn prefix(&self) -> String {
        format!("{}/", self.name)
    }

    /// Every change of leader, starting with the current one (`None` while there is none). The stream
    /// never ends on its own.
    ///
    /// It reads the leader once, then follows one etcd watch on the election prefix from the revision
    /// of that read, so it misses no change and costs nothing while the leader stays: no polling. It
    /// reads the leader again only when a key under the prefix changed. On etcd errors, or when the
    /// watch ends, it pauses [`OBSERVE_RETRY`] and starts over with a fresh read.
    pub fn observe(&self) -> impl Stream<Item = Option<Leadership>> + Send + 'static {
        futures::stream::unfold(
            Observer {
                election: self.clone(),
                last: None,
                watch: None,
            },
            |mut observer| async move {
                let next = observer.next_change().await;
                Some((next, observer))
            },
        )
        .boxed()
    }
}

/// The pause of [`Election::observe`] after an etcd error before it reads and watches again.
pub const OBSERVE_RETRY: Duration = Duration::from_millis(250);

/// The state of [`Election::observe`]: the last leader it reported and its watch, if one is open.
struct Observer {
    election: Election,
    last: Option<Option<Leadership>>,
    watch: Option<etcd_client::WatchStream>,
}

impl Observer {
    /// Waits for, and returns, the first leader that differs from the last one reported.
    async fn next_change(&mut self) -> Option<Leadership> {
        loop {
            let current = match &mut self.watch {
                None => match self.read_and_watch().await {
                    Ok(current) => current,
                    Err(_) => {
                        tokio::time::sleep(OBSERVE_RETRY).await;
                        continue;
                    }
                },
                Some(watch) => match watch.message().await {
                    // The creation notice and progress notifications carry no events.
                    Ok(Some(resp)) if !resp.canceled() && resp.events().is_empty() => continue,
                    Ok(Some(resp)) if !resp.canceled() => match self.election.leader().await {
                        Ok(current) => current,
                        Err(_) => {
                            self.watch = None;
                            tokio::time::sleep(OBSERVE_RETRY).await;
                            continue;
                        }
                    },
                    _ => {
                        self.watch = None;
                        tokio::time::sleep(OBSERVE_RETRY).await;
                        continue;
                    }
                },
            };
            if self.last.as_ref() != Some(&current) {
                self.last = Some(current.clone());
                return current;
            }
        }
    }

    /// Reads the leader and opens a watch from just after that read.
    async fn read_and_watch(&mut self) -> Result<Option<Leadership>, ElectionError> {
        let (current, revision) = self.election.leader_at().await?;
        let options = etcd_client::WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let mut client = self.election.client.clone();
        let watch = client
            .watch(self.election.prefix(), Some(options))
            .await
            .map_err(ElectionError::Etcd)?;
        self.watch = Some(watch);
        Ok(current)
    }
}

impl Election {
    /// Runs `ops` in a transaction that succeeds only while `elected` still leads: every write of a
    /// leader goes through here, so a deposed leader cannot overwrite its successor's decisions.
    ///
    /// # Errors
    /// [`ElectionError::Deposed`] when the leader key is gone or belongs to another term.
    pub async fn fenced_txn(
        &self,
        elected: &Elected,
        mut compares: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<bool, ElectionError> {
        compares.push(Compare::create_revision(
            elected.key.key(),
            CompareOp::Equal,
            elected.key.rev(),
        ));
        let mut client = self.client.clone();
        let resp = client
            .txn(Txn::new().when(compares.clone()).and_then(ops))
            .await
            .map_err(ElectionError::Etcd)?;
        if resp.succeeded() {
            return Ok(true);
        }
        // Tell "deposed" from "another compare failed".
        let leader_only = Txn::new().when(vec![Compare::create_revision(
            elected.key.key(),
            CompareOp::Equal,
            elected.key.rev(),
        )]);
        let still = client.txn(leader_only).await.map_err(ElectionError::Etcd)?;
        if still.succeeded() {
            Ok(false)
        } else {
            Err(ElectionError::Deposed(elected.term()))
        }
    }
}
