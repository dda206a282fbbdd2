//! What a reconcile can use besides its request: the recording, rate-limited Kubernetes client, the
//! coordinator's cache, the prefetched related objects, an event recorder, its span and its cancel token.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use flotilla_apimachinery::ResourceKind;
use kube::Resource;
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::cache::{CacheClient, CacheSlot};
use crate::clients::KubeClients;
use crate::kind::{KindScope, kind_of, same_resource};
use crate::recorder::EventRecorder;
use crate::test_context::TestContext;
use crate::writes::WriteJournal;

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
///
/// The runtime builds one per item with [`Context::new`]; a unit test builds one with
/// [`Context::for_test`].
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

/// What every reconcile of one controller on one worker shares; built once by the runtime, so that
/// starting an item costs one allocation.
pub struct ControllerEnv {
    worker_id: Arc<str>,
    controller: Arc<str>,
    event_source: String,
    clients: Arc<dyn KubeClients>,
    recorder: OnceLock<EventRecorder>,
    cache: CacheSlot,
}

impl ControllerEnv {
    /// The environment of controller `controller` on worker `worker_id`: its reconciles get clients
    /// from `clients` and read the cache `cache` holds when they ask. The event recorder (reporting as
    /// `event_source`) is made on first use.
    pub fn new(
        worker_id: &str,
        controller: &str,
        event_source: &str,
        clients: Arc<dyn KubeClients>,
        cache: CacheSlot,
    ) -> Self {
        Self {
            worker_id: Arc::from(worker_id),
            controller: Arc::from(controller),
            event_source: event_source.to_owned(),
            clients,
            recorder: OnceLock::new(),
            cache,
        }
    }
}

impl Context {
    /// The context of one item, for the runtime: writes through [`Context::client`] land in `journal`
    /// (the runtime reports them when the reconcile returns), `prefetched` are the related objects
    /// shipped with the item (JSON, with their kinds), `span` is the reconcile's span and `cancel` the
    /// token the runtime cancels when the reconcile must stop.
    pub fn new(
        env: Arc<ControllerEnv>,
        journal: WriteJournal,
        prefetched: Vec<(ResourceKind, Bytes)>,
        span: tracing::Span,
        cancel: CancellationToken,
    ) -> Self {
        let inner = Inner {
            env,
            client: OnceLock::new(),
            journal,
            prefetched,
            span,
            cancel,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// A builder of a context for a unit test of a reconcile: no etcd, no coordinator; prefetched
    /// objects, a cache and a Kubernetes client of the test's choosing.
    pub fn for_test() -> TestContext {
        TestContext::default()
    }

    /// The Kubernetes client of this reconcile. Every create, update, patch and delete it makes is
    /// reported to the coordinator, which holds the key back until its cache has seen the write; every
    /// request waits for the worker's `--kube-api-qps` / `--kube-api-burst` limiter.
    pub fn client(&self) -> kube::Client {
        self.inner
            .client
            .get_or_init(|| self.inner.env.clients.recording_client(&self.inner.journal))
            .clone()
    }

    /// The cache (the lister) of the leader this worker is connected to now; its reads fail with
    /// [`crate::CacheError::NotConnected`] between leaders.
    pub fn cache(&self) -> CacheClient {
        self.inner.env.cache.client()
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

    /// The event recorder of this controller on this worker, shared by its reconciles, reporting as
    /// the controller's event source ([`crate::Controller::event_source`]): core/v1 Events as
    /// kube-controller-manager writes them, a repeat patched into a count, an object given at most a
    /// burst of 25 Events, then one per 5 minutes (client-go's correlator). Recording never waits;
    /// Events are not reported as writes: no key waits for them.
    ///
    /// # Panics
    /// On first use outside a tokio runtime (a reconcile always runs in one).
    pub fn recorder(&self) -> &EventRecorder {
        let env = &self.inner.env;
        env.recorder
            .get_or_init(|| EventRecorder::new(env.clients.plain_client(), &env.event_source))
    }

    /// The reconcile's span (fields `controller`, `key`, `shard`, `term`, `worker`, `attempt`,
    /// `reason`).
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
}
