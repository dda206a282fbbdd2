//! Typed reads of the cache a reconcile sees: the kind comes from the Rust type, objects are decoded
//! from the backend's JSON, and a worker between leaders gets a clear error rather than a stale answer.

use std::sync::Arc;

use bytes::Bytes;
use kube::Resource;
use serde::de::DeserializeOwned;

use super::backend::CacheBackend;
use super::query::CacheQuery;
use crate::kind::{KindScope, kind_of};
use flotilla_apimachinery::ResourceKind;

/// Errors of a cache read.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The worker is between leaders; there is no cache to read.
    #[error("not connected to a coordinator")]
    NotConnected,
    /// The cache refused or could not answer the request (in a worker: the gRPC status of the
    /// coordinator's answer).
    #[error("cache request failed")]
    Request(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An object in the answer is not a valid object of the requested kind.
    #[error("cache returned an object that is not a valid {kind}")]
    Decode {
        /// The kind asked for.
        kind: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// A client of the cache a reconcile reads (in a worker: the leader's, as it was when the client was
/// taken); cheap to clone.
#[derive(Clone, Default)]
pub struct CacheClient {
    backend: Option<Arc<dyn CacheBackend>>,
}

impl CacheClient {
    /// A client of `backend`; `None` is a client whose every read fails with
    /// [`CacheError::NotConnected`].
    pub fn new(backend: Option<Arc<dyn CacheBackend>>) -> Self {
        Self { backend }
    }

    fn backend(&self) -> Result<&dyn CacheBackend, CacheError> {
        self.backend.as_deref().ok_or(CacheError::NotConnected)
    }

    /// The cached object `namespace/name` (`namespace` is ignored for cluster-scoped kinds).
    ///
    /// # Errors
    /// [`CacheError`] when there is no leader, the request fails, or the object does not decode.
    pub async fn get<T>(&self, namespace: Option<&str>, name: &str) -> Result<Option<T>, CacheError>
    where
        T: Resource<DynamicType = ()> + DeserializeOwned,
        T::Scope: KindScope,
    {
        let kind = kind_of::<T>();
        self.backend()?
            .get(&kind, namespace, name)
            .await?
            .map(|bytes| decode(&kind.kind, &bytes))
            .transpose()
    }

    /// The cached objects that `query` selects.
    ///
    /// # Errors
    /// [`CacheError`] when there is no leader, the request fails, or an object does not decode.
    pub async fn list<T>(&self, query: &CacheQuery) -> Result<Vec<T>, CacheError>
    where
        T: Resource<DynamicType = ()> + DeserializeOwned,
        T::Scope: KindScope,
    {
        let kind = kind_of::<T>();
        self.backend()?
            .list(&kind, query)
            .await?
            .iter()
            .map(|bytes| decode(&kind.kind, bytes))
            .collect()
    }

    /// The cached objects of `kind` that `query` selects, as the cache's JSON: for a runtime that
    /// knows kinds only at run time (a worker reading what an item's prefetch left out).
    ///
    /// # Errors
    /// [`CacheError`] when there is no leader or the request fails.
    pub async fn list_json(
        &self,
        kind: &ResourceKind,
        query: &CacheQuery,
    ) -> Result<Vec<Bytes>, CacheError> {
        self.backend()?.list(kind, query).await
    }
}

fn decode<T: DeserializeOwned>(kind: &str, bytes: &Bytes) -> Result<T, CacheError> {
    serde_json::from_slice(bytes).map_err(|source| CacheError::Decode {
        kind: kind.to_owned(),
        source,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[tokio::test]
    async fn a_client_without_a_backend_says_it_is_not_connected() {
        let err = CacheClient::default()
            .get::<ConfigMap>(Some("ns"), "x")
            .await
            .unwrap_err();
        assert!(matches!(err, CacheError::NotConnected));
    }
}
