//! The rate limit of NoExecute tainting per zone (upstream's per-zone `RateLimitedTimedQueue` with a
//! token bucket of burst 1, its rate swapped by `setLimiterInZone`), derived from the cluster rather
//! than held in one process: the next node of a zone may be tainted `1 / rate` after the newest
//! `timeAdded` of a lifecycle NoExecute taint in that zone. That state lives in the Node objects, so
//! it survives failovers and key moves; `timeAdded` has whole seconds, so the wait counts from the end
//! of its second (later, never earlier).
//!
//! Each worker also remembers the taints it added itself ([`ZoneLimiter`]), so its own reconciles
//! running at once (or before the cache shows the taint) wait for one another. Workers do not see
//! each other's taints until the cache does: see the module doc of [`super`] for the burst that
//! allows.

use std::collections::HashMap;
use std::time::Duration;

use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::config::Config;
use super::zones::ZoneState;

/// Upstream's rate for a zone in `state` with `size` counted nodes: `--node-eviction-rate` when
/// normal and (unless every zone is, see [`super::zones::ZoneView::all_fully_disrupted`]) when fully
/// disrupted — a zone that is entirely down is evacuated at the normal rate; in partial disruption
/// `--secondary-node-eviction-rate` for a zone larger than `--large-cluster-size-threshold`, zero for
/// a smaller one.
pub fn zone_rate(state: ZoneState, size: usize, config: &Config) -> f32 {
    match state {
        ZoneState::Normal | ZoneState::FullDisruption => config.node_eviction_rate,
        ZoneState::PartialDisruption => {
            let large = i64::try_from(size).unwrap_or(i64::MAX)
                > i64::from(config.large_cluster_size_threshold);
            if large {
                config.secondary_node_eviction_rate
            } else {
                0.0
            }
        }
    }
}

/// The wait between two taints at `rate` per second; `None` when the rate is zero (never).
pub fn interval(rate: f32) -> Option<Duration> {
    (rate.is_finite() && rate > 0.0)
        // In f32, as the flag is: 1 / 0.1 is then exactly 10 s.
        .then(|| Duration::try_from_secs_f32(1.0 / rate).ok())
        .flatten()
}

/// Whether a node may be tainted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Yes; the taint is reserved for this worker from now.
    Taint,
    /// Not before this much time has passed.
    Wait(Duration),
    /// Not at this rate (zero): look again when the zone's state may have changed.
    Never,
}

/// The NoExecute taints this worker added, per zone: only the newest matters.
#[derive(Debug, Default)]
pub struct ZoneLimiter {
    last: HashMap<String, Timestamp>,
}

impl ZoneLimiter {
    /// Decides whether a node of `zone` may be tainted at `now` at `rate`, given the newest
    /// `timeAdded` the cluster shows for the zone; reserves the slot when it may. The caller must add
    /// the taint after [`Decision::Taint`] (a failed write keeps the slot taken: a later taint, never
    /// an earlier one).
    pub fn try_reserve(
        &mut self,
        zone: &str,
        rate: f32,
        newest_in_cluster: Option<Timestamp>,
        now: Timestamp,
    ) -> Decision {
        let Some(every) = interval(rate) else {
            return Decision::Never;
        };
        let every = SignedDuration::try_from(every).unwrap_or(SignedDuration::MAX);
        let second = SignedDuration::from_secs(1);
        let from_cluster = newest_in_cluster.and_then(|t| {
            t.checked_add(second)
                .and_then(|t| t.checked_add(every))
                .ok()
        });
        let from_here = self.last.get(zone).and_then(|t| t.checked_add(every).ok());
        let next = from_cluster.max(from_here);
        match next {
            Some(next) if next > now => {
                let wait = now.duration_until(next);
                Decision::Wait(Duration::try_from(wait).unwrap_or(Duration::MAX))
            }
            _ => {
                self.last.insert(zone.to_owned(), now);
                Decision::Taint
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn the_rates_follow_the_zone_state_as_upstreams() {
        let c = Config::default();
        assert_eq!(zone_rate(ZoneState::Normal, 3, &c), 0.1);
        assert_eq!(zone_rate(ZoneState::FullDisruption, 3, &c), 0.1);
        assert_eq!(
            zone_rate(ZoneState::PartialDisruption, 50, &c),
            0.0,
            "small"
        );
        assert_eq!(zone_rate(ZoneState::PartialDisruption, 51, &c), 0.01);
        assert_eq!(interval(0.1), Some(Duration::from_secs(10)));
        assert_eq!(interval(0.0), None);
    }

    #[test]
    fn the_first_taint_of_a_zone_goes_at_once_and_the_next_waits_for_the_rate() {
        let mut l = ZoneLimiter::default();
        assert_eq!(l.try_reserve("z", 0.1, None, at(100)), Decision::Taint);
        assert_eq!(
            l.try_reserve("z", 0.1, None, at(104)),
            Decision::Wait(Duration::from_secs(6)),
            "this worker's own taint holds it back before the cache shows it"
        );
        assert_eq!(
            l.try_reserve("y", 0.1, None, at(104)),
            Decision::Taint,
            "zones are apart"
        );
        assert_eq!(l.try_reserve("z", 0.1, None, at(110)), Decision::Taint);
        assert_eq!(l.try_reserve("z", 0.0, None, at(500)), Decision::Never);
    }

    #[test]
    fn a_taint_another_worker_added_counts_from_the_end_of_its_second() {
        let mut l = ZoneLimiter::default();
        assert_eq!(
            l.try_reserve("z", 0.1, Some(at(100)), at(105)),
            Decision::Wait(Duration::from_secs(6))
        );
        assert_eq!(
            l.try_reserve("z", 0.1, Some(at(100)), at(111)),
            Decision::Taint
        );
    }

    proptest! {
        /// Whatever the order of the attempts, the taints one limiter allows in a zone are at least
        /// `1 / rate` apart, and never closer than that to a taint the cluster shows.
        #[test]
        fn allowed_taints_are_never_closer_than_the_rate_allows(
            mut attempts in proptest::collection::vec(0i64..600, 1..60),
            cluster in proptest::option::of(0i64..600),
            rate in prop_oneof![Just(0.1f32), Just(0.5f32), Just(1.0f32)],
        ) {
            attempts.sort_unstable();
            let every = interval(rate).unwrap();
            let mut l = ZoneLimiter::default();
            let mut allowed: Vec<Timestamp> = Vec::new();
            for s in attempts {
                let now = at(s);
                if l.try_reserve("z", rate, cluster.map(at), now) == Decision::Taint {
                    allowed.push(now);
                }
            }
            for pair in allowed.windows(2) {
                prop_assert!(pair[0].duration_until(pair[1]) >= SignedDuration::try_from(every).unwrap());
            }
            if let (Some(c), Some(first)) = (cluster, allowed.first()) {
                prop_assert!(at(c).duration_until(*first) > SignedDuration::try_from(every).unwrap());
            }
        }
    }
}
