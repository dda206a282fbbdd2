//! The worker's registration under `workers/<id>`, on its session's lease: written when the session
//! starts, and written again whenever it goes missing while the lease lives (an operator's mistake, a
//! cleanup script). A leader accepts a worker's Hello only while that key names its lease, so a
//! registration deleted and never put back would keep the worker refused — and, its shard keys still on
//! its live lease, the whole fleet's shards unclaimable — for as long as it runs.

use std::time::Duration;

use etcd_client::{Client, EventType, PutOptions};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::engine::Shared;

/// Pause before watching again after the watch failed or ended.
const REWATCH: Duration = Duration::from_secs(1);

/// The worker's registration value.
#[derive(Serialize)]
struct Registration<'a> {
    id: &'a str,
    capacity: u32,
    controllers: Vec<&'a str>,
}

/// What [`register`] writes: the value and the key, fixed for the worker's life.
#[derive(Clone)]
pub(crate) struct RegistrationRecord {
    key: String,
    value: Vec<u8>,
}

impl RegistrationRecord {
    /// The record of the worker `shared` describes.
    pub(crate) fn of(shared: &Shared) -> Self {
        let mut names: Vec<&str> = shared.controllers.keys().map(String::as_str).collect();
        names.sort_unstable();
        let capacity = shared
            .controllers
            .values()
            .map(|c| c.controller.concurrency_limit())
            .sum();
        // A struct of strings and a number always encodes.
        let value = serde_json::to_vec(&Registration {
            id: &shared.worker_id,
            capacity,
            controllers: names,
        })
        .unwrap_or_default();
        Self {
            key: shared.keys.worker(&shared.worker_id),
            value,
        }
    }

    /// Writes the registration on `lease`.
    ///
    /// # Errors
    /// etcd's error (an ended lease among them).
    pub(crate) async fn put(&self, etcd: &Client, lease: i64) -> Result<(), etcd_client::Error> {
        let options = PutOptions::new().with_lease(lease);
        etcd.clone()
            .put(self.key.as_str(), self.value.clone(), Some(options))
            .await?;
        Ok(())
    }

    /// Keeps the registration in etcd on `lease` until `stop` is cancelled: watches the key and writes
    /// it again when it is deleted (or found missing after a watch restarts). `rewritten` is told of
    /// each write it had to make.
    pub(crate) async fn keep(
        self,
        etcd: Client,
        lease: i64,
        stop: CancellationToken,
        rewritten: impl Fn() + Send,
    ) {
        loop {
            let kept = async {
                let mut watcher = etcd.clone();
                let mut events = watcher.watch(self.key.as_str(), None).await?;
                // A delete between the last write and this watch would be missed: look once.
                if watcher.get(self.key.as_str(), None).await?.kvs().is_empty() {
                    self.rewrite(&etcd, lease, &rewritten).await?;
                }
                while let Some(resp) = events.message().await? {
                    if resp.canceled() {
                        break;
                    }
                    let deleted = resp
                        .events()
                        .iter()
                        .any(|e| e.event_type() == EventType::Delete);
                    if deleted {
                        self.rewrite(&etcd, lease, &rewritten).await?;
                    }
                }
                Ok::<(), etcd_client::Error>(())
            };
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                result = kept => if let Err(err) = result {
                    debug!(error = %err, "registration watch failed; watching again");
                },
            }
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = tokio::time::sleep(REWATCH) => {}
            }
        }
    }

    async fn rewrite(
        &self,
        etcd: &Client,
        lease: i64,
        rewritten: &impl Fn(),
    ) -> Result<(), etcd_client::Error> {
        warn!(
            key = %self.key,
            "this worker's registration was deleted from etcd while its lease lives; registering again"
        );
        self.put(etcd, lease).await?;
        rewritten();
        Ok(())
    }
}
