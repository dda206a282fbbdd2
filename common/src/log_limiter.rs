//! Rate limiting of repeated warnings, so a peer cannot flood the log: one line per peer and reason per
//! interval, carrying how many were held back since the last line. Metrics keep the exact counts; this
//! only decides which occurrences are worth a line.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Peer names longer than this are cut in the limiter's keys: a peer chooses its own name, and a 2 MiB
/// one must neither be kept nor logged whole.
const MAX_PEER_CHARS: usize = 64;

/// Whether an occurrence gets a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log it, and say that `suppressed` earlier occurrences of the same peer and reason got no line.
    Log {
        /// Occurrences held back since the previous line of this peer and reason.
        suppressed: u64,
    },
    /// Do not log it; it is counted in the next line's `suppressed`.
    Suppress,
}

/// A limiter of log lines per `(peer, reason)`; cheap to clone (clones share their state).
///
/// Contract: the first occurrence of a `(peer, reason)` is logged; later ones within `interval` of the
/// last logged one are suppressed and counted; the first one after that is logged with the count. So a
/// steady flood gives one line per interval, and no occurrence is ever lost from the counts except the
/// suppressed tail of a burst that never recurs. Memory is bounded: at most `max_keys` pairs are
/// tracked; past that, pairs whose interval has ended are forgotten, and if none has, new peers share one
/// entry per reason (peer `*`).
#[derive(Clone, Debug)]
pub struct LogLimiter {
    interval: Duration,
    max_keys: usize,
    entries: Arc<Mutex<HashMap<(String, String), Entry>>>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// When the last line of this pair was logged.
    logged_at: Instant,
    suppressed: u64,
}

impl Default for LogLimiter {
    /// One line per 10 s per pair, at most 1024 pairs: a flood costs a line every 10 s per peer and reason.
    fn default() -> Self {
        Self::new(Duration::from_secs(10), 1024)
    }
}

impl LogLimiter {
    /// One line per `(peer, reason)` per `interval`, tracking at most `max_keys` pairs (at least 1).
    pub fn new(interval: Duration, max_keys: usize) -> Self {
        Self {
            interval,
            max_keys: max_keys.max(1),
            entries: Arc::default(),
        }
    }

    /// Decides whether the occurrence of `reason` from `peer` at `now` gets a line. `now` is passed in
    /// so tests control time; callers pass `Instant::now()`.
    pub fn check(&self, peer: &str, reason: &str, now: Instant) -> Verdict {
        let mut entries = self.entries.lock();
        let mut key = (truncate(peer).to_owned(), reason.to_owned());
        if !entries.contains_key(&key) && entries.len() >= self.max_keys {
            let interval = self.interval;
            entries.retain(|_, e| now.saturating_duration_since(e.logged_at) < interval);
            if entries.len() >= self.max_keys {
                key.0 = "*".to_owned();
            }
        }
        match entries.get_mut(&key) {
            None => {
                entries.insert(
                    key,
                    Entry {
                        logged_at: now,
                        suppressed: 0,
                    },
                );
                Verdict::Log { suppressed: 0 }
            }
            Some(entry) if now.saturating_duration_since(entry.logged_at) >= self.interval => {
                let suppressed = std::mem::take(&mut entry.suppressed);
                entry.logged_at = now;
                Verdict::Log { suppressed }
            }
            Some(entry) => {
                entry.suppressed = entry.suppressed.saturating_add(1);
                Verdict::Suppress
            }
        }
    }

    /// How many `(peer, reason)` pairs are tracked now.
    pub fn tracked(&self) -> usize {
        self.entries.lock().len()
    }
}

/// `peer` cut to at most [`MAX_PEER_CHARS`] characters, on a character boundary.
fn truncate(peer: &str) -> &str {
    match peer.char_indices().nth(MAX_PEER_CHARS) {
        Some((at, _)) => &peer[..at],
        None => peer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_flood_gives_one_line_per_interval_with_the_count_of_what_it_held_back() {
        let limiter = LogLimiter::new(10 * SECOND, 16);
        let t0 = Instant::now();
        assert_eq!(
            limiter.check("w", "done_for_unknown_item", t0),
            Verdict::Log { suppressed: 0 }
        );
        for i in 1..=200_000u32 {
            let at = t0 + Duration::from_micros(u64::from(i));
            assert_eq!(
                limiter.check("w", "done_for_unknown_item", at),
                Verdict::Suppress
            );
        }
        assert_eq!(
            limiter.check("w", "done_for_unknown_item", t0 + 10 * SECOND),
            Verdict::Log {
                suppressed: 200_000
            }
        );
    }

    #[test]
    fn peers_and_reasons_are_limited_separately() {
        let limiter = LogLimiter::new(10 * SECOND, 16);
        let t0 = Instant::now();
        assert!(matches!(limiter.check("a", "x", t0), Verdict::Log { .. }));
        assert!(matches!(limiter.check("b", "x", t0), Verdict::Log { .. }));
        assert!(matches!(limiter.check("a", "y", t0), Verdict::Log { .. }));
        assert_eq!(limiter.check("a", "x", t0), Verdict::Suppress);
    }

    #[test]
    fn a_huge_peer_name_is_kept_short() {
        let limiter = LogLimiter::new(SECOND, 4);
        let huge = "w".repeat(2 << 20);
        limiter.check(&huge, "x", Instant::now());
        let entries = limiter.entries.lock();
        assert!(entries.keys().all(|(peer, _)| peer.len() <= MAX_PEER_CHARS));
    }

    proptest! {
        /// Every occurrence is either logged or counted in a later line (or still pending), lines are at
        /// most one per interval and pair (while nothing overflows), and the tracked pairs never exceed the
        /// bound (plus the shared overflow entries, one per reason).
        #[test]
        fn lines_are_bounded_and_counts_add_up(
            events in prop::collection::vec((0u8..40, 0u8..3, 0u64..2_000), 1..400),
            interval_ms in 1u64..500,
            max_keys in prop_oneof![1usize..20, Just(200usize)],
        ) {
            let t0 = Instant::now();
            let interval = Duration::from_millis(interval_ms);
            let limiter = LogLimiter::new(interval, max_keys);
            let mut events = events;
            events.sort_by_key(|e| e.2);
            let mut logged = 0u64;
            let mut reported = 0u64;
            let mut last_line: HashMap<(String, String), u64> = HashMap::new();
            for (peer, reason, at_ms) in &events {
                let key = (format!("p{peer}"), format!("r{reason}"));
                match limiter.check(&key.0, &key.1, t0 + Duration::from_millis(*at_ms)) {
                    Verdict::Log { suppressed } => {
                        logged += 1;
                        reported += suppressed;
                        // Spacing per pair holds while no pair had to share the overflow entry.
                        if let Some(prev) = last_line.insert(key, *at_ms)
                            && max_keys >= 40 * 3
                        {
                            prop_assert!(at_ms - prev >= interval_ms, "two lines of one pair within the interval");
                        }
                    }
                    Verdict::Suppress => {}
                }
                prop_assert!(limiter.tracked() <= max_keys + 3);
            }
            let pending: u64 = limiter.entries.lock().values().map(|e| e.suppressed).sum();
            // Nothing is counted twice; an entry forgotten when the map was full takes its pending tail
            // with it (the documented loss), so the sum may fall short of the events, never exceed them.
            prop_assert!(logged + reported + pending <= events.len() as u64);
            if max_keys >= 40 * 3 {
                prop_assert_eq!(logged + reported + pending, events.len() as u64);
            }
            prop_assert!(logged >= 1);
        }
    }
}
