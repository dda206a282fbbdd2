//! A [`Context`] for unit tests of a reconcile: no etcd, no coordinator, no worker; the prefetched
//! objects, the cache and the Kubernetes client are the test's.

use std::sync::Arc;

use bytes::Bytes;
use flotilla_apimachinery::ResourceKind;
use kube::Resource;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::cache::{CacheBackend, CacheSlot};
use crate::clients::{KubeClients, NoApi};
use crate::context::{Context, ControllerEnv};
use crate::kind::{KindScope, kind_of};
use crate::writes::WriteJournal;

/// Builds a [`Context`] for a test; start with [`Context::for_test`].
///
/// Defaults, each chosen so that a reconcile touching what the test did not set up fails loudly
/// rather than passing by accident:
///
/// | part | default |
/// | --- | --- |
/// | [`client`](Self::client) | every request fails with "this test context has no Kubernetes API" |
/// | [`cache`](Self::cache) | none: reads fail with [`crate::CacheError::NotConnected`], as between leaders |
/// | [`prefetched`](Self::prefetched) | nothing shipped with the item |
/// | worker id, controller | `test-worker`, `test` |
/// | span | a `reconcile` span with the controller and worker fields |
/// | cancel token | a fresh one, never cancelled unless the test does it |
///
/// ```
/// # use flotilla_sdk::{Context, MemoryCache};
/// # use flotilla_sdk::k8s_openapi::api::core::v1::ConfigMap;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let owned = ConfigMap::default();
/// let ctx = Context::for_test()
///     .controller("greeting")
///     .prefetched(&owned)
///     .cache(MemoryCache::default())
///     .build();
/// assert_eq!(ctx.prefetched::<ConfigMap>().unwrap().len(), 1);
/// # }
/// ```
pub struct TestContext {
    worker_id: String,
    controller: String,
    clients: Arc<dyn KubeClients>,
    cache: CacheSlot,
    prefetched: Vec<(ResourceKind, Bytes)>,
    span: Option<tracing::Span>,
    cancel: CancellationToken,
}

impl Default for TestContext {
    fn default() -> Self {
        Self {
            worker_id: "test-worker".to_owned(),
            controller: "test".to_owned(),
            clients: Arc::new(NoApi),
            cache: CacheSlot::default(),
            prefetched: Vec::new(),
            span: None,
            cancel: CancellationToken::new(),
        }
    }
}

impl TestContext {
    /// The reconcile's `kube::Client` (and its event recorder's) is `client`, e.g. one over a mock
    /// service (`kube::Client::new(service, "default")`). Writes through it are not recorded.
    pub fn client(mut self, client: kube::Client) -> Self {
        self.clients = Arc::new(client);
        self
    }

    /// The reconcile's clients come from `clients` (a recording implementation of the test's own).
    pub fn clients(mut self, clients: Arc<dyn KubeClients>) -> Self {
        self.clients = clients;
        self
    }

    /// The reconcile reads `cache`, e.g. a [`crate::MemoryCache`].
    pub fn cache(self, cache: impl CacheBackend + 'static) -> Self {
        self.cache.set(Arc::new(cache));
        self
    }

    /// `object` ships with the item, as `Controller::prefetch_owned` makes the coordinator do. An object
    /// that cannot be serialized ships empty, so reading it fails with [`crate::ContextError::Decode`].
    pub fn prefetched<T>(self, object: &T) -> Self
    where
        T: Resource<DynamicType = ()> + Serialize,
        T::Scope: KindScope,
    {
        self.prefetched_as(kind_of::<T>(), object)
    }

    /// `object` ships with the item as an object of `kind` (an owner-graph controller's dependents).
    pub fn prefetched_as(mut self, kind: ResourceKind, object: &impl Serialize) -> Self {
        let json = serde_json::to_vec(object).unwrap_or_default();
        self.prefetched.push((kind, Bytes::from(json)));
        self
    }

    /// The worker id the reconcile sees.
    pub fn worker_id(mut self, worker_id: &str) -> Self {
        worker_id.clone_into(&mut self.worker_id);
        self
    }

    /// The controller name the reconcile (and its event recorder) sees.
    pub fn controller(mut self, controller: &str) -> Self {
        controller.clone_into(&mut self.controller);
        self
    }

    /// The reconcile's span.
    pub fn span(mut self, span: tracing::Span) -> Self {
        self.span = Some(span);
        self
    }

    /// The reconcile's cancel token (cancel it to play a lost lease).
    pub fn cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// The context. Needs no runtime; the first [`Context::client`] or [`Context::recorder`] call
    /// does, as `kube::Client` spawns its buffer task.
    pub fn build(self) -> Context {
        let span = self.span.unwrap_or_else(|| {
            tracing::info_span!(
                "reconcile",
                controller = %self.controller,
                worker = %self.worker_id,
            )
        });
        let env = ControllerEnv::new(
            &self.worker_id,
            &self.controller,
            &self.controller,
            self.clients,
            self.cache,
        );
        Context::new(
            Arc::new(env),
            WriteJournal::default(),
            self.prefetched,
            span,
            self.cancel,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::Api;

    use super::*;
    use crate::cache::{CacheError, MemoryCache};

    fn configmap(name: &str) -> ConfigMap {
        let mut configmap = ConfigMap::default();
        configmap.metadata.name = Some(name.into());
        configmap.metadata.namespace = Some("ns".into());
        configmap
    }

    #[test]
    fn prefetched_objects_are_read_back_by_kind() {
        let ctx = Context::for_test()
            .prefetched(&configmap("a"))
            .prefetched(&configmap("b"))
            .build();
        let names: Vec<_> = ctx
            .prefetched::<ConfigMap>()
            .unwrap()
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(ctx.prefetched::<Pod>().unwrap().is_empty());
        assert_eq!(ctx.prefetched_objects().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn without_a_cache_reads_fail_as_between_leaders() {
        let ctx = Context::for_test().build();
        let err = ctx
            .cache()
            .get::<ConfigMap>(Some("ns"), "a")
            .await
            .unwrap_err();
        assert!(matches!(err, CacheError::NotConnected));
        let ctx = Context::for_test()
            .cache(MemoryCache::default().with(&configmap("a")))
            .build();
        let found: Option<ConfigMap> = ctx.cache().get(Some("ns"), "a").await.unwrap();
        assert!(found.is_some());
    }

    #[tokio::test]
    async fn without_a_client_every_api_call_fails_and_names_the_reason() {
        let ctx = Context::for_test().build();
        let err = Api::<ConfigMap>::namespaced(ctx.client(), "ns")
            .get("a")
            .await
            .unwrap_err();
        let chain = format!("{:?}", error_chain(&err));
        assert!(chain.contains("no Kubernetes API"), "{chain}");
    }

    #[test]
    fn the_identity_and_cancel_token_are_the_tests() {
        let cancel = CancellationToken::new();
        let ctx = Context::for_test()
            .worker_id("w-1")
            .controller("greeting")
            .cancel(cancel.clone())
            .build();
        assert_eq!((ctx.worker_id(), ctx.controller()), ("w-1", "greeting"));
        cancel.cancel();
        assert!(ctx.cancelled().is_cancelled());
    }

    fn error_chain(err: &dyn std::error::Error) -> Vec<String> {
        let mut chain = vec![err.to_string()];
        let mut source = err.source();
        while let Some(cause) = source {
            chain.push(cause.to_string());
            source = cause.source();
        }
        chain
    }
}
