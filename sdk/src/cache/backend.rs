//! What serves a reconcile's cache reads, as the SDK declares it: the worker runtime implements
//! [`CacheBackend`] over gRPC to the leading coordinator; [`crate::MemoryCache`] implements it in memory
//! for tests. The [`CacheSlot`] says which backend reconciles read now.

use std::sync::Arc;

use bytes::Bytes;
use flotilla_apimachinery::ResourceKind;
use futures::future::BoxFuture;
use parking_lot::RwLock;

use super::client::{CacheClient, CacheError};
use super::query::CacheQuery;

/// Untyped Get and List of cached objects, answered as JSON.
///
/// An implementation must answer as the coordinator's `Cache` service does: `get` of a cluster-scoped
/// kind ignores the namespace; `list` narrows by namespace, label selector and one index (`namespace`,
/// `owner-uid`: the controller ownerReference's uid, `node-name`: a pod's `spec.nodeName`, or a named
/// index declared for the kind) and refuses an unknown index or a malformed selector with an error.
pub trait CacheBackend: Send + Sync {
    /// The cached object `namespace/name` of `kind`, if any.
    ///
    /// # Errors
    /// [`CacheError::Request`] when the cache cannot answer.
    fn get<'a>(
        &'a self,
        kind: &'a ResourceKind,
        namespace: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Bytes>, CacheError>>;

    /// The cached objects of `kind` that `query` selects.
    ///
    /// # Errors
    /// [`CacheError::Request`] when the cache cannot answer or refuses the query.
    fn list<'a>(
        &'a self,
        kind: &'a ResourceKind,
        query: &'a CacheQuery,
    ) -> BoxFuture<'a, Result<Vec<Bytes>, CacheError>>;
}

/// The backend reconciles read now, shared by every context of a worker; cheap to clone. The runtime
/// fills it when a leader welcomes the worker and empties it between leaders; a [`CacheClient`] taken
/// while it is empty answers [`CacheError::NotConnected`].
#[derive(Clone, Default)]
pub struct CacheSlot {
    current: Arc<RwLock<Option<Arc<dyn CacheBackend>>>>,
}

impl CacheSlot {
    /// A slot holding `backend` from the start.
    pub fn connected(backend: Arc<dyn CacheBackend>) -> Self {
        let slot = Self::default();
        slot.set(backend);
        slot
    }

    /// Reads go to `backend` from now on (clients taken before keep theirs).
    pub fn set(&self, backend: Arc<dyn CacheBackend>) {
        *self.current.write() = Some(backend);
    }

    /// No backend until the next [`set`](Self::set): reads fail with [`CacheError::NotConnected`].
    pub fn clear(&self) {
        *self.current.write() = None;
    }

    /// A client of the backend held now.
    pub fn client(&self) -> CacheClient {
        CacheClient::new(self.current.read().clone())
    }
}
