//! The delay before a failed Job pod is replaced (upstream `backoff_utils.go`): 10 s after the first
//! failure since the last success, doubling with each further one, at most 6 min, counted from the
//! last failure. Upstream keeps the failure count in the controller's memory; a worker keeps
//! nothing between items, so the count is derived from the Job's finished pods each time — the pods
//! stay (without their finalizer) until the Job goes, so every worker derives the same delay.

use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

use super::pods::{finished_at, has_finalizer, is_failed, is_failed_phase, is_succeeded};

/// The first delay (upstream `DefaultJobPodFailureBackOff`).
pub const BASE: Duration = Duration::from_secs(10);
/// The longest delay (upstream `MaxJobPodFailureBackOff`).
pub const MAX: Duration = Duration::from_secs(360);

/// The failures that count toward the delay: how many pods failed after the last success, and when
/// the last of them failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failures {
    /// Failures after the last success.
    pub count: u32,
    /// When the last failure finished.
    pub last: Option<Timestamp>,
}

impl Failures {
    /// The failures among `pods`.
    pub fn of(pods: &[Pod], only_replace_failed_pods: bool) -> Self {
        let last_success = pods
            .iter()
            .filter(|p| is_succeeded(p))
            .filter_map(finished_at)
            .max();
        // A pod the controller deleted itself (suspend, surplus) lost its finalizer first: it is no
        // failure of the workload, and must not slow down its replacement.
        let failures: Vec<Timestamp> = pods
            .iter()
            .filter(|p| is_failed(p, only_replace_failed_pods))
            .filter(|p| is_failed_phase(p) || has_finalizer(p))
            .filter_map(finished_at)
            .filter(|t| last_success.is_none_or(|s| *t > s))
            .collect();
        Self {
            count: u32::try_from(failures.len()).unwrap_or(u32::MAX),
            last: failures.iter().max().copied(),
        }
    }

    /// How long to wait at `now` before creating a replacement pod; zero when it may be created now.
    pub fn remaining(&self, now: Timestamp) -> Duration {
        let Some(last) = self.last else {
            return Duration::ZERO;
        };
        if self.count == 0 {
            return Duration::ZERO;
        }
        let delay = delay_for(self.count);
        let elapsed = Duration::try_from(now.duration_since(last)).unwrap_or(Duration::ZERO);
        delay.saturating_sub(elapsed)
    }
}

/// The full delay after `failures` consecutive failures: [`BASE`] doubled `failures - 1` times, at
/// most [`MAX`].
pub fn delay_for(failures: u32) -> Duration {
    let mut delay = BASE;
    for _ in 1..failures {
        delay = delay.saturating_mul(2);
        if delay >= MAX {
            return MAX;
        }
    }
    delay
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::jiff::SignedDuration;
    use serde_json::json;

    use super::*;

    fn finished(phase: &str, at: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "finishedAt": at}}},
            ]},
        }))
        .unwrap()
    }

    #[test]
    fn the_delay_doubles_from_ten_seconds_and_stops_at_six_minutes() {
        let secs: Vec<u64> = (1..=8).map(|n| delay_for(n).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 320, 360, 360]);
        assert_eq!(delay_for(u32::MAX), MAX);
    }

    #[test]
    fn only_failures_after_the_last_success_count() {
        let pods = [
            finished("Failed", "2026-01-01T00:00:01Z"),
            finished("Succeeded", "2026-01-01T00:00:02Z"),
            finished("Failed", "2026-01-01T00:00:03Z"),
            finished("Failed", "2026-01-01T00:00:04Z"),
        ];
        let failures = Failures::of(&pods, false);
        assert_eq!(failures.count, 2);
        assert_eq!(failures.last, Some("2026-01-01T00:00:04Z".parse().unwrap()));
    }

    #[test]
    fn the_remaining_delay_runs_from_the_last_failure() {
        let last: Timestamp = "2026-01-01T00:00:04Z".parse().unwrap();
        let failures = Failures {
            count: 2,
            last: Some(last),
        };
        let at = |s: i64| last + SignedDuration::from_secs(s);
        assert_eq!(failures.remaining(at(0)), Duration::from_secs(20));
        assert_eq!(failures.remaining(at(15)), Duration::from_secs(5));
        assert_eq!(failures.remaining(at(25)), Duration::ZERO);
        let none = Failures::of(&[], false);
        assert_eq!(none.remaining(at(0)), Duration::ZERO);
    }
}
