//! One kind's informer task: feeds kube-rs watcher events into the kind's store, then tells the subscriber.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flotilla_common::ResourceKind;
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use super::namespace_filter::MatchingNamespaces;
use super::scope::scoping_namespace;
use super::{CachedObject, InformerEvent, InformerMetrics, Store, Subscriber};

/// At most this many distinct error messages are remembered for log de-duplication; past it the
/// memory is cleared, so a flood of ever-different errors still logs but never grows without bound.
const MAX_REMEMBERED_ERRORS: usize = 64;

/// What one informer task writes to.
pub(crate) struct InformerState {
    /// The kind, shared by every object the task caches (one allocation, not one per object).
    pub(crate) kind: Arc<ResourceKind>,
    pub(crate) store: Store,
    pub(crate) synced: Arc<AtomicBool>,
    /// Set when the task gave up on a kind the API server does not serve (see `unserved_after`).
    pub(crate) unserved: Arc<AtomicBool>,
    /// How long a never-synced kind may keep answering 404 before its informer stops.
    pub(crate) unserved_after: Duration,
    /// The task lists and watches metadata only: its objects are cached as [`CachedObject::partial`].
    pub(crate) metadata_only: bool,
    pub(crate) subscriber: Subscriber,
    pub(crate) metrics: InformerMetrics,
}

/// Runs until `cancel` fires, `events` ends (a kube-rs watcher with backoff never ends), or the kind
/// has answered 404 since the start for `unserved_after` without ever syncing: the API server does not
/// serve it, and the task stops rather than retry forever (`unserved` is then set).
///
/// Every change is applied to the store before its event is sent, and events are sent in the
/// order they were applied. A (re)list is buffered from `Init` to `InitDone` and then replaces
/// the store in one step, so readers never see a half-listed cache. (The factory runs
/// [`run_scoped_informer`]; this is its one-part form.)
#[cfg(test)]
pub(crate) async fn run_informer<S>(state: InformerState, events: S, cancel: CancellationToken)
where
    S: futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>
        + Send
        + 'static,
{
    let mut events = Some(events.map(|e| (0, e)).boxed());
    let make = move || {
        events
            .take()
            .unwrap_or_else(|| futures::stream::pending().boxed())
    };
    run_scoped_informer(state, vec![None], None, make, cancel).await;
}

/// The events of one informer: each tagged with the index of the part (namespace) it belongs to.
pub(crate) type PartEvents =
    BoxStream<'static, (usize, Result<watcher::Event<DynamicObject>, watcher::Error>)>;

/// [`run_informer`] for a kind listed in parts and, optionally, filtered by namespace.
///
/// `parts[i]` names what the stream's part `i` lists: `None` the whole kind, `Some(ns)` the objects of
/// namespace `ns` (for a Namespace kind, the Namespace named `ns`). A part's relist replaces only that
/// part of the store, so each namespace keeps its own resourceVersion and 410 handling. The informer is
/// synced (and sends `Synced`) once every part has listed.
///
/// With `matching` (`--namespace-selector`), the task first waits for the first set of matching
/// namespaces, then drops every object outside it; when a namespace leaves the set its objects are
/// deleted (final state unknown), and when one joins the stream is made afresh with `make`, whose
/// relist brings its objects in. Without it `make` is called once.
pub(crate) async fn run_scoped_informer(
    state: InformerState,
    parts: Vec<Option<String>>,
    mut matching: Option<MatchingNamespaces>,
    mut make: impl FnMut() -> PartEvents,
    cancel: CancellationToken,
) {
    let mut task = Task {
        state,
        listings: vec![Vec::new(); parts.len()],
        part_synced: vec![false; parts.len()],
        parts,
        allowed: None,
        logged_errors: HashSet::new(),
        not_found_since: None,
        outgoing: Vec::new(),
    };
    loop {
        if let Some(rx) = matching.as_mut() {
            let first = tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                set = rx.wait_for(Option::is_some) => set.map(|s| s.clone()),
            };
            match first {
                Ok(set) => task.allowed = set,
                // The namespace task is gone: the factory is shutting down.
                Err(_) => return,
            }
        }
        let mut events = make();
        loop {
            let event = tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                changed = namespaces_changed(&mut matching) => {
                    let Some(set) = changed else { return };
                    let joined = task.scope_changed(set);
                    if !task.flush(&cancel).await {
                        return;
                    }
                    if joined {
                        break; // a namespace joined: relist
                    }
                    continue;
                }
                event = events.next() => event,
            };
            match event {
                None => return,
                Some((part, Ok(event))) => task.handle(part, event),
                Some((_, Err(error))) => {
                    if task.watch_failed(&error) {
                        return;
                    }
                }
            }
            if !task.flush(&cancel).await {
                return;
            }
        }
    }
}

/// The next set of matching namespaces; pending forever without a selector, `None` when the
/// namespace task is gone.
async fn namespaces_changed(
    matching: &mut Option<MatchingNamespaces>,
) -> Option<Arc<BTreeSet<String>>> {
    let Some(rx) = matching.as_mut() else {
        return std::future::pending().await;
    };
    rx.changed().await.ok()?;
    rx.borrow_and_update().clone()
}

struct Task {
    state: InformerState,
    /// What each part lists (`None`: the whole kind).
    parts: Vec<Option<String>>,
    /// Objects of each part's (re)list in progress.
    listings: Vec<Vec<Arc<CachedObject>>>,
    /// Which parts have completed a list.
    part_synced: Vec<bool>,
    /// With a namespace selector, the namespaces whose objects are kept.
    allowed: Option<Arc<BTreeSet<String>>>,
    /// Error messages already logged since the last successful list.
    logged_errors: HashSet<String>,
    /// Since when every failure of a never-synced informer has been a 404.
    not_found_since: Option<tokio::time::Instant>,
    /// Events of the change just applied, for [`Task::flush`] to send.
    outgoing: Vec<InformerEvent>,
}

/// Whether the API server answered that it does not serve the resource.
fn is_not_found(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => {
            matches!(e, kube::Error::Api(status) if status.code == 404)
        }
        _ => false,
    }
}

impl Task {
    /// Whether `object` is in the fleet's namespaces (always, without a selector).
    fn in_scope(&self, object: &CachedObject) -> bool {
        match (&self.allowed, scoping_namespace(object)) {
            (Some(allowed), Some(ns)) => allowed.contains(ns),
            _ => true,
        }
    }

    /// Applies a new set of matching namespaces: deletes the objects of those that left (final state
    /// unknown, as after a relist) and returns whether one joined (the caller then relists).
    fn scope_changed(&mut self, set: Arc<BTreeSet<String>>) -> bool {
        let old = self.allowed.replace(set.clone());
        let joined = old
            .as_ref()
            .is_none_or(|old| set.difference(old).next().is_some());
        let removed = self
            .state
            .store
            .remove_where(|o| scoping_namespace(o).is_some_and(|ns| !set.contains(ns)));
        for old in removed {
            self.send(InformerEvent::Deleted {
                old,
                final_state_unknown: true,
            });
        }
        if joined {
            tracing::debug!(kind = %self.state.kind, "a namespace joined the scope; relisting");
            self.listings.iter_mut().for_each(Vec::clear);
        }
        joined
    }

    fn handle(&mut self, part: usize, event: watcher::Event<DynamicObject>) {
        let kind = self.state.kind.to_string();
        if part >= self.parts.len() {
            return;
        }
        match event {
            watcher::Event::Init => {
                self.state.metrics.list(&kind, self.part_synced[part]);
                self.listings[part].clear();
            }
            watcher::Event::InitApply(object) => {
                let listed = match self.cached_as_listed(&object) {
                    Some(cached) => Some(cached),
                    None => self.parse(object),
                };
                if let Some(object) = listed
                    && self.in_scope(&object)
                {
                    self.listings[part].push(object);
                }
            }
            watcher::Event::InitDone => {
                let listing = std::mem::take(&mut self.listings[part]);
                let events = match &self.parts[part] {
                    None => self.state.store.replace(listing),
                    Some(ns) => self
                        .state
                        .store
                        .replace_where(listing, |o| scoping_namespace(o) == Some(ns.as_str())),
                };
                self.part_synced[part] = true;
                self.state.metrics.watch(&kind);
                let all_synced = self.part_synced.iter().all(|s| *s);
                if all_synced {
                    self.state.synced.store(true, Ordering::Release);
                    self.logged_errors.clear();
                }
                for event in events {
                    self.send(event);
                }
                if all_synced {
                    self.send(InformerEvent::Synced {
                        kind: ResourceKind::clone(&self.state.kind),
                    });
                    tracing::debug!(%kind, objects = self.state.store.len(), "informer synced");
                }
            }
            watcher::Event::Apply(object) => {
                if let Some(new) = self.parse(object)
                    && self.in_scope(&new)
                {
                    let old = self.state.store.apply(new.clone());
                    self.send(InformerEvent::Applied { old, new });
                }
            }
            watcher::Event::Delete(object) => {
                if let Some(old) = self.parse(object)
                    && self.in_scope(&old)
                {
                    self.state.store.delete(&old.key());
                    self.send(InformerEvent::Deleted {
                        old,
                        final_state_unknown: false,
                    });
                }
            }
        }
    }

    /// The cached object `listed` is the same version of — same UID, same numeric resourceVersion,
    /// same form (whole or metadata only) — so a relist holds one copy of what did not change, not
    /// two: the listing shares the cache's objects, and only changed ones are parsed anew. `None`
    /// when it is not cached, changed, or has no numeric resourceVersion (compared by content then).
    fn cached_as_listed(&self, listed: &DynamicObject) -> Option<Arc<CachedObject>> {
        let meta = &listed.metadata;
        let key = self
            .state
            .kind
            .object_key(meta.namespace.as_deref(), meta.name.as_deref()?);
        let cached = self.state.store.get(&key)?;
        let same = cached.resource_version != 0
            && meta.uid.as_deref() == Some(cached.uid.as_str())
            && meta.resource_version.as_deref()
                == Some(cached.resource_version.to_string().as_str())
            && cached.partial == self.state.metadata_only;
        same.then_some(cached)
    }

    fn parse(&mut self, object: DynamicObject) -> Option<Arc<CachedObject>> {
        let parsed = CachedObject::from_dynamic(&self.state.kind, object);
        match parsed {
            Ok(mut object) => {
                object.partial = self.state.metadata_only;
                Some(Arc::new(object))
            }
            Err(error) => {
                self.state.metrics.error(&self.state.kind.to_string());
                tracing::warn!(kind = %self.state.kind, %error, "skipping an object the cache cannot take");
                None
            }
        }
    }

    /// Queues `event` for [`Task::flush`], which sends it after the store applied the change.
    fn send(&mut self, event: InformerEvent) {
        let kind = self.state.kind.to_string();
        let name = match &event {
            InformerEvent::Applied { .. } => "applied",
            InformerEvent::Deleted { .. } => "deleted",
            InformerEvent::Synced { .. } => "synced",
        };
        self.state.metrics.event(&kind, name);
        self.state.metrics.objects(&kind, self.state.store.len());
        self.outgoing.push(event);
    }

    /// Sends the queued events in order, each waiting while the subscriber's channel is full. Returns
    /// false when `cancel` fired meanwhile (the task stops; the rest are not sent).
    async fn flush(&mut self, cancel: &CancellationToken) -> bool {
        for event in std::mem::take(&mut self.outgoing) {
            tokio::select! {
                biased;
                () = cancel.cancelled() => return false,
                () = self.state.subscriber.send(event) => {}
            }
        }
        true
    }

    /// Counts every failure and logs each distinct message once until the next successful list, so a
    /// retrying informer does not flood the log. Returns true when the task should stop: the kind has
    /// never synced and has answered nothing but 404 for `unserved_after`.
    fn watch_failed(&mut self, error: &watcher::Error) -> bool {
        self.state.metrics.error(&self.state.kind.to_string());
        if !self.state.synced.load(Ordering::Acquire) && is_not_found(error) {
            let now = tokio::time::Instant::now();
            let since = *self.not_found_since.get_or_insert(now);
            if now.duration_since(since) >= self.state.unserved_after {
                self.state.unserved.store(true, Ordering::Release);
                tracing::warn!(kind = %self.state.kind, after = ?self.state.unserved_after,
                    "the API server does not serve this kind; stopping its informer (flotilla status lists it)");
                return true;
            }
        } else {
            self.not_found_since = None;
        }
        let message = error.to_string();
        if self.logged_errors.contains(&message) {
            return false;
        }
        if self.logged_errors.len() >= MAX_REMEMBERED_ERRORS {
            self.logged_errors.clear();
        }
        tracing::warn!(kind = %self.state.kind, error = %message, "list/watch failed; retrying with backoff");
        self.logged_errors.insert(message);
        false
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kube::core::Status;
    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;

    fn kind() -> ResourceKind {
        ResourceKind::new("", "v1", "Pod", "pods", true)
    }

    fn pod(name: &str, rv: u64) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": rv.to_string(),
            "managedFields": [{"manager": "m"}]}}))
        .unwrap()
    }

    fn state() -> (InformerState, mpsc::Receiver<InformerEvent>) {
        let subscriber = Subscriber::default();
        let rx = subscriber.replace();
        let state = InformerState {
            kind: Arc::new(kind()),
            store: Store::default(),
            synced: Arc::default(),
            unserved: Arc::default(),
            unserved_after: Duration::from_secs(60),
            metadata_only: false,
            subscriber,
            metrics: InformerMetrics::default(),
        };
        (state, rx)
    }

    /// What the API server answers a list of a kind it does not serve.
    fn not_found() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(
            Status::failure(
                "the server could not find the requested resource",
                "NotFound",
            )
            .with_code(404),
        )))
    }

    fn describe(event: &InformerEvent) -> String {
        match event {
            InformerEvent::Applied { old, new } => format!(
                "applied {}@{} old={:?}",
                new.key(),
                new.resource_version,
                old.as_ref().map(|o| o.resource_version)
            ),
            InformerEvent::Deleted {
                old,
                final_state_unknown,
            } => {
                format!("deleted {} unknown={final_state_unknown}", old.key())
            }
            InformerEvent::Synced { kind } => format!("synced {kind}"),
        }
    }

    fn drain(rx: &mut mpsc::Receiver<InformerEvent>) -> Vec<String> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| describe(&e))
            .collect()
    }

    fn gone() -> watcher::Error {
        watcher::Error::WatchError(Box::new(
            Status::failure("too old resource version", "Expired").with_code(410),
        ))
    }

    #[tokio::test]
    async fn a_kind_is_synced_after_its_first_complete_list_and_events_follow_in_order() {
        let (state, mut rx) = state();
        let store = state.store.clone();
        let synced = state.synced.clone();
        let (tx, events) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_informer(
            state,
            tokio_stream::wrappers::UnboundedReceiverStream::new(events),
            cancel.clone(),
        ));

        tx.send(Ok(watcher::Event::Init)).unwrap();
        tx.send(Ok(watcher::Event::InitApply(pod("a", 1)))).unwrap();
        tx.send(Ok(watcher::Event::InitApply(pod("b", 2)))).unwrap();
        tx.send(Ok(watcher::Event::InitDone)).unwrap();
        tx.send(Ok(watcher::Event::Apply(pod("a", 3)))).unwrap();
        tx.send(Ok(watcher::Event::Delete(pod("b", 4)))).unwrap();
        drop(tx);
        task.await.unwrap();

        assert!(synced.load(Ordering::Acquire));
        assert_eq!(
            drain(&mut rx),
            [
                "applied ns/a@1 old=None",
                "applied ns/b@2 old=None",
                "synced v1/pods",
                "applied ns/a@3 old=Some(1)",
                "deleted ns/b unknown=false",
            ]
        );
        assert_eq!(
            store.list().iter().map(|o| o.key()).collect::<Vec<_>>(),
            ["ns/a"]
        );
        assert!(
            store.get("ns/a").unwrap().to_value()["metadata"]
                .get("managedFields")
                .is_none()
        );
    }

    #[tokio::test]
    async fn the_store_holds_the_change_before_its_event_arrives() {
        let (state, mut rx) = state();
        let store = state.store.clone();
        let (tx, events) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        tokio::spawn(run_informer(
            state,
            tokio_stream::wrappers::UnboundedReceiverStream::new(events),
            cancel.clone(),
        ));
        tx.send(Ok(watcher::Event::Init)).unwrap();
        tx.send(Ok(watcher::Event::InitDone)).unwrap();
        for rv in 1..=50 {
            tx.send(Ok(watcher::Event::Apply(pod("a", rv)))).unwrap();
        }
        assert!(matches!(
            rx.recv().await,
            Some(InformerEvent::Synced { .. })
        ));
        for rv in 1..=50 {
            let Some(InformerEvent::Applied { new, .. }) = rx.recv().await else {
                panic!("expected applied {rv}")
            };
            assert_eq!(new.resource_version, rv);
            assert!(
                store.get("ns/a").unwrap().resource_version >= rv,
                "store lags behind event {rv}"
            );
        }
        cancel.cancel();
    }

    #[tokio::test]
    async fn a_relist_after_gone_deletes_what_vanished_with_final_state_unknown() {
        let (state, mut rx) = state();
        let store = state.store.clone();
        let stream = futures::stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod("a", 1))),
            Ok(watcher::Event::InitApply(pod("b", 2))),
            Ok(watcher::Event::InitDone),
            Err(gone()),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod("b", 2))),
            Ok(watcher::Event::InitApply(pod("c", 9))),
            Ok(watcher::Event::InitDone),
        ]);
        run_informer(state, stream, CancellationToken::new()).await;
        assert_eq!(
            drain(&mut rx),
            [
                "applied ns/a@1 old=None",
                "applied ns/b@2 old=None",
                "synced v1/pods",
                "deleted ns/a unknown=true",
                "applied ns/c@9 old=None",
                "synced v1/pods",
            ]
        );
        assert_eq!(store.len(), 2);
    }

    #[tokio::test]
    async fn a_relist_keeps_the_cached_copy_of_what_did_not_change_and_parses_what_did() {
        let (state, mut rx) = state();
        let store = state.store.clone();
        let mut changed = pod("b", 2);
        changed.metadata.resource_version = Some("7".to_owned());
        let stream = futures::stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod("a", 1))),
            Ok(watcher::Event::InitApply(pod("b", 2))),
            Ok(watcher::Event::InitDone),
            Err(gone()),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod("a", 1))),
            Ok(watcher::Event::InitApply(changed)),
            Ok(watcher::Event::InitDone),
        ]);
        run_informer(state, stream, CancellationToken::new()).await;
        let first: Vec<Arc<CachedObject>> = std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|e| match e {
                InformerEvent::Applied { new, .. } => Some(new),
                _ => None,
            })
            .collect();
        let (a, b) = (&first[0], &first[1]);
        assert!(
            Arc::ptr_eq(a, &store.get("ns/a").unwrap()),
            "the unchanged object is the copy cached before the relist"
        );
        assert!(!Arc::ptr_eq(b, &store.get("ns/b").unwrap()));
        assert_eq!(store.get("ns/b").unwrap().resource_version, 7);
    }

    #[tokio::test]
    async fn a_kind_the_server_does_not_serve_stays_unsynced_and_counts_errors() {
        let (state, mut rx) = state();
        let synced = state.synced.clone();
        let metrics = state.metrics.clone();
        let unserved = state.unserved.clone();
        run_informer(
            state,
            futures::stream::iter([Err(not_found()), Err(not_found()), Err(not_found())]),
            CancellationToken::new(),
        )
        .await;
        assert!(!synced.load(Ordering::Acquire));
        assert!(
            !unserved.load(Ordering::Acquire),
            "three quick 404s are within the bound"
        );
        assert_eq!(metrics.errors_of("v1/pods"), 3);
        assert!(drain(&mut rx).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_informer_that_answers_only_404_for_the_bound_stops_and_says_the_kind_is_unserved() {
        let (mut state, _rx) = state();
        state.unserved_after = Duration::from_secs(10);
        let unserved = state.unserved.clone();
        // A 404 every 3 s, forever: the task must end on its own once 10 s have passed.
        let stream = futures::stream::unfold((), |()| async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Some((Err(not_found()), ()))
        });
        let started = tokio::time::Instant::now();
        run_informer(state, stream, CancellationToken::new()).await;
        assert!(unserved.load(Ordering::Acquire));
        let took = started.elapsed();
        assert!(
            (Duration::from_secs(10)..Duration::from_secs(16)).contains(&took),
            "{took:?}"
        );
    }

    async fn next(rx: &mut mpsc::Receiver<InformerEvent>) -> String {
        let event = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("an informer event within 5 s")
            .expect("the channel is open");
        describe(&event)
    }

    fn pod_in(ns: &str, name: &str, rv: u64) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"), "resourceVersion": rv.to_string()}}))
        .unwrap()
    }

    #[tokio::test]
    async fn a_kind_listed_per_namespace_syncs_when_every_namespace_listed_and_relists_each_alone()
    {
        let (state, mut rx) = state();
        let store = state.store.clone();
        let synced = state.synced.clone();
        let events: Vec<(usize, Result<watcher::Event<DynamicObject>, watcher::Error>)> = vec![
            (0, Ok(watcher::Event::Init)),
            (0, Ok(watcher::Event::InitApply(pod_in("a", "x", 1)))),
            (0, Ok(watcher::Event::InitDone)),
            (1, Ok(watcher::Event::Init)),
            (1, Ok(watcher::Event::InitApply(pod_in("b", "y", 2)))),
            (1, Ok(watcher::Event::InitDone)),
            // Namespace a's watch expires; its relist finds x gone and must not touch b.
            (0, Err(gone())),
            (0, Ok(watcher::Event::Init)),
            (0, Ok(watcher::Event::InitDone)),
        ];
        let mut events = Some(futures::stream::iter(events).boxed());
        let make = move || {
            events
                .take()
                .unwrap_or_else(|| futures::stream::pending().boxed())
        };
        run_scoped_informer(
            state,
            vec![Some("a".into()), Some("b".into())],
            None,
            make,
            CancellationToken::new(),
        )
        .await;
        assert!(synced.load(Ordering::Acquire));
        assert_eq!(
            drain(&mut rx),
            [
                "applied a/x@1 old=None",
                "applied b/y@2 old=None",
                "synced v1/pods",
                "deleted a/x unknown=true",
                "synced v1/pods",
            ],
            "synced only once both namespaces listed"
        );
        assert_eq!(
            store.list().iter().map(|o| o.key()).collect::<Vec<_>>(),
            ["b/y"]
        );
    }

    #[tokio::test]
    async fn with_a_namespace_selector_only_matching_namespaces_are_cached_and_scope_changes_apply()
    {
        let (state, mut rx) = state();
        let store = state.store.clone();
        let (scope_tx, scope_rx) = tokio::sync::watch::channel(None);
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let make = {
            let made = made.clone();
            move || {
                made.fetch_add(1, Ordering::SeqCst);
                let listing: Vec<(usize, Result<watcher::Event<DynamicObject>, watcher::Error>)> = vec![
                    (0, Ok(watcher::Event::Init)),
                    (0, Ok(watcher::Event::InitApply(pod_in("a", "x", 1)))),
                    (0, Ok(watcher::Event::InitApply(pod_in("b", "y", 2)))),
                    (0, Ok(watcher::Event::InitDone)),
                ];
                futures::stream::iter(listing)
                    .chain(futures::stream::pending())
                    .boxed()
            }
        };
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_scoped_informer(
            state,
            vec![None],
            Some(scope_rx),
            make,
            cancel.clone(),
        ));
        scope_tx.send_replace(Some(Arc::new(BTreeSet::from(["a".to_owned()]))));
        assert_eq!(next(&mut rx).await, "applied a/x@1 old=None");
        assert_eq!(next(&mut rx).await, "synced v1/pods");
        // a leaves the scope: its objects go; b joins: the informer relists and takes b's.
        scope_tx.send_replace(Some(Arc::new(BTreeSet::from(["b".to_owned()]))));
        assert_eq!(next(&mut rx).await, "deleted a/x unknown=true");
        assert_eq!(next(&mut rx).await, "applied b/y@2 old=None");
        assert_eq!(next(&mut rx).await, "synced v1/pods");
        assert_eq!(made.load(Ordering::SeqCst), 2, "one relist when b joined");
        assert_eq!(
            store.list().iter().map(|o| o.key()).collect::<Vec<_>>(),
            ["b/y"]
        );
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_garbled_object_is_skipped_and_counted() {
        let (state, mut rx) = state();
        let metrics = state.metrics.clone();
        let store = state.store.clone();
        let no_uid: DynamicObject =
            serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "ns"}})).unwrap();
        let stream = futures::stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(no_uid)),
            Ok(watcher::Event::InitApply(pod("a", 1))),
            Ok(watcher::Event::InitDone),
        ]);
        run_informer(state, stream, CancellationToken::new()).await;
        assert_eq!(metrics.errors_of("v1/pods"), 1);
        assert_eq!(store.len(), 1);
        assert_eq!(
            drain(&mut rx),
            ["applied ns/a@1 old=None", "synced v1/pods"]
        );
    }

    #[tokio::test]
    async fn a_cancelled_informer_stops_even_while_its_stream_is_pending() {
        let (state, _rx) = state();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_informer(
            state,
            futures::stream::pending(),
            cancel.clone(),
        ));
        cancel.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("the informer did not stop within 5 s of cancellation")
            .unwrap();
    }
}
