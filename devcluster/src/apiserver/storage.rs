//! The one generic storage path to etcd: JSON values under `/registry/...`, resourceVersion = mod_revision,
//! optimistic concurrency through transactions that compare mod_revision.

use etcd_client::{Client, CompactionOptions, Compare, CompareOp, GetOptions, Txn, TxnOp};
use serde_json::Value;

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// etcd refused or could not be reached.
    #[error("etcd request failed")]
    Etcd(#[source] etcd_client::Error),
    /// The requested revision was compacted away.
    #[error("required revision has been compacted")]
    Compacted,
    /// A stored value is not JSON (written by something else).
    #[error("stored value at {0} is not JSON")]
    Corrupt(String),
    /// etcd's reply was bigger than the client accepts (tonic's 4 MiB decoding limit, which
    /// etcd-client offers no way to raise); a smaller range read fits.
    #[error("etcd reply too large for the client")]
    ReplyTooLarge(#[source] etcd_client::Error),
    /// etcd refused a write above its `--max-request-bytes` (1.5 MiB by default: `etcdserver:
    /// request is too large`) or above its gRPC limit, that plus 512 KiB (`grpc: received message
    /// larger than max`). kube-apiserver passes etcd's text on as a 500
    /// (kubernetes/kubernetes#112152), and so does the devcluster: a body under the 3 MiB request
    /// limit can still be too large to store. Holds etcd's message.
    #[error("{0}")]
    RequestTooLarge(String),
}

impl From<etcd_client::Error> for StorageError {
    fn from(e: etcd_client::Error) -> Self {
        let text = e.to_string();
        if text.contains("required revision has been compacted") {
            StorageError::Compacted
        } else if text.contains("decoded message length too large") {
            StorageError::ReplyTooLarge(e)
        } else if let etcd_client::Error::GRpcStatus(status) = &e
            && (status
                .message()
                .contains("etcdserver: request is too large")
                || status
                    .message()
                    .contains("received message larger than max"))
        {
            StorageError::RequestTooLarge(status.message().to_owned())
        } else {
            StorageError::Etcd(e)
        }
    }
}

/// An object read from etcd with its mod_revision (already written into `metadata.resourceVersion`).
#[derive(Debug, Clone)]
pub struct Stored {
    /// The etcd key.
    pub key: String,
    /// The object.
    pub value: Value,
    /// Its mod_revision.
    pub rev: i64,
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct Page {
    /// Items in key order.
    pub items: Vec<Stored>,
    /// The revision the list was read at.
    pub rev: i64,
    /// Set when the list stopped at its limit with another kept item still to come.
    pub more: Option<More>,
}

/// Where a list that stopped at its limit goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct More {
    /// The key of the last item returned (the next page starts right after it).
    pub last_key: String,
    /// How many keys, kept or not, follow that item (upstream's `remainingItemCount` when nothing
    /// is filtered out).
    pub remaining: i64,
}

/// The most keys one etcd range read asks for.
const MAX_CHUNK: i64 = 500;

/// The bytes one etcd range reply is sized to: half the client's 4 MiB decoding limit, so a chunk
/// sized from the previous chunk's average object may be off by two times and still fit.
const CHUNK_BYTES: usize = 2 * 1024 * 1024;

/// The next chunk's key count after a reply of `count` keys and `bytes` bytes: as many average keys as
/// fit in [`CHUNK_BYTES`], at least one, at most [`MAX_CHUNK`].
fn next_chunk(count: usize, bytes: usize) -> i64 {
    let average = (bytes / count.max(1)).max(1);
    i64::try_from(CHUNK_BYTES / average)
        .unwrap_or(MAX_CHUNK)
        .clamp(1, MAX_CHUNK)
}

/// Decodes a stored value and stamps its resourceVersion.
pub fn decode(key: &str, bytes: &[u8], rev: i64) -> Result<Value, StorageError> {
    let mut v: Value =
        serde_json::from_slice(bytes).map_err(|_| StorageError::Corrupt(key.to_string()))?;
    super::meta::set(&mut v, "resourceVersion", Value::String(rev.to_string()));
    Ok(v)
}

fn encode(v: &Value) -> Vec<u8> {
    let mut v = v.clone();
    super::meta::remove(&mut v, "resourceVersion");
    serde_json::to_vec(&v).unwrap_or_default()
}

fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// Generic etcd-backed object storage. Cheap to clone.
#[derive(Clone)]
pub struct Storage {
    client: Client,
}

impl Storage {
    /// Wraps a connected client.
    pub fn new(client: Client) -> Self {
        Storage { client }
    }

    /// The current etcd revision.
    ///
    /// # Errors
    /// etcd failures.
    pub async fn current_revision(&self) -> Result<i64, StorageError> {
        let resp = self
            .client
            .clone()
            .get("/registry/", Some(GetOptions::new().with_count_only()))
            .await?;
        Ok(resp.header().map_or(0, |h| h.revision()))
    }

    /// Reads one key.
    ///
    /// # Errors
    /// etcd failures, corrupt values.
    pub async fn get(&self, key: &str) -> Result<Option<Stored>, StorageError> {
        let resp = self.client.clone().get(key, None).await?;
        match resp.kvs().first() {
            Some(kv) => Ok(Some(Stored {
                key: key.into(),
                value: decode(key, kv.value(), kv.mod_revision())?,
                rev: kv.mod_revision(),
            })),
            None => Ok(None),
        }
    }

    /// Lists every key under `prefix` (which ends with `/`), from `start` (inclusive), at `rev` (None = current).
    ///
    /// # Errors
    /// `Compacted` when `rev` is compacted; etcd failures.
    pub async fn list(
        &self,
        prefix: &str,
        start: Option<&str>,
        rev: Option<i64>,
    ) -> Result<Page, StorageError> {
        self.list_page(prefix, start, rev, None, |_| true).await
    }

    /// Lists the keys under `prefix` (which ends with `/`) from `start` (inclusive) at `rev` (None =
    /// current) whose objects `keep` accepts, stopping once `limit` are kept and a further one exists
    /// ([`Page::more`] then says where to go on).
    ///
    /// etcd is read in chunks at one revision, each sized by keys and bytes so that its reply stays
    /// under the client's 4 MiB decoding limit however large the objects are: a chunk that still comes
    /// back too large is asked again at half the size.
    ///
    /// # Errors
    /// `Compacted` when `rev` is compacted; etcd failures; `ReplyTooLarge` when a single object is
    /// bigger than the client accepts.
    pub async fn list_page(
        &self,
        prefix: &str,
        start: Option<&str>,
        rev: Option<i64>,
        limit: Option<usize>,
        mut keep: impl FnMut(&Value) -> bool,
    ) -> Result<Page, StorageError> {
        let end = prefix_end(prefix);
        let mut from = start.unwrap_or(prefix).as_bytes().to_vec();
        let mut at = rev;
        // One more than the limit: enough to learn whether another item follows the page.
        let mut chunk = limit.map_or(MAX_CHUNK, |l| {
            i64::try_from(l).map_or(MAX_CHUNK, |l| l.saturating_add(1).min(MAX_CHUNK))
        });
        let mut items: Vec<Stored> = Vec::new();
        loop {
            let mut opts = GetOptions::new().with_range(end.clone()).with_limit(chunk);
            if let Some(r) = at {
                opts = opts.with_revision(r);
            }
            let resp = match self.client.clone().get(from.clone(), Some(opts)).await {
                Ok(resp) => resp,
                Err(e) => match StorageError::from(e) {
                    StorageError::ReplyTooLarge(_) if chunk > 1 => {
                        chunk /= 2;
                        continue;
                    }
                    other => return Err(other),
                },
            };
            if at.is_none() {
                at = Some(resp.header().map_or(0, |h| h.revision()));
            }
            let kvs = resp.kvs();
            for (i, kv) in kvs.iter().enumerate() {
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                let value = decode(&key, kv.value(), kv.mod_revision())?;
                if !keep(&value) {
                    continue;
                }
                if limit.is_some_and(|l| items.len() >= l) {
                    let last_key = items.last().map(|s| s.key.clone()).unwrap_or_default();
                    // `count` counts every key from this chunk's first to the prefix's end.
                    let remaining = resp.count() - i64::try_from(i).unwrap_or(i64::MAX);
                    return Ok(Page {
                        items,
                        rev: at.unwrap_or(0),
                        more: Some(More {
                            last_key,
                            remaining,
                        }),
                    });
                }
                items.push(Stored {
                    key,
                    value,
                    rev: kv.mod_revision(),
                });
            }
            match kvs.last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
            let bytes = kvs.iter().map(|kv| kv.key().len() + kv.value().len()).sum();
            chunk = next_chunk(kvs.len(), bytes);
        }
        Ok(Page {
            items,
            rev: at.unwrap_or(0),
            more: None,
        })
    }

    /// Creates `key` if absent. Returns the new revision, or None if the key exists.
    ///
    /// # Errors
    /// etcd failures.
    pub async fn create(&self, key: &str, value: &Value) -> Result<Option<i64>, StorageError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, encode(value), None)]);
        let resp = self.client.clone().txn(txn).await?;
        Ok(resp
            .succeeded()
            .then(|| resp.header().map_or(0, |h| h.revision())))
    }

    /// Replaces `key` if its mod_revision is still `expected`. Returns the new revision, or None on conflict.
    ///
    /// # Errors
    /// etcd failures.
    pub async fn update(
        &self,
        key: &str,
        value: &Value,
        expected: i64,
    ) -> Result<Option<i64>, StorageError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([TxnOp::put(key, encode(value), None)]);
        let resp = self.client.clone().txn(txn).await?;
        Ok(resp
            .succeeded()
            .then(|| resp.header().map_or(0, |h| h.revision())))
    }

    /// Deletes `key` if its mod_revision is still `expected`. Returns the deletion revision, or None on conflict.
    ///
    /// # Errors
    /// etcd failures.
    pub async fn delete(&self, key: &str, expected: i64) -> Result<Option<i64>, StorageError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([TxnOp::delete(key, None)]);
        let resp = self.client.clone().txn(txn).await?;
        Ok(resp
            .succeeded()
            .then(|| resp.header().map_or(0, |h| h.revision())))
    }

    /// Deletes every key under `prefix` (used when a CRD goes away).
    ///
    /// # Errors
    /// etcd failures.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<(), StorageError> {
        self.client
            .clone()
            .delete(
                prefix,
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await?;
        Ok(())
    }

    /// Writes `key` only if absent (allocation bitmaps: cluster IPs, node ports). Returns whether it was written.
    ///
    /// # Errors
    /// etcd failures.
    pub async fn claim(&self, key: &str, owner: &str) -> Result<bool, StorageError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, owner.as_bytes().to_vec(), None)]);
        Ok(self.client.clone().txn(txn).await?.succeeded())
    }

    /// Releases a claim.
    ///
    /// # Errors
    /// etcd failures.
    pub async fn release(&self, key: &str) -> Result<(), StorageError> {
        self.client.clone().delete(key, None).await?;
        Ok(())
    }

    /// Compacts etcd at `rev` (physically); returns it. Compacting twice at one revision is no error.
    ///
    /// # Errors
    /// etcd failures.
    pub async fn compact(&self, rev: i64) -> Result<i64, StorageError> {
        match self
            .client
            .clone()
            .compact(rev, Some(CompactionOptions::new().with_physical()))
            .await
        {
            Ok(_) => {}
            // Compacting twice at the same revision is not an error for callers.
            Err(e) if e.to_string().contains("compacted") => {}
            Err(e) => return Err(e.into()),
        }
        Ok(rev)
    }

    /// The underlying client (for the watch cache's single watch).
    pub fn client(&self) -> Client {
        self.client.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_small_objects_are_capped_by_count() {
        assert_eq!(next_chunk(500, 500 * 1024), MAX_CHUNK);
    }

    #[test]
    fn chunks_of_large_objects_stay_within_the_byte_budget() {
        // 900 KB objects: two fit in 2 MiB.
        assert_eq!(next_chunk(3, 3 * 900_000), 2);
        // An object larger than the budget is read alone.
        assert_eq!(next_chunk(1, 3_000_000), 1);
    }
}
