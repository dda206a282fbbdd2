//! What is left of a namespace's content after a deletion pass, per resource and in total, and how long
//! to wait before looking again (upstream's `gvrDeletionMetadata` and `ResourcesRemainingError`).

use std::collections::BTreeMap;
use std::time::Duration;

/// Upstream's guess, in seconds, of how long finalizers on items pending deletion take.
pub const FINALIZER_ESTIMATE_SECONDS: i64 = 15;

/// The longest the controller waits before looking at a namespace with content left again: upstream
/// waits `estimate / 2 + 1` seconds, which for a pod's 30 s grace period is 16 s; bounded so that a
/// namespace whose last finalizer went away finishes soon after.
pub const MAX_REQUEUE: Duration = Duration::from_secs(10);

/// What is left of one resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftover {
    /// Items still listed.
    pub remaining: usize,
    /// Finalizer → number of remaining items carrying it.
    pub finalizers: BTreeMap<String, usize>,
    /// Seconds until the items are expected to be gone.
    pub estimate: i64,
}

/// Judges the verification list of one resource, as upstream does: items are expected to remain while
/// they terminate gracefully (`graceful_estimate` > 0) or carry finalizers (then the estimate is
/// [`FINALIZER_ESTIMATE_SECONDS`]); anything else left is unexpected. `items` holds the finalizers
/// of each remaining item.
///
/// Returns what is left and whether it is unexpected (an error of the deletion).
pub fn assess(graceful_estimate: i64, items: &[Vec<String>]) -> (Leftover, bool) {
    let mut leftover = Leftover {
        remaining: items.len(),
        finalizers: BTreeMap::new(),
        estimate: graceful_estimate,
    };
    if items.is_empty() || graceful_estimate != 0 {
        return (leftover, false);
    }
    for finalizer in items.iter().flatten() {
        *leftover.finalizers.entry(finalizer.clone()).or_default() += 1;
    }
    if leftover.finalizers.is_empty() {
        return (leftover, true);
    }
    leftover.estimate = FINALIZER_ESTIMATE_SECONDS;
    (leftover, false)
}

/// The sum over every resource of a namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// The longest estimate of any resource, in seconds.
    pub estimate: i64,
    /// Resource (`plural.group`) → remaining items, for resources with some left.
    pub remaining: BTreeMap<String, usize>,
    /// Finalizer → remaining items carrying it, over all resources.
    pub finalizers: BTreeMap<String, usize>,
}

impl Totals {
    /// Adds what is left of `resource`.
    pub fn add(&mut self, resource: String, leftover: &Leftover) {
        self.estimate = self.estimate.max(leftover.estimate);
        if leftover.remaining == 0 {
            return;
        }
        *self.remaining.entry(resource).or_default() += leftover.remaining;
        for (finalizer, n) in &leftover.finalizers {
            *self.finalizers.entry(finalizer.clone()).or_default() += n;
        }
    }

    /// How long to wait before the next pass when content remains (`estimate` > 0): upstream's
    /// `estimate / 2 + 1` seconds, at most [`MAX_REQUEUE`]. `None` when nothing is pending.
    pub fn requeue_after(&self) -> Option<Duration> {
        if self.estimate <= 0 {
            return None;
        }
        let seconds = u64::try_from(self.estimate / 2 + 1).unwrap_or(u64::MAX);
        Some(Duration::from_secs(seconds).min(MAX_REQUEUE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finalizers(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn nothing_left_is_no_leftover_and_no_error() {
        assert_eq!(assess(0, &[]), (Leftover::default(), false));
    }

    #[test]
    fn items_held_by_finalizers_are_expected_with_upstreams_estimate() {
        let items = [
            finalizers(&["example.com/hold"]),
            finalizers(&["example.com/hold", "other/x"]),
        ];
        let (leftover, unexpected) = assess(0, &items);
        assert!(!unexpected);
        assert_eq!(leftover.remaining, 2);
        assert_eq!(leftover.estimate, FINALIZER_ESTIMATE_SECONDS);
        assert_eq!(leftover.finalizers["example.com/hold"], 2);
        assert_eq!(leftover.finalizers["other/x"], 1);
    }

    #[test]
    fn gracefully_terminating_pods_are_expected_without_counting_finalizers() {
        let (leftover, unexpected) = assess(30, &[finalizers(&["f"])]);
        assert!(!unexpected);
        assert_eq!(leftover.remaining, 1);
        assert_eq!(leftover.estimate, 30);
        assert!(leftover.finalizers.is_empty());
    }

    #[test]
    fn items_left_without_finalizers_or_grace_are_unexpected() {
        let (leftover, unexpected) = assess(0, &[finalizers(&[])]);
        assert!(unexpected);
        assert_eq!(leftover.remaining, 1);
        assert_eq!(leftover.estimate, 0);
    }

    #[test]
    fn totals_keep_the_longest_estimate_and_sum_remaining_items() {
        let mut totals = Totals::default();
        let held = assess(0, &[finalizers(&["a"])]).0;
        totals.add("configmaps.".into(), &held);
        totals.add("greetings.example.flotilla.dev".into(), &held);
        totals.add("secrets.".into(), &Leftover::default());
        assert_eq!(totals.estimate, FINALIZER_ESTIMATE_SECONDS);
        assert_eq!(totals.remaining.len(), 2);
        assert_eq!(totals.finalizers["a"], 2);
        assert_eq!(totals.requeue_after(), Some(Duration::from_secs(8)));
    }

    #[test]
    fn the_requeue_is_upstreams_half_estimate_bounded() {
        let mut totals = Totals::default();
        assert_eq!(totals.requeue_after(), None);
        totals.estimate = 30;
        assert_eq!(totals.requeue_after(), Some(MAX_REQUEUE));
        totals.estimate = 1;
        assert_eq!(totals.requeue_after(), Some(Duration::from_secs(1)));
    }
}
