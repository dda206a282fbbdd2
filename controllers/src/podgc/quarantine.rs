//! The quarantine of missing nodes (upstream's `nodeQueue` with `quarantineTime`): a node that pods
//! are bound to but the cache lacks is only checked against the API, and its pods deleted, once it
//! has been missing for [`QUARANTINE`], so a node the informer has not caught up with yet is not
//! mistaken for a deleted one. Time is passed in, so the rule is tested on made-up instants.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long a node must be missing from the cache before it is checked live (upstream's
/// `quarantineTime`).
pub const QUARANTINE: Duration = Duration::from_secs(40);

/// Since when each missing node has been missing, as this process saw it. It lives in the worker's
/// memory: a pass that moves to another worker starts the quarantine over, which only delays the
/// deletions (upstream loses it on a restart alike).
#[derive(Debug, Default)]
pub struct Quarantine {
    /// Missing node name → when a pass first found it missing. Only names the last pass found
    /// missing are kept.
    since: BTreeMap<String, Instant>,
}

impl Quarantine {
    /// Records the nodes the pass at `now` found `missing`, forgets those that reappeared, and returns
    /// the ones whose quarantine is over; those are released, so a node that turns out to exist
    /// starts a new quarantine if it goes missing again (upstream's `Done` then `AddAfter`).
    pub fn observe(&mut self, missing: &BTreeSet<String>, now: Instant) -> BTreeSet<String> {
        self.since.retain(|name, _| missing.contains(name));
        for name in missing {
            self.since.entry(name.clone()).or_insert(now);
        }
        let due: BTreeSet<String> = self
            .since
            .iter()
            .filter(|(_, since)| now.saturating_duration_since(**since) >= QUARANTINE)
            .map(|(name, _)| name.clone())
            .collect();
        self.since.retain(|name, _| !due.contains(name));
        due
    }

    /// How long until the next quarantine ends, if any node is in quarantine.
    pub fn next_due(&self, now: Instant) -> Option<Duration> {
        self.since
            .values()
            .map(|since| QUARANTINE.saturating_sub(now.saturating_duration_since(*since)))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_missing_node_is_due_only_after_forty_seconds_of_being_missing() {
        let start = Instant::now();
        let mut q = Quarantine::default();
        assert!(q.observe(&names(&["gone"]), start).is_empty());
        assert_eq!(q.next_due(start), Some(QUARANTINE));
        let later = start + Duration::from_secs(20);
        assert!(q.observe(&names(&["gone"]), later).is_empty());
        assert_eq!(q.next_due(later), Some(Duration::from_secs(20)));
        let due = q.observe(&names(&["gone"]), start + QUARANTINE);
        assert_eq!(due, names(&["gone"]));
        assert_eq!(q.next_due(start + QUARANTINE), None, "released once due");
    }

    #[test]
    fn a_node_that_reappears_leaves_the_quarantine_and_starts_over_when_missing_again() {
        let start = Instant::now();
        let mut q = Quarantine::default();
        q.observe(&names(&["flaky"]), start);
        q.observe(&names(&[]), start + Duration::from_secs(30));
        let again = start + Duration::from_secs(45);
        assert!(q.observe(&names(&["flaky"]), again).is_empty());
        let due = q.observe(&names(&["flaky"]), again + QUARANTINE);
        assert_eq!(due, names(&["flaky"]));
    }

    #[test]
    fn a_released_node_still_missing_needs_another_full_quarantine() {
        let start = Instant::now();
        let mut q = Quarantine::default();
        q.observe(&names(&["n"]), start);
        assert_eq!(q.observe(&names(&["n"]), start + QUARANTINE), names(&["n"]));
        let next = start + QUARANTINE + Duration::from_secs(1);
        assert!(q.observe(&names(&["n"]), next).is_empty());
        assert_eq!(q.next_due(next), Some(QUARANTINE));
    }
}
