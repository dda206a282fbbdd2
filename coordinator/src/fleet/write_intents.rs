//! The leader's table of write intents: a traced reconcile says, just before it writes a named object,
//! which object and which client span; the first watch event on that object afterwards (the write's
//! echo) takes the intent and links its trace to that span. The table only serves tracing: it is
//! bounded in size and age, and whatever it drops is counted, never waited for.
//!
//! One intent per object: a later write of the same object before the echo replaces the earlier
//! intent (the link then goes to the later request, which is in the same or a later reconcile). An
//! echo never comes for a write that failed; its intent ages out.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use flotilla_common::{ResourceKind, TraceContext};
use tokio::time::Instant;

/// How long an intent waits for its echo. A watch event follows a successful write within
/// milliseconds unless the informer is relisting; 30 s covers a relist of a large kind, and an echo
/// later than that would link a trace nobody reads as one any more.
pub const INTENT_TTL: Duration = Duration::from_secs(30);

/// Most intents kept at once: each is a few hundred bytes. At full sampling a burst of 8192 writes
/// of named objects within one echo's time is far beyond what one leader's informers see; past it
/// the oldest go first (counted).
pub const MAX_INTENTS: usize = 8192;

/// Intents dropped without an echo, by why, since the last [`WriteIntents::take_drops`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Drops {
    /// Removed, oldest first, to make room for a newer one.
    pub table_full: u64,
    /// No watch event on the object within [`INTENT_TTL`].
    pub expired: u64,
}

#[derive(Debug, Clone, Copy)]
struct Intent {
    /// The intent's place in `by_age`.
    at: Instant,
    seq: u64,
    trace: TraceContext,
}

/// The write intents waiting for their echo; see the module documentation.
///
/// Invariant: `by_age` and `by_object` hold the same intents (an entry of one is an entry of the
/// other, under the same `(at, seq)`), at most `capacity` of them.
#[derive(Debug)]
pub struct WriteIntents {
    /// Kind → object key → its intent. Nested so a lookup by an event's kind and key allocates nothing.
    by_object: HashMap<ResourceKind, HashMap<String, Intent>>,
    /// (recorded at, sequence) → the object, oldest first: what expiry and eviction take.
    by_age: BTreeMap<(Instant, u64), (ResourceKind, String)>,
    next_seq: u64,
    capacity: usize,
    ttl: Duration,
    drops: Drops,
}

impl Default for WriteIntents {
    fn default() -> Self {
        Self::new(MAX_INTENTS, INTENT_TTL)
    }
}

impl WriteIntents {
    /// An empty table of at most `capacity` intents (at least one), each kept `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            by_object: HashMap::new(),
            by_age: BTreeMap::new(),
            next_seq: 0,
            capacity: capacity.max(1),
            ttl,
            drops: Drops::default(),
        }
    }

    /// Records that the object `key` of `kind` is about to be written by the client span `trace`, at
    /// `now`. Replaces an earlier intent on the object; makes room by dropping the oldest.
    pub fn insert(&mut self, kind: &ResourceKind, key: &str, trace: TraceContext, now: Instant) {
        self.expire(now);
        self.remove(kind, key);
        while self.by_age.len() >= self.capacity {
            let Some(((at, seq), (old_kind, old_key))) = self.by_age.pop_first() else {
                break;
            };
            self.forget(&old_kind, &old_key, (at, seq));
            self.drops.table_full += 1;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_age
            .insert((now, seq), (kind.clone(), key.to_owned()));
        self.by_object.entry(kind.clone()).or_default().insert(
            key.to_owned(),
            Intent {
                at: now,
                seq,
                trace,
            },
        );
    }

    /// The watch event on the object `key` of `kind` at `now`: its intent, if one waits and is not
    /// older than the bound; taken, so only the first event after the write gets it.
    pub fn take(&mut self, kind: &ResourceKind, key: &str, now: Instant) -> Option<TraceContext> {
        if self.by_age.is_empty() {
            return None;
        }
        let intent = self.remove(kind, key)?;
        if now.saturating_duration_since(intent.at) >= self.ttl {
            self.drops.expired += 1;
            return None;
        }
        Some(intent.trace)
    }

    /// Drops every intent `ttl` old or older at `now`.
    pub fn expire(&mut self, now: Instant) {
        while let Some((&(at, seq), _)) = self.by_age.first_key_value() {
            if now.saturating_duration_since(at) < self.ttl {
                break;
            }
            if let Some((_, (kind, key))) = self.by_age.pop_first() {
                self.forget(&kind, &key, (at, seq));
                self.drops.expired += 1;
            }
        }
    }

    /// The drops counted since the last call.
    pub fn take_drops(&mut self) -> Drops {
        std::mem::take(&mut self.drops)
    }

    /// Intents waiting.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_age.len()
    }

    /// Whether no intent waits.
    pub fn is_empty(&self) -> bool {
        self.by_age.is_empty()
    }

    /// Removes the object's intent from both maps.
    fn remove(&mut self, kind: &ResourceKind, key: &str) -> Option<Intent> {
        let objects = self.by_object.get_mut(kind)?;
        let intent = objects.remove(key)?;
        if objects.is_empty() {
            self.by_object.remove(kind);
        }
        self.by_age.remove(&(intent.at, intent.seq));
        Some(intent)
    }

    /// Removes the object's intent from `by_object`, if it is the one at `slot` of `by_age`.
    fn forget(&mut self, kind: &ResourceKind, key: &str, slot: (Instant, u64)) {
        if let Some(objects) = self.by_object.get_mut(kind) {
            if objects.get(key).is_some_and(|i| (i.at, i.seq) == slot) {
                objects.remove(key);
            }
            if objects.is_empty() {
                self.by_object.remove(kind);
            }
        }
    }

    /// Asserts the invariant (tests).
    #[cfg(test)]
    fn check(&self) {
        let entries: usize = self.by_object.values().map(HashMap::len).sum();
        assert_eq!(entries, self.by_age.len());
        assert!(self.by_age.len() <= self.capacity);
        for ((at, seq), (kind, key)) in &self.by_age {
            let intent = &self.by_object[kind][key];
            assert_eq!((intent.at, intent.seq), (*at, *seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs() -> ResourceKind {
        ResourceKind::new("apps", "v1", "ReplicaSet", "replicasets", true)
    }

    fn trace(n: u64) -> TraceContext {
        TraceContext::parse(&format!("00-{:032x}-{:016x}-01", n + 1, n + 1)).expect("valid")
    }

    #[test]
    fn the_first_event_on_the_object_takes_the_intent_and_a_second_finds_none() {
        let mut t = WriteIntents::default();
        let now = Instant::now();
        t.insert(&rs(), "default/web", trace(1), now);
        t.check();
        let pods = ResourceKind::new("", "v1", "Pod", "pods", true);
        assert_eq!(t.take(&pods, "default/web", now), None, "another kind");
        assert_eq!(t.take(&rs(), "default/api", now), None, "another object");
        assert_eq!(t.take(&rs(), "default/web", now), Some(trace(1)));
        assert_eq!(t.take(&rs(), "default/web", now), None, "consumed once");
        assert!(t.is_empty());
        t.check();
        assert_eq!(t.take_drops(), Drops::default());
    }

    #[test]
    fn an_intent_older_than_the_bound_is_dropped_and_counted() {
        let mut t = WriteIntents::new(16, Duration::from_secs(30));
        let start = Instant::now();
        t.insert(&rs(), "a/one", trace(1), start);
        t.insert(&rs(), "a/two", trace(2), start + Duration::from_secs(10));
        // Just inside the bound the echo still links.
        assert_eq!(
            t.take(&rs(), "a/one", start + Duration::from_millis(29_999)),
            Some(trace(1))
        );
        t.insert(&rs(), "a/one", trace(3), start + Duration::from_secs(20));
        t.expire(start + Duration::from_secs(40));
        t.check();
        assert_eq!(t.len(), 1, "a/two expired, the newer a/one stays");
        // At the bound a late echo finds nothing.
        assert_eq!(
            t.take(&rs(), "a/one", start + Duration::from_secs(50)),
            None
        );
        assert_eq!(
            t.take_drops(),
            Drops {
                table_full: 0,
                expired: 2
            }
        );
        assert_eq!(t.take_drops(), Drops::default(), "counted once");
        t.check();
    }

    #[test]
    fn a_full_table_drops_its_oldest_intent_and_counts_it() {
        let mut t = WriteIntents::new(3, INTENT_TTL);
        let start = Instant::now();
        for n in 0..5u64 {
            t.insert(
                &rs(),
                &format!("a/{n}"),
                trace(n),
                start + Duration::from_millis(n),
            );
            t.check();
        }
        assert_eq!(t.len(), 3);
        assert_eq!(t.take(&rs(), "a/0", start), None);
        assert_eq!(t.take(&rs(), "a/1", start), None);
        assert_eq!(t.take(&rs(), "a/4", start), Some(trace(4)));
        assert_eq!(t.take_drops().table_full, 2);
    }

    #[test]
    fn a_second_write_of_the_object_replaces_its_intent_without_a_drop() {
        let mut t = WriteIntents::new(2, INTENT_TTL);
        let now = Instant::now();
        t.insert(&rs(), "a/web", trace(1), now);
        t.insert(&rs(), "a/web", trace(2), now);
        t.insert(&rs(), "a/api", trace(3), now);
        t.check();
        assert_eq!(t.len(), 2);
        assert_eq!(t.take(&rs(), "a/web", now), Some(trace(2)));
        assert_eq!(t.take_drops(), Drops::default());
    }
}
