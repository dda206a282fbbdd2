//! Keys waiting out an `add_after` delay, earliest first (client-go's delaying queue, without its goroutine:
//! the queue's owner promotes due keys itself).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use tokio::time::Instant;

/// A min-heap of `(ready_at, key, reason)` with at most one entry per key.
#[derive(Debug)]
pub(super) struct Waiting<K, R = ()> {
    /// Ordered by ready time; the sequence number keeps insertion order among equal times and makes entries
    /// unique. Exactly the entries of `by_key`, mirrored, each with why the key was delayed.
    by_time: BTreeMap<(Instant, u64), (K, R)>,
    /// Each waiting key's entry in `by_time`.
    by_key: HashMap<K, (Instant, u64)>,
    next_seq: u64,
}

impl<K, R> Default for Waiting<K, R> {
    fn default() -> Self {
        Self {
            by_time: BTreeMap::new(),
            by_key: HashMap::new(),
            next_seq: 0,
        }
    }
}

impl<K: Clone + Eq + Hash, R> Waiting<K, R> {
    /// Makes `key` ready at `ready_at`, or earlier if it already waits for an earlier time (client-go keeps the
    /// earliest, so a short requeue is never pushed back by a longer one); the entry that stays keeps its reason.
    pub(super) fn insert(&mut self, key: K, ready_at: Instant, reason: R) {
        if let Some(&(existing, seq)) = self.by_key.get(&key) {
            if existing <= ready_at {
                return;
            }
            self.by_time.remove(&(existing, seq));
        }
        let entry = (ready_at, self.next_seq);
        self.next_seq = self.next_seq.wrapping_add(1);
        self.by_time.insert(entry, (key.clone(), reason));
        self.by_key.insert(key, entry);
    }

    /// Removes and returns the earliest key if it is ready at `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<(K, R)> {
        let entry = self
            .by_time
            .first_entry()
            .filter(|entry| entry.key().0 <= now)?;
        let (key, reason) = entry.remove();
        self.by_key.remove(&key);
        Some((key, reason))
    }

    /// When the earliest key becomes ready.
    pub(super) fn next_ready_at(&self) -> Option<Instant> {
        self.by_time
            .first_key_value()
            .map(|(&(ready_at, _), _)| ready_at)
    }

    /// When `key` becomes ready, if it waits.
    #[cfg(test)]
    pub(super) fn ready_at(&self, key: &K) -> Option<Instant> {
        self.by_key.get(key).map(|&(ready_at, _)| ready_at)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    pub(super) fn clear(&mut self) {
        self.by_time.clear();
        self.by_key.clear();
    }
}
