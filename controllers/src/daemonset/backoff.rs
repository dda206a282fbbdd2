//! The back-off between deleting failed daemon pods on one node (upstream `failedPodsBackoff`, a
//! `flowcontrol.Backoff` of 1 s doubling to 15 min, keyed by DaemonSet uid and node): a kubelet that
//! keeps rejecting a pod must not make the controller delete and recreate it in a hot loop.
//!
//! Like upstream it lives in the controller's memory: a worker keeps it for the DaemonSets whose keys
//! it is handed; after a hand-over the new owner starts again at 1 s, which costs one early retry and
//! nothing else. Time is passed in, so tests step it by hand.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The first delay (upstream 1 s).
pub const INITIAL: Duration = Duration::from_secs(1);
/// The longest delay (upstream 15 min).
pub const MAX: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last_update: Instant,
}

/// Per-(DaemonSet, node) delays. Entries idle for twice [`MAX`] are forgotten (upstream's GC).
#[derive(Debug, Default)]
pub struct FailedPodBackoff {
    entries: Mutex<HashMap<String, Entry>>,
}

/// The key of one DaemonSet's pods on one node.
pub fn key(ds_uid: &str, node: &str) -> String {
    format!("{ds_uid}/{node}")
}

impl FailedPodBackoff {
    /// Upstream `IsInBackOffSinceUpdate`: the delay set at the last failure has not passed at `now`;
    /// `Some(delay)` (what to requeue after) when it has not.
    pub fn in_backoff(&self, key: &str, now: Instant) -> Option<Duration> {
        let entries = self.entries.lock();
        let entry = entries.get(key)?;
        (now.saturating_duration_since(entry.last_update) < entry.delay).then_some(entry.delay)
    }

    /// Upstream `Next`: records a failure at `now`: the delay doubles (up to [`MAX`]), or starts at
    /// [`INITIAL`] for a key unseen or idle for twice [`MAX`].
    pub fn next(&self, key: &str, now: Instant) {
        let mut entries = self.entries.lock();
        entries.retain(|_, e| !expired(e, now));
        let delay = match entries.get(key) {
            Some(e) => (e.delay * 2).min(MAX),
            None => INITIAL,
        };
        entries.insert(
            key.to_owned(),
            Entry {
                delay,
                last_update: now,
            },
        );
    }
}

fn expired(entry: &Entry, now: Instant) -> bool {
    now.saturating_duration_since(entry.last_update) > 2 * MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_starts_at_a_second_doubles_and_stops_at_fifteen_minutes() {
        let backoff = FailedPodBackoff::default();
        let t0 = Instant::now();
        assert_eq!(backoff.in_backoff("k", t0), None);
        backoff.next("k", t0);
        assert_eq!(backoff.in_backoff("k", t0), Some(INITIAL));
        assert_eq!(
            backoff.in_backoff("k", t0 + INITIAL),
            None,
            "a second later it may go again"
        );
        backoff.next("k", t0 + INITIAL);
        assert_eq!(
            backoff.in_backoff("k", t0 + INITIAL),
            Some(Duration::from_secs(2))
        );
        let mut now = t0 + INITIAL;
        for _ in 0..20 {
            now += MAX;
            backoff.next("k", now);
        }
        assert_eq!(backoff.in_backoff("k", now), Some(MAX));
        assert_eq!(
            backoff.in_backoff("other", now),
            None,
            "keys are independent"
        );
    }

    #[test]
    fn a_key_idle_for_twice_the_maximum_starts_over() {
        let backoff = FailedPodBackoff::default();
        let t0 = Instant::now();
        backoff.next("k", t0);
        backoff.next("k", t0 + INITIAL);
        let later = t0 + 3 * MAX;
        backoff.next("k", later);
        assert_eq!(backoff.in_backoff("k", later), Some(INITIAL));
    }
}
