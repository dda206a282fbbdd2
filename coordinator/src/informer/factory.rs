//! The shared informer factory: one watch per kind for the whole process (one per kind and namespace
//! under `--namespaces`), however many controllers need it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flotilla_common::ResourceKind;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta, TypeMeta};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::namespace_filter::{self, MatchingNamespaces};
use super::scope::is_scoped_kind;
use super::{
    Declarations, IndexSpec, InformerEvent, InformerMetrics, InformerState, NamespaceScope,
    PartEvents, Store, Subscriber, run_scoped_informer,
};

/// The process's informers (client-go's SharedInformerFactory); cheap to clone.
///
/// Ordering guarantee: for one kind, events reach the subscriber in the order the kind's store
/// applied them, and the store is updated **before** the event is sent, so a subscriber that
/// reads the store on an event sees at least the state of that event. Events of different kinds
/// are not ordered relative to each other.
#[derive(Clone)]
pub struct Informers {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    running: Mutex<BTreeMap<ResourceKind, Running>>,
    subscriber: Subscriber,
    metrics: InformerMetrics,
    /// Parent of every informer task's token; cancelled by `shutdown` and when the last clone drops.
    cancel: CancellationToken,
    unserved_after: Duration,
    /// The namespaces the scoped kinds cover.
    scope: NamespaceScope,
    /// With a namespace selector, the matching set, kept by a task started with the first informer.
    matching: Mutex<Option<MatchingNamespaces>>,
    /// The named indexes controllers declared; every store of a declared kind keeps them. Locked
    /// after `running` where both are.
    indexes: Mutex<Declarations>,
    /// Whether the API server streams lists, asked once by the first informer to start (see
    /// `watch_list`).
    streams_lists: Arc<tokio::sync::OnceCell<bool>>,
}

struct Running {
    /// Whether the informer lists and watches metadata only (see [`Informers::ensure_metadata`]).
    metadata_only: bool,
    store: Store,
    synced: Arc<AtomicBool>,
    unserved: Arc<AtomicBool>,
    /// Stops this informer alone ([`Informers::remove`]).
    cancel: CancellationToken,
}

/// One informer as [`Informers::kinds`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InformerStatus {
    /// The kind watched.
    pub kind: ResourceKind,
    /// Whether its first list completed (stays true through relists).
    pub synced: bool,
    /// Whether it stopped because the API server does not serve the kind.
    pub unserved: bool,
    /// Objects in its cache.
    pub objects: usize,
}

/// How long a kind may answer nothing but 404 before its informer stops, unless configured: long enough
/// for a CRD applied together with the fleet to become established.
pub const DEFAULT_UNSERVED_AFTER: Duration = Duration::from_secs(60);

impl Drop for Inner {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Informers {
    /// Informers that list and watch through `client`, with their metrics
    /// (`flotilla_informer_errors_total{kind}`, `flotilla_informer_events_total{kind,event}`,
    /// `flotilla_informer_objects{kind}`) registered in `metrics`. Starts nothing yet.
    pub fn new(client: kube::Client, metrics: &mut Registry) -> Self {
        Self::with_unserved_after(client, metrics, DEFAULT_UNSERVED_AFTER)
    }

    /// As [`Informers::new`], with informers of kinds that answer only 404 stopping after
    /// `unserved_after` instead of [`DEFAULT_UNSERVED_AFTER`].
    pub fn with_unserved_after(
        client: kube::Client,
        metrics: &mut Registry,
        unserved_after: Duration,
    ) -> Self {
        Self::scoped(client, metrics, unserved_after, NamespaceScope::All)
    }

    /// As [`Informers::with_unserved_after`], with the namespaced kinds (and Namespaces themselves)
    /// covering only the namespaces of `scope` (see [`NamespaceScope`]); cluster-scoped kinds stay
    /// cluster-wide. Every store, and so the Cache service, then holds only in-scope objects.
    pub fn scoped(
        client: kube::Client,
        metrics: &mut Registry,
        unserved_after: Duration,
        scope: NamespaceScope,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                running: Mutex::new(BTreeMap::new()),
                subscriber: Subscriber::default(),
                metrics: InformerMetrics::register(metrics),
                cancel: CancellationToken::new(),
                unserved_after,
                scope,
                matching: Mutex::new(None),
                indexes: Mutex::default(),
                streams_lists: Arc::default(),
            }),
        }
    }

    /// Starts the informer of `kind` unless it runs already (idempotent). The task lists (streamed as
    /// the watch's initial events where the server offers it, see `watch_list`; in pages of 500
    /// elsewhere), then watches from the list's resourceVersion with bookmarks, relists on 410 Gone
    /// and retries
    /// failures with kube-rs's default backoff (0.8 s doubling to 30 s) until [`Informers::shutdown`].
    /// A kind the API server does not serve stays unsynced, and its informer stops once it has
    /// answered only 404 for the unserved bound ([`InformerStatus::unserved`]); `ensure` leaves it
    /// stopped, [`Informers::retry_unserved`] starts it afresh. Does nothing after shutdown. A scoped
    /// kind follows the factory's [`NamespaceScope`] (see [`Informers::scoped`]).
    ///
    /// A kind whose informer runs metadata-only ([`Informers::ensure_metadata`]) is upgraded: that
    /// informer stops and a full one takes over its store, unsynced until its list is in. Until then
    /// the store keeps serving the metadata-only objects (the owner graph never sees a half-listed
    /// cache); the list then replaces every one of them in one step, each as an update.
    ///
    /// # Panics
    /// Outside a Tokio runtime (it spawns the informer task).
    pub fn ensure(&self, kind: &ResourceKind) {
        let mut running = self.inner.running.lock();
        let store = match running.get(kind) {
            Some(r) if !r.metadata_only => return,
            Some(r) => {
                r.cancel.cancel();
                tracing::info!(%kind, "a controller needs whole objects: upgrading a metadata-only informer");
                Some(r.store.clone())
            }
            None => None,
        };
        self.start(&mut running, kind, false, store);
    }

    /// As [`Informers::ensure`], for a reader that needs only each object's metadata (the owner
    /// graph, as upstream's garbage collector uses metadata informers): the informer lists and watches
    /// `PartialObjectMetadata`, so its cache holds names, labels, owners and finalizers but no spec or
    /// status — a fraction of the memory and of the decoding. A kind already informed (either way) is
    /// left as it is.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn ensure_metadata(&self, kind: &ResourceKind) {
        let mut running = self.inner.running.lock();
        if running.contains_key(kind) {
            return;
        }
        self.start(&mut running, kind, true, None);
    }

    /// Starts afresh every informer that stopped because its kind was not served (a CRD may have been
    /// created since); returns how many.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn retry_unserved(&self) -> usize {
        let mut running = self.inner.running.lock();
        let unserved: Vec<(ResourceKind, bool)> = running
            .iter()
            .filter(|(_, r)| r.unserved.load(Ordering::Acquire))
            .map(|(kind, r)| (kind.clone(), r.metadata_only))
            .collect();
        for (kind, metadata_only) in &unserved {
            tracing::debug!(%kind, "retrying an informer of a kind that was not served");
            self.start(&mut running, kind, *metadata_only, None);
        }
        unserved.len()
    }

    fn start(
        &self,
        running: &mut BTreeMap<ResourceKind, Running>,
        kind: &ResourceKind,
        metadata_only: bool,
        store: Option<Store>,
    ) {
        if self.inner.cancel.is_cancelled() {
            return;
        }
        let cancel = self.inner.cancel.child_token();
        let state = InformerState {
            kind: Arc::new(kind.clone()),
            store: store.unwrap_or_default(),
            synced: Arc::default(),
            unserved: Arc::default(),
            unserved_after: self.inner.unserved_after,
            metadata_only,
            subscriber: self.inner.subscriber.clone(),
            metrics: self.inner.metrics.clone(),
        };
        running.insert(
            kind.clone(),
            Running {
                metadata_only,
                store: state.store.clone(),
                synced: state.synced.clone(),
                unserved: state.unserved.clone(),
                cancel: cancel.clone(),
            },
        );
        state
            .store
            .set_named_indexes(&self.inner.indexes.lock().of_kind(kind));
        let span = tracing::info_span!("informer", kind = %kind);
        tracing::info!(%kind, metadata_only, "starting informer");
        let informers = self.clone();
        let kind = kind.clone();
        let run = async move {
            let asked = informers.inner.streams_lists.get_or_init(|| {
                super::watch_list::server_streams_lists(&informers.inner.client, &kind)
            });
            let streams_lists = tokio::select! {
                () = cancel.cancelled() => return,
                streams = asked => *streams,
            };
            let (parts, matching, make) = informers.streams(&kind, metadata_only, streams_lists);
            drop(informers);
            run_scoped_informer(state, parts, matching, make, cancel).await;
        };
        tokio::spawn(run.instrument(span));
    }

    /// What the informer of `kind` lists: its parts, the matching-namespace set it filters by, and the
    /// maker of its (tagged, merged) event streams.
    fn streams(
        &self,
        kind: &ResourceKind,
        metadata_only: bool,
        streams_lists: bool,
    ) -> (
        Vec<Option<String>>,
        Option<MatchingNamespaces>,
        impl FnMut() -> PartEvents + Send + 'static,
    ) {
        let client = self.inner.client.clone();
        let resource = kind.api_resource();
        let scoped = is_scoped_kind(kind);
        let namespaced = kind.namespaced;
        let (parts, matching) = match (&self.inner.scope, scoped) {
            (NamespaceScope::Names(names), true) => {
                (names.iter().cloned().map(Some).collect::<Vec<_>>(), None)
            }
            (NamespaceScope::Selector(selector), true) => {
                let mut slot = self.inner.matching.lock();
                let rx = slot.get_or_insert_with(|| {
                    namespace_filter::start(
                        client.clone(),
                        selector.clone(),
                        self.inner.cancel.child_token(),
                    )
                });
                (vec![None], Some(rx.clone()))
            }
            _ => (vec![None], None),
        };
        let listed = parts.clone();
        let typed = kind.clone();
        let make = move || -> PartEvents {
            // The default config asks for bookmarks and pages lists by 500 like client-go; where
            // the server streams lists, the list comes as the watch's initial events instead.
            let base = if streams_lists {
                watcher::Config::default().streaming_lists()
            } else {
                watcher::Config::default()
            };
            let streams = listed.iter().enumerate().map(|(i, part)| {
                // Which objects the part covers: every one, one namespace's, or (a Namespace of
                // the list) the one object of that name.
                let (namespace, config) = match part {
                    None => (None, base.clone()),
                    Some(ns) if namespaced => (Some(ns.as_str()), base.clone()),
                    Some(ns) => (None, base.clone().fields(&format!("metadata.name={ns}"))),
                };
                if metadata_only {
                    let typed = typed.clone();
                    watcher(api_of(&client, &resource, namespace), config)
                        .default_backoff()
                        .map(move |event| (i, event.map(|e| whole(&typed, e))))
                        .boxed()
                } else {
                    watcher(api_of(&client, &resource, namespace), config)
                        .default_backoff()
                        .map(move |event| (i, event))
                        .boxed()
                }
            });
            futures::stream::select_all(streams).boxed()
        };
        (parts, matching, make)
    }

    /// Makes the stores keep the named indexes `controller` declares, replacing what it declared
    /// before (`&[]` when it retires): a running store builds a new index over its objects at once, a
    /// store started later builds it from the start, and an index no controller declares any more is
    /// dropped. Two controllers declaring one name for a kind with different paths both get an index,
    /// and a list by that name is refused as ambiguous (said here too, as a warning).
    pub fn declare_indexes(&self, controller: &str, indexes: &[IndexSpec]) {
        let running = self.inner.running.lock();
        let mut declared = self.inner.indexes.lock();
        for kind in declared.replace(controller, indexes) {
            let wanted = declared.of_kind(&kind);
            let names: Vec<&String> = wanted.iter().map(|(name, _)| name).collect();
            if names.windows(2).any(|pair| pair[0] == pair[1]) {
                tracing::warn!(%kind, controller, "an index name is declared with different paths; lists by it are refused");
            }
            if let Some(r) = running.get(&kind) {
                r.store.set_named_indexes(&wanted);
            }
        }
    }

    /// Stops the informer of `kind` and forgets its cache (a retired controller's kind that no other
    /// controller needs). Events already sent stay sent. Returns whether it was running.
    pub fn remove(&self, kind: &ResourceKind) -> bool {
        let removed = self.inner.running.lock().remove(kind);
        if let Some(r) = &removed {
            r.cancel.cancel();
            tracing::info!(%kind, "stopped informer");
        }
        removed.is_some()
    }

    /// The client the informers list and watch with.
    pub fn client(&self) -> kube::Client {
        self.inner.client.clone()
    }

    /// A receiver of every informer's events from now on. It replaces the previous subscriber,
    /// whose channel closes: there is one consumer, the current leader's dispatcher. Events while
    /// nobody subscribes are dropped (the stores still update), so a new subscriber must read the
    /// stores (and [`Informers::is_synced`]) for the state it missed; `Synced` is not replayed. The
    /// channel is bounded: informers wait (never drop an event) while the subscriber is behind.
    pub fn subscribe(&self) -> mpsc::Receiver<InformerEvent> {
        self.inner.subscriber.replace()
    }

    /// Whether `kind`'s informer has completed its first list. Stays true through relists.
    pub fn is_synced(&self, kind: &ResourceKind) -> bool {
        self.inner
            .running
            .lock()
            .get(kind)
            .is_some_and(|r| r.synced.load(Ordering::Acquire))
    }

    /// The cache of `kind`; `None` if [`Informers::ensure`] was never called for it. The store of
    /// an unsynced kind may be empty or partial: check [`Informers::is_synced`].
    pub fn store(&self, kind: &ResourceKind) -> Option<Store> {
        self.inner.running.lock().get(kind).map(|r| r.store.clone())
    }

    /// Every ensured kind with whether it is synced or unserved and how many objects it caches, in
    /// kind order.
    pub fn kinds(&self) -> Vec<InformerStatus> {
        self.inner
            .running
            .lock()
            .iter()
            .map(|(kind, r)| InformerStatus {
                kind: kind.clone(),
                synced: r.synced.load(Ordering::Acquire),
                unserved: r.unserved.load(Ordering::Acquire),
                objects: r.store.len(),
            })
            .collect()
    }

    /// Stops every informer task; later [`Informers::ensure`] calls start nothing. The stores keep
    /// their last content. Dropping the last clone does the same.
    pub fn shutdown(&self) {
        self.inner.cancel.cancel();
    }
}

/// The API of `resource` in `namespace` (every namespace, or cluster-scoped, when `None`); with
/// `PartialObjectMeta` objects, kube-rs asks for metadata only.
fn api_of<K>(client: &kube::Client, resource: &ApiResource, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// A metadata-only watch event as the informer task takes it: an object of its own kind (the server
/// sends `meta.k8s.io/v1` `PartialObjectMetadata`) with no body beyond its metadata.
fn whole(
    kind: &ResourceKind,
    event: watcher::Event<PartialObjectMeta<DynamicObject>>,
) -> watcher::Event<DynamicObject> {
    let object = |partial: PartialObjectMeta<DynamicObject>| DynamicObject {
        types: Some(TypeMeta {
            api_version: kind.api_version(),
            kind: kind.kind.clone(),
        }),
        metadata: partial.metadata,
        data: serde_json::Value::Object(serde_json::Map::new()),
    };
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(object(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(object(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(object(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers")
            .field("kinds", &self.kinds())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn unreachable_informers() -> Informers {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Informers::new(
            kube::Client::try_from(config).unwrap(),
            &mut Registry::default(),
        )
    }

    fn pods() -> ResourceKind {
        ResourceKind::new("", "v1", "Pod", "pods", true)
    }

    #[tokio::test]
    async fn a_new_subscriber_replaces_the_previous_one() {
        let informers = unreachable_informers();
        let mut first = informers.subscribe();
        let mut second = informers.subscribe();
        assert!(
            first.recv().await.is_none(),
            "the replaced subscriber's channel must close"
        );
        informers
            .inner
            .subscriber
            .send(InformerEvent::Synced { kind: pods() })
            .await;
        assert!(matches!(
            second.try_recv(),
            Ok(InformerEvent::Synced { .. })
        ));
    }

    #[tokio::test]
    async fn ensure_is_idempotent_and_an_unreachable_server_leaves_the_kind_unsynced() {
        let informers = unreachable_informers();
        assert!(informers.store(&pods()).is_none());
        informers.ensure(&pods());
        informers.ensure(&pods());
        assert_eq!(
            informers.kinds(),
            [InformerStatus {
                kind: pods(),
                synced: false,
                unserved: false,
                objects: 0
            }]
        );
        assert!(informers.remove(&pods()));
        assert!(informers.kinds().is_empty());
        assert!(!informers.is_synced(&pods()));
        informers.shutdown();
    }

    #[tokio::test]
    async fn nothing_starts_after_shutdown() {
        let informers = unreachable_informers();
        informers.shutdown();
        informers.ensure(&pods());
        assert!(informers.store(&pods()).is_none());
        assert!(informers.kinds().is_empty());
    }
}
