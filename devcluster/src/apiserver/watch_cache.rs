//! The watch cache: ONE etcd watch on `/registry/` kept in a ring buffer of recent events and handed to
//! the HTTP watchers whose collection the key is in — as upstream's per-resource cachers do, a pod event
//! wakes the pod watchers only, not every watch of every kind — each event encoded once for all of them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::storage::{Storage, decode};

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// First write of the key.
    Added,
    /// A later write.
    Modified,
    /// Removal; the object is the last stored state stamped with the deletion revision.
    Deleted,
}

/// One change under `/registry/`.
#[derive(Debug, Clone)]
pub struct Event {
    /// etcd revision of the change.
    pub rev: i64,
    /// The key.
    pub key: String,
    /// What happened.
    pub kind: EventKind,
    /// The object after (or, for deletes, before) the change, resourceVersion = `rev`.
    pub object: Arc<Value>,
    /// The object before the change (MODIFIED/DELETED), for selector transitions.
    pub prev: Option<Arc<Value>>,
    /// `object` as JSON, encoded by the first watcher that sends it whole and shared by the rest
    /// (upstream's cachingObject).
    encoded: OnceLock<Vec<u8>>,
}

impl Event {
    /// An event of `kind` at `rev` on `key`.
    pub fn new(
        rev: i64,
        key: String,
        kind: EventKind,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) -> Self {
        Event {
            rev,
            key,
            kind,
            object,
            prev,
            encoded: OnceLock::new(),
        }
    }

    /// `object` serialized as JSON; encoded once per event, however many watchers send it.
    pub fn object_json(&self) -> &[u8] {
        self.encoded
            .get_or_init(|| serde_json::to_vec(&*self.object).unwrap_or_default())
    }
}

/// A watch start that cannot be served: the revision is older than the cache window.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("too old resource version: {requested} ({oldest})")]
pub struct TooOld {
    /// The requested revision.
    pub requested: i64,
    /// The oldest revision a watch can start from + 1 (as upstream prints it).
    pub oldest: i64,
}

struct Inner {
    events: VecDeque<Arc<Event>>,
    /// Every event with rev > window_start is in `events` (or still to come).
    window_start: i64,
    /// The newest revision the cache knows etcd reached.
    rev: i64,
    /// The HTTP watches, each with the key prefix of its collection.
    watchers: Vec<Registered>,
}

/// One HTTP watch as the cache sees it.
struct Registered {
    /// Only keys under this prefix are sent.
    prefix: String,
    /// Where they go.
    tx: mpsc::Sender<Arc<Event>>,
    /// Set when the watcher fell `lag_limit` events behind and was dropped.
    lagged: Arc<AtomicBool>,
}

/// Shared watch cache.
pub struct WatchCache {
    inner: Mutex<Inner>,
    /// Every event, for internal consumers ([`WatchCache::receiver`]).
    tx: broadcast::Sender<Arc<Event>>,
    capacity: usize,
    /// Events a watcher may have queued and not yet taken before it is dropped as too slow.
    lag_limit: usize,
}

/// A watcher's starting point: buffered events after its revision plus a live receiver.
pub struct Subscription {
    /// Buffered events under the prefix with rev > the requested revision.
    pub backlog: Vec<Arc<Event>>,
    /// Live events under the prefix (may repeat backlog revisions; skip rev <= last seen). Ends when
    /// the cache shuts down or the watcher fell too far behind ([`Subscription::lagged`]).
    pub live: mpsc::Receiver<Arc<Event>>,
    lagged: Arc<AtomicBool>,
}

impl Subscription {
    /// True once `live` ended because the watcher fell too far behind: it must answer 410 Gone, as
    /// events it has not taken were dropped.
    pub fn lagged(&self) -> bool {
        self.lagged.load(Ordering::Acquire)
    }
}

impl WatchCache {
    /// An empty cache whose window starts at `rev` (events after it will be recorded).
    pub fn new(rev: i64, capacity: usize) -> Arc<Self> {
        let lag_limit = capacity.max(16) * 4;
        let (tx, _) = broadcast::channel(lag_limit);
        Arc::new(WatchCache {
            inner: Mutex::new(Inner {
                events: VecDeque::new(),
                window_start: rev,
                rev,
                watchers: Vec::new(),
            }),
            tx,
            capacity,
            lag_limit,
        })
    }

    /// The newest revision the cache has seen (bookmarks carry it).
    pub fn revision(&self) -> i64 {
        self.inner.lock().rev
    }

    /// Starts a watch of the keys under `prefix` (a collection's, e.g. `/registry/pods/` or
    /// `/registry/pods/ns/`) from `from` (events with rev > from). Events of other keys never reach
    /// it. A watcher that lets more than `4 × capacity` events queue up is dropped (see
    /// [`Subscription::lagged`]).
    ///
    /// # Errors
    /// [`TooOld`] when events after `from` may have been dropped.
    pub fn subscribe(&self, prefix: &str, from: i64) -> Result<Subscription, TooOld> {
        let mut inner = self.inner.lock();
        if from < inner.window_start {
            return Err(TooOld {
                requested: from,
                oldest: inner.window_start + 1,
            });
        }
        let backlog = inner
            .events
            .iter()
            .filter(|e| e.rev > from && e.key.starts_with(prefix))
            .cloned()
            .collect();
        let (tx, live) = mpsc::channel(self.lag_limit);
        let lagged = Arc::new(AtomicBool::new(false));
        inner.watchers.push(Registered {
            prefix: prefix.to_string(),
            tx,
            lagged: lagged.clone(),
        });
        Ok(Subscription {
            backlog,
            live,
            lagged,
        })
    }

    /// A live receiver only (CRD sync and similar internal consumers).
    pub fn receiver(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    fn push(&self, e: Event) {
        let e = Arc::new(e);
        let mut inner = self.inner.lock();
        inner.rev = inner.rev.max(e.rev);
        inner.events.push_back(e.clone());
        while inner.events.len() > self.capacity {
            if let Some(old) = inner.events.pop_front() {
                inner.window_start = inner.window_start.max(old.rev);
            }
        }
        // Sending under the lock keeps subscribe() gap-free: a subscriber sees an event either in its
        // backlog or on its receiver. Only the watchers of the key's collection are woken; the others
        // are only looked at to forget the ones that went away.
        inner.watchers.retain(|w| {
            if !e.key.starts_with(&w.prefix) {
                return !w.tx.is_closed();
            }
            match w.tx.try_send(e.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    w.lagged.store(true, Ordering::Release);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        let _ = self.tx.send(e);
    }

    fn progress(&self, rev: i64) {
        let mut inner = self.inner.lock();
        inner.rev = inner.rev.max(rev);
    }

    /// Forgets events at or below a compacted revision, so watches from before it get 410 like a real
    /// apiserver whose cache window has passed (devcluster's cache window ends at the last compaction).
    pub fn compacted(&self, rev: i64) {
        let mut inner = self.inner.lock();
        inner.window_start = inner.window_start.max(rev);
        while inner.events.front().is_some_and(|e| e.rev <= rev) {
            inner.events.pop_front();
        }
    }

    fn restart_at(&self, rev: i64) {
        let mut inner = self.inner.lock();
        inner.events.clear();
        inner.window_start = rev;
        inner.rev = inner.rev.max(rev);
    }
}

/// Runs the single etcd watch until `cancel`, feeding `cache`; re-establishes the watch when etcd drops it.
/// `progress_every` asks etcd for progress notifications so bookmarks carry a fresh revision.
pub async fn run(
    storage: Storage,
    cache: Arc<WatchCache>,
    start: i64,
    progress_every: Duration,
    cancel: CancellationToken,
) {
    let mut next = start + 1;
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let opts = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(next)
            .with_progress_notify()
            // etcd may batch many events (each with its previous value) into one response; past the
            // client's 4 MiB decoding limit the watch would fail on that batch at every restart, and
            // devcluster would stop serving watches. Fragments keep each response near etcd's request
            // limit (1.5 MiB), one event at least.
            .with_fragment();
        let watch = storage.client().watch("/registry/", Some(opts)).await;
        let (mut watcher, mut stream) = match watch {
            Ok(w) => w.split(),
            Err(e) => {
                tracing::warn!(error = %e, "etcd watch failed to start; retrying");
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
        };
        let mut tick = tokio::time::interval(progress_every);
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {
                    if watcher.request_progress().await.is_err() {
                        break;
                    }
                }
                msg = stream.message() => {
                    let resp = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) | Err(_) => break,
                    };
                    if resp.canceled() {
                        // Our own watch fell behind a compaction: start over from the current revision.
                        let rev = storage.current_revision().await.unwrap_or(next);
                        tracing::warn!(compact = resp.compact_revision(), "etcd watch cancelled; watch cache restarts");
                        cache.restart_at(rev);
                        next = rev + 1;
                        break;
                    }
                    if let Some(h) = resp.header()
                        && resp.events().is_empty() {
                            cache.progress(h.revision());
                        }
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let key = String::from_utf8_lossy(kv.key()).into_owned();
                        let rev = kv.mod_revision();
                        let prev = ev.prev_kv().and_then(|p| decode(&key, p.value(), p.mod_revision()).ok()).map(Arc::new);
                        let event = match ev.event_type() {
                            EventType::Put => {
                                let Ok(obj) = decode(&key, kv.value(), rev) else { continue };
                                let kind = if kv.create_revision() == rev { EventKind::Added } else { EventKind::Modified };
                                Event::new(rev, key, kind, Arc::new(obj), prev)
                            }
                            EventType::Delete => {
                                // A delete event's kv carries the deletion revision as mod_revision.
                                let mut obj = prev.as_deref().cloned().unwrap_or_else(|| json!({"metadata": {}}));
                                super::meta::set(&mut obj, "resourceVersion", Value::String(rev.to_string()));
                                Event::new(rev, key, EventKind::Deleted, Arc::new(obj), prev)
                            }
                        };
                        next = next.max(event.rev + 1);
                        cache.push(event);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(rev: i64) -> Event {
        Event::new(
            rev,
            format!("/registry/configmaps/ns/{rev}"),
            EventKind::Added,
            Arc::new(json!({})),
            None,
        )
    }

    #[test]
    fn a_watch_from_inside_the_window_gets_the_later_events() {
        let cache = WatchCache::new(10, 100);
        for r in 11..=15 {
            cache.push(ev(r));
        }
        let sub = cache.subscribe("/registry/configmaps/", 12).unwrap();
        assert_eq!(
            sub.backlog.iter().map(|e| e.rev).collect::<Vec<_>>(),
            vec![13, 14, 15]
        );
    }

    #[test]
    fn a_watch_from_before_the_window_is_too_old() {
        let cache = WatchCache::new(10, 3);
        for r in 11..=15 {
            cache.push(ev(r));
        }
        let err = cache.subscribe("/registry/configmaps/", 11).err().unwrap();
        assert_eq!(err.oldest, 13);
        assert!(cache.subscribe("/registry/configmaps/", 12).is_ok());
    }

    #[test]
    fn a_watch_gets_only_the_events_of_its_collection() {
        let cache = WatchCache::new(10, 100);
        let mut pods = cache.subscribe("/registry/pods/", 10).unwrap();
        let mut configmaps = cache.subscribe("/registry/configmaps/", 10).unwrap();
        cache.push(ev(11));
        cache.push(Event::new(
            12,
            "/registry/pods/ns/p".into(),
            EventKind::Added,
            Arc::new(json!({})),
            None,
        ));
        assert_eq!(pods.live.try_recv().unwrap().rev, 12);
        assert!(pods.live.try_recv().is_err());
        assert_eq!(configmaps.live.try_recv().unwrap().rev, 11);
        assert!(configmaps.live.try_recv().is_err());
        let later = cache.subscribe("/registry/pods/", 10).unwrap();
        assert_eq!(
            later.backlog.iter().map(|e| e.rev).collect::<Vec<_>>(),
            vec![12]
        );
    }

    #[test]
    fn a_watcher_that_falls_too_far_behind_is_dropped_as_lagged() {
        let cache = WatchCache::new(10, 4);
        let mut sub = cache.subscribe("/registry/configmaps/", 10).unwrap();
        // At most 4 × max(capacity, 16) = 64 events wait for a watcher.
        for r in 11..=11 + 64 {
            cache.push(ev(r));
        }
        let mut received = 0;
        while sub.live.try_recv().is_ok() {
            received += 1;
        }
        assert_eq!(received, 64);
        assert!(sub.lagged());
        assert!(sub.live.is_closed());
    }

    #[test]
    fn a_watcher_that_went_away_is_forgotten() {
        let cache = WatchCache::new(10, 100);
        drop(cache.subscribe("/registry/pods/", 10).unwrap());
        cache.push(ev(11));
        assert!(cache.inner.lock().watchers.is_empty());
    }

    #[test]
    fn an_event_is_encoded_once_for_every_watcher() {
        let e = Event::new(
            11,
            "/registry/pods/ns/p".into(),
            EventKind::Added,
            Arc::new(json!({"metadata": {"name": "p"}})),
            None,
        );
        let first = e.object_json().as_ptr();
        assert_eq!(e.object_json(), br#"{"metadata":{"name":"p"}}"#);
        assert_eq!(e.object_json().as_ptr(), first);
    }

    #[test]
    fn compaction_moves_the_window() {
        let cache = WatchCache::new(10, 100);
        for r in 11..=15 {
            cache.push(ev(r));
        }
        cache.compacted(14);
        assert!(cache.subscribe("/registry/configmaps/", 13).is_err());
        assert_eq!(
            cache
                .subscribe("/registry/configmaps/", 14)
                .unwrap()
                .backlog
                .len(),
            1
        );
    }
}
