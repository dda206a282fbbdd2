//! What a reconcile can use besides its request: the recording, rate-limited Kubernetes client, the
//! coordinator's cache, the prefetched related objects, an event recorder, its span and its cancel token.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use flotilla_common::ResourceKind;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::events::Recorder;
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::cache::{CacheClient, CacheEndpoint};
use super::kind::{KindScope, kind_of, same_resource};
use crate::runtime::{KubeStack, Write, WriteJournal};

/// Errors of reading prefetched objects.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// A prefetched object is not a valid object of the requested kind.
    #[error("prefetched object is not a valid {kind}")]
    Decode {
        /// The kind asked for.
        kind: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// The context of one reconcile; cheap to clone. Writes made through [`Context::client`] after the
/// reconcile returned are not reported to the coordinator.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    env: Arc<ControllerEnv>,
    client: OnceLock<kube::Client>,
    journal: WriteJournal,
    prefetched: Vec<(ResourceKind, Bytes)>,
    span: tracing::Span,
    cancel: CancellationToken,
}

/// The channel to the welcomed leader, shared by the runtime (which sets it) and every context.
pub(crate) type CacheSlot = Arc<RwLock<Option<CacheEndpoint>>>;

/// What every reconcile of one controller on this worker shares; built once, so that starting an item
/// costs one allocation.
pub(crate) struct ControllerEnv {
    pub(crate) worker_id: Arc<str>,
    pub(crate) controller: Arc<str>,
    pub(crate) kube: KubeStack,
    pub(crate) recorder: Recorder,
    pub(crate) cache: CacheSlot,
}

impl Context {
    pub(crate) fn new(
        env: Arc<ControllerEnv>,
        prefetched: Vec<(ResourceKind, Bytes)>,
        span: tracing::Span,
        cancel: CancellationToken,
    ) -> Self {
        let inner = Inner {
            env,
            client: OnceLock::new(),
            journal: WriteJournal::default(),
            prefetched,
            span,
            cancel,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The Kubernetes client of this reconcile. Every create, update, patch and delete it makes is
    /// reported to the coordinator, which holds the key back until its cache has seen the write; every
    /// request waits for the worker's `--kube-api-qps` / `--kube-api-burst` limiter.
    pub fn client(&self) -> kube::Client {
        self.inner
            .client
            .get_or_init(|| {
                self.inner
                    .env
                    .kube
                    .recording_client(self.inner.journal.clone())
            })
            .clone()
    }

    /// The cache (the lister) of the leader this worker is connected to now; its reads fail with
    /// [`crate::CacheError::NotConnected`] between leaders.
    pub fn cache(&self) -> CacheClient {
        CacheClient::new(self.inner.env.cache.read().clone())
    }

    /// The related objects of kind `T` the coordinator shipped with this item (see
    /// `Controller::prefetch_owned`); empty when the controller did not ask for `T`.
    ///
    /// # Errors
    /// [`ContextError::Decode`] when an object is not a valid `T`.
    pub fn prefetched<T>(&self) -> Result<Vec<T>, ContextError>
    where
        T: Resource<DynamicType = ()> + DeserializeOwned,
        T::Scope: KindScope,
    {
        let kind = kind_of::<T>();
        self.inner
            .prefetched
            .iter()
            .filter(|(k, _)| same_resource(k, &kind))
            .map(|(_, bytes)| {
                serde_json::from_slice(bytes).map_err(|source| ContextError::Decode {
                    kind: kind.kind.clone(),
                    source,
                })
            })
            .collect()
    }

    /// Every related object the coordinator shipped with this item, of any kind, as dynamic objects
    /// with their kinds: the dependents of an owner-graph controller's object.
    ///
    /// # Errors
    /// [`ContextError::Decode`] when an object is not a valid Kubernetes object.
    pub fn prefetched_objects(&self) -> Result<Vec<(ResourceKind, DynamicObject)>, ContextError> {
        self.inner
            .prefetched
            .iter()
            .map(|(kind, bytes)| {
                let object =
                    serde_json::from_slice(bytes).map_err(|source| ContextError::Decode {
                        kind: kind.kind.clone(),
                        source,
                    })?;
                Ok((kind.clone(), object))
            })
            .collect()
    }

    /// An event recorder reporting as this controller on this worker. Events are not reported as
    /// writes: no key waits for them.
    pub fn recorder(&self) -> &Recorder {
        &self.inner.env.recorder
    }

    /// The reconcile's span (fields `controller`, `key`, `shard`, `term`, `worker`, `attempt`).
    pub fn span(&self) -> &tracing::Span {
        &self.inner.span
    }

    /// This worker's id.
    pub fn worker_id(&self) -> &str {
        &self.inner.env.worker_id
    }

    /// The controller's name.
    pub fn controller(&self) -> &str {
        &self.inner.env.controller
    }

    /// Cancelled when the reconcile must stop at once: the worker lost its lease (its items may be
    /// handed to others) or is shutting down past its grace period. The runtime also drops the
    /// reconcile's future then; the token lets work spawned by the reconcile stop too.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    pub(crate) fn take_writes(&self) -> Vec<Write> {
        self.inner.journal.take()
    }
}
