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
}

impl From<etcd_client::Error> for StorageError {
    fn from(e: etcd_client::Error) -> Self {
        if e.to_string()
            .contains("required revision has been compacted")
        {
            StorageError::Compacted
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
        // Read in chunks at one revision: a single range reply is capped by the gRPC message size (4 MiB).
        const CHUNK: i64 = 500;
        let mut from = start.unwrap_or(prefix).as_bytes().to_vec();
        let mut at = rev;
        let mut items = Vec::new();
        loop {
            let mut opts = GetOptions::new()
                .with_range(prefix_end(prefix))
                .with_limit(CHUNK);
            if let Some(r) = at {
                opts = opts.with_revision(r);
            }
            let resp = self.client.clone().get(from.clone(), Some(opts)).await?;
            if at.is_none() {
                at = Some(resp.header().map_or(0, |h| h.revision()));
            }
            for kv in resp.kvs() {
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                let value = decode(&key, kv.value(), kv.mod_revision())?;
                items.push(Stored {
                    key,
                    value,
                    rev: kv.mod_revision(),
                });
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        Ok(Page {
            items,
            rev: at.unwrap_or(0),
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
