//! The arithmetic of one PDB sync, free of I/O: which evicted pods still count as being disrupted,
//! how many pods are healthy, the scaled `minAvailable` / `maxUnavailable`, and the status to write
//! (upstream's `buildDisruptedPodMap`, `countHealthyPods`, `updatePdbStatus` and `failSafe`).

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};
use flotilla_sdk::kube::ResourceExt;

pub use super::super::pod_ready::is_ready;
use super::conditions::{self, SYNC_FAILED};

/// Why a budget value cannot be scaled (upstream's `GetScaledValueFromIntOrPercent` errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScaleValueError {
    /// A string that is not `<int>%`.
    #[error("invalid value for IntOrString: invalid type: string is not a percentage")]
    NotAPercentage,
    /// A percentage whose number does not parse.
    #[error("invalid value {0:?}: not an integer percentage")]
    BadPercentage(String),
}

/// `value` as an absolute count out of `total`: an int as is, a percentage of `total` rounded up
/// when `round_up` (the controller always rounds up, as upstream).
///
/// # Errors
/// [`ScaleValueError`] for a string that is not an integer percentage.
pub fn scaled(value: &IntOrString, total: i32, round_up: bool) -> Result<i32, ScaleValueError> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let number = s.strip_suffix('%').ok_or(ScaleValueError::NotAPercentage)?;
            let percent: i64 = number
                .parse()
                .map_err(|_| ScaleValueError::BadPercentage(s.clone()))?;
            let product = percent * i64::from(total);
            let value = if round_up {
                (product + 99).div_euclid(100)
            } else {
                product.div_euclid(100)
            };
            Ok(i32::try_from(value).unwrap_or(i32::MAX))
        }
    }
}

fn expiry(at: &Time, timeout: Duration) -> Timestamp {
    let timeout = SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX);
    at.0.checked_add(timeout).unwrap_or(Timestamp::MAX)
}

/// The evictions that still count, out of the PDB's `status.disruptedPods`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Disrupted {
    /// The entries to keep: pods listed, not yet being deleted, evicted less than the deletion
    /// timeout ago.
    pub pods: BTreeMap<String, Time>,
    /// When the earliest kept entry expires (the PDB is synced again then).
    pub recheck: Option<Timestamp>,
    /// Pods whose eviction is older than the timeout and still not deleted (a `NotDeleted` Event
    /// each).
    pub not_deleted: Vec<String>,
}

/// Upstream's `buildDisruptedPodMap` over the matching `pods` at `now`.
pub fn disrupted(
    pods: &[Pod],
    listed: Option<&BTreeMap<String, Time>>,
    now: Timestamp,
    timeout: Duration,
) -> Disrupted {
    let mut out = Disrupted::default();
    let Some(listed) = listed else {
        return out;
    };
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.name_any();
        let Some(at) = listed.get(&name) else {
            continue;
        };
        let expected_deletion = expiry(at, timeout);
        if expected_deletion < now {
            out.not_deleted.push(name);
        } else {
            if out.recheck.is_none_or(|r| expected_deletion < r) {
                out.recheck = Some(expected_deletion);
            }
            out.pods.insert(name, at.clone());
        }
    }
    out
}

/// Upstream's `countHealthyPods`: Ready pods, neither being deleted nor recently evicted.
pub fn count_healthy(
    pods: &[Pod],
    disrupted: &BTreeMap<String, Time>,
    now: Timestamp,
    timeout: Duration,
) -> i32 {
    let healthy = pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            disrupted
                .get(&pod.name_any())
                .is_none_or(|at| expiry(at, timeout) <= now)
        })
        .filter(|pod| is_ready(pod))
        .count();
    i32::try_from(healthy).unwrap_or(i32::MAX)
}

/// The counts one sync arrived at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Healthy pods now.
    pub current_healthy: i32,
    /// Healthy pods the budget asks for.
    pub desired_healthy: i32,
    /// Pods expected (matching pods, or the controllers' scale).
    pub expected: i32,
    /// The evictions still under way.
    pub disrupted: BTreeMap<String, Time>,
}

/// The status `counts` call for, or None when the current one already says it (upstream's
/// `updatePdbStatus`; an empty `disruptedPods` equals an absent one). No disruption is allowed
/// while no pod is expected, so a budget that selects nothing yet is safe when its first pods
/// appear.
pub fn next_status(
    current: &PodDisruptionBudgetStatus,
    generation: Option<i64>,
    counts: Counts,
    now: Timestamp,
) -> Option<PodDisruptionBudgetStatus> {
    let mut allowed = counts.current_healthy - counts.desired_healthy;
    if counts.expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let same_disrupted = current.disrupted_pods.clone().unwrap_or_default() == counts.disrupted;
    if current.current_healthy == counts.current_healthy
        && current.desired_healthy == counts.desired_healthy
        && current.expected_pods == counts.expected
        && current.disruptions_allowed == allowed
        && same_disrupted
        && current.observed_generation.unwrap_or(0) == generation.unwrap_or(0)
        && conditions::up_to_date(current, generation)
    {
        return None;
    }
    let mut next = PodDisruptionBudgetStatus {
        current_healthy: counts.current_healthy,
        desired_healthy: counts.desired_healthy,
        expected_pods: counts.expected,
        disruptions_allowed: allowed,
        disrupted_pods: (!counts.disrupted.is_empty()).then_some(counts.disrupted),
        observed_generation: generation,
        conditions: current.conditions.clone(),
    };
    conditions::update_disruption_allowed(&mut next, now);
    Some(next)
}

/// Upstream's `failSafe`: after a failed sync no disruption is allowed, and the condition says why
/// (False, `SyncFailed`, the error's message); the rest of the status is kept.
pub fn fail_safe(
    current: &PodDisruptionBudgetStatus,
    message: &str,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let mut next = current.clone();
    next.disruptions_allowed = 0;
    let observed = next.observed_generation;
    let conditions = next.conditions.get_or_insert_with(Vec::new);
    conditions::set(conditions, "False", SYNC_FAILED, message, observed, now);
    next
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pod(name: &str, ready: bool, deleting: bool) -> Pod {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "ns"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
        });
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:30Z");
        }
        serde_json::from_value(p).unwrap()
    }

    const TWO_MINUTES: Duration = Duration::from_secs(120);

    #[test]
    fn percentages_round_up_and_ints_stay_as_they_are() {
        let pct = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled(&IntOrString::Int(2), 10, true), Ok(2));
        assert_eq!(scaled(&pct("50%"), 3, true), Ok(2));
        assert_eq!(scaled(&pct("50%"), 3, false), Ok(1));
        assert_eq!(scaled(&pct("0%"), 3, true), Ok(0));
        assert_eq!(
            scaled(&pct("half"), 3, true),
            Err(ScaleValueError::NotAPercentage)
        );
        assert!(scaled(&pct("x%"), 3, true).is_err());
    }

    #[test]
    fn recent_evictions_are_kept_with_a_recheck_and_old_ones_are_reported() {
        let pods = vec![
            pod("fresh", true, false),
            pod("old", true, false),
            pod("going", true, true),
        ];
        let listed = BTreeMap::from([
            ("fresh".to_owned(), Time(at("2026-01-01T00:01:00Z"))),
            ("old".to_owned(), Time(at("2026-01-01T00:00:00Z"))),
            ("going".to_owned(), Time(at("2026-01-01T00:01:00Z"))),
            ("gone".to_owned(), Time(at("2026-01-01T00:01:00Z"))),
        ]);
        let now = at("2026-01-01T00:02:30Z");
        let d = disrupted(&pods, Some(&listed), now, TWO_MINUTES);
        assert_eq!(d.pods.keys().collect::<Vec<_>>(), ["fresh"]);
        assert_eq!(d.recheck, Some(at("2026-01-01T00:03:00Z")));
        assert_eq!(d.not_deleted, ["old"]);
        assert_eq!(
            count_healthy(&pods, &d.pods, now, TWO_MINUTES),
            1,
            "only `old` counts"
        );
    }

    fn counts(current: i32, desired: i32, expected: i32) -> Counts {
        Counts {
            current_healthy: current,
            desired_healthy: desired,
            expected,
            disrupted: BTreeMap::new(),
        }
    }

    #[test]
    fn the_status_of_the_recorded_fixtures_follows_from_the_counts() {
        // kcm-v1.32/disruption/03: 3 pods Pending, minAvailable 2.
        let now = at("2026-11-26T10:07:38Z");
        let pending = next_status(&Default::default(), Some(1), counts(0, 2, 3), now).unwrap();
        assert_eq!(
            serde_json::to_value(&pending).unwrap(),
            json!({"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 0,
                   "desiredHealthy": 2, "expectedPods": 3,
                   "conditions": [{"type": "DisruptionAllowed", "status": "False", "observedGeneration": 1,
                                   "lastTransitionTime": "2026-11-26T10:07:38Z", "reason": "InsufficientPods",
                                   "message": ""}]})
        );
        // 07: all 3 Ready.
        let healthy = next_status(
            &pending,
            Some(1),
            counts(3, 2, 3),
            at("2026-11-26T10:07:40Z"),
        )
        .unwrap();
        assert_eq!(healthy.disruptions_allowed, 1);
        let c = &healthy.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "SufficientPods")
        );
        assert_eq!(
            next_status(&healthy, Some(1), counts(3, 2, 3), now),
            None,
            "no change, no write"
        );
        // A budget that expects no pods allows nothing.
        let none = next_status(&healthy, Some(1), counts(3, 0, 0), now).unwrap();
        assert_eq!(none.disruptions_allowed, 0);
    }

    #[test]
    fn the_fail_safe_allows_nothing_and_says_why() {
        let status = PodDisruptionBudgetStatus {
            disruptions_allowed: 2,
            observed_generation: Some(3),
            ..Default::default()
        };
        let failed = fail_safe(
            &status,
            "found no controllers for pod \"p\"",
            at("2026-01-01T00:00:00Z"),
        );
        assert_eq!(failed.disruptions_allowed, 0);
        let c = &failed.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (
                c.status.as_str(),
                c.reason.as_str(),
                c.message.as_str(),
                c.observed_generation
            ),
            (
                "False",
                "SyncFailed",
                "found no controllers for pod \"p\"",
                Some(3)
            )
        );
    }
}
