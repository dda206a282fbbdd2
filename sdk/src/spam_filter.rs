//! The events spam filter of client-go's event broadcaster (`EventSourceObjectSpamFilter`): each
//! object may be the subject of a burst of 25 events from one source, then one more every 5 minutes.
//! A controller failing on the same object in a loop thus cannot flood the API server with Events.

use std::hash::Hash;
use std::num::NonZeroUsize;
use std::time::Duration;

use lru::LruCache;
use parking_lot::Mutex;
use tokio::time::Instant;

/// client-go's `defaultSpamBurst`: events an object may get at once.
pub const SPAM_BURST: u32 = 25;

/// client-go's `defaultSpamQPS` (1/300): one more event per object every 5 minutes.
pub const SPAM_REFILL: Duration = Duration::from_secs(300);

/// client-go's `maxLruCacheEntries`: the objects remembered; the least recently used is forgotten
/// first (a forgotten object starts again with a full burst, as in client-go).
pub const SPAM_MAX_OBJECTS: usize = 4096;

/// A token bucket per key (an event's source and object), bounded in the keys it remembers; each
/// [`SpamFilter::allow`] is O(1). Time is tokio's, so tests run it on paused time.
#[derive(Debug)]
pub struct SpamFilter<K: Hash + Eq> {
    burst: f64,
    refill: Duration,
    buckets: Mutex<LruCache<K, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl<K: Hash + Eq + Clone> Default for SpamFilter<K> {
    /// client-go's defaults: [`SPAM_BURST`], [`SPAM_REFILL`], [`SPAM_MAX_OBJECTS`].
    fn default() -> Self {
        Self::new(SPAM_BURST, SPAM_REFILL, SPAM_MAX_OBJECTS)
    }
}

impl<K: Hash + Eq + Clone> SpamFilter<K> {
    /// A filter allowing `burst` events per key at once, one more per `refill`, remembering at most
    /// `max_keys` keys (at least one).
    pub fn new(burst: u32, refill: Duration, max_keys: usize) -> Self {
        Self {
            burst: f64::from(burst),
            refill,
            buckets: Mutex::new(LruCache::new(
                NonZeroUsize::new(max_keys).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// Whether an event about `key` may go out now; takes a token if so.
    pub fn allow(&self, key: &K) -> bool {
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        // A key seen before is moved to the front; a new one evicts the least recently used when full.
        let bucket = buckets.get_or_insert_mut(key.clone(), || Bucket {
            tokens: self.burst,
            at: now,
        });
        let refilled = now.saturating_duration_since(bucket.at).as_secs_f64()
            / self.refill.as_secs_f64().max(f64::MIN_POSITIVE);
        bucket.tokens = (bucket.tokens + refilled).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_object_gets_a_burst_of_25_then_one_event_per_five_minutes() {
        let filter = SpamFilter::default();
        let allowed = (0..40).filter(|_| filter.allow(&"pod-a")).count();
        assert_eq!(allowed, 25);
        assert!(filter.allow(&"pod-b"), "another object has its own burst");
        tokio::time::advance(Duration::from_secs(299)).await;
        assert!(!filter.allow(&"pod-a"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(filter.allow(&"pod-a"));
        assert!(!filter.allow(&"pod-a"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_least_recently_used_object_is_forgotten_past_the_bound() {
        let filter = SpamFilter::new(1, Duration::from_secs(300), 2);
        assert!(filter.allow(&"a"));
        assert!(filter.allow(&"b"));
        assert!(!filter.allow(&"a"), "a is touched, so b is now the oldest");
        assert!(filter.allow(&"c"), "c takes b's place");
        assert!(!filter.allow(&"a"), "a was kept");
        assert!(filter.allow(&"b"), "b was forgotten and starts afresh");
    }

    proptest! {
        /// Whatever the timing, an object gets at most the burst plus one event per refill period
        /// elapsed; and an object quiet for a whole burst's worth of periods gets its burst back.
        #[test]
        fn no_object_ever_exceeds_the_burst_plus_the_refill(
            gaps in prop::collection::vec(0u64..400, 1..200),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            rt.block_on(async {
                let filter = SpamFilter::new(5, Duration::from_secs(60), 16);
                let start = Instant::now();
                let mut allowed = 0u64;
                for gap in &gaps {
                    tokio::time::advance(Duration::from_secs(*gap)).await;
                    if filter.allow(&"obj") {
                        allowed += 1;
                    }
                    let elapsed = start.elapsed().as_secs();
                    prop_assert!(allowed <= 5 + elapsed / 60, "{allowed} events in {elapsed} s");
                }
                tokio::time::advance(Duration::from_secs(300)).await;
                let burst = (0..10).filter(|_| filter.allow(&"obj")).count();
                prop_assert_eq!(burst, 5);
                Ok(())
            })?;
        }
    }
}
