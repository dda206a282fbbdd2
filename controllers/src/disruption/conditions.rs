//! The `DisruptionAllowed` condition of a PDB's status, with upstream's helpers
//! (`UpdateDisruptionAllowedCondition`, `ConditionsAreUpToDate`) and `meta.SetStatusCondition`'s
//! rule that the transition time moves only when the status does.

use flotilla_sdk::k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

/// The condition's type.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// Reason when disruptions are allowed.
pub const SUFFICIENT_PODS: &str = "SufficientPods";
/// Reason when none are.
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
/// Reason after a failed sync (the fail-safe).
pub const SYNC_FAILED: &str = "SyncFailed";

/// Sets (or adds) the condition of `type_` like `meta.SetStatusCondition`: status, reason, message
/// and observedGeneration take the new values; lastTransitionTime is `now` for a new condition or a
/// changed status and is kept otherwise.
pub fn set(
    conditions: &mut Vec<Condition>,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) {
    match conditions
        .iter_mut()
        .find(|c| c.type_ == DISRUPTION_ALLOWED)
    {
        Some(c) => {
            if c.status != status {
                c.status = status.to_owned();
                c.last_transition_time = Time(now);
            }
            c.reason = reason.to_owned();
            c.message = message.to_owned();
            c.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: DISRUPTION_ALLOWED.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation,
            last_transition_time: Time(now),
        }),
    }
}

/// Upstream's `UpdateDisruptionAllowedCondition`: True/SufficientPods when disruptions are allowed,
/// else False/InsufficientPods, at the status's observedGeneration.
pub fn update_disruption_allowed(status: &mut PodDisruptionBudgetStatus, now: Timestamp) {
    let (value, reason) = if status.disruptions_allowed > 0 {
        ("True", SUFFICIENT_PODS)
    } else {
        ("False", INSUFFICIENT_PODS)
    };
    let observed = status.observed_generation;
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    set(conditions, value, reason, "", observed, now);
}

/// Upstream's `ConditionsAreUpToDate`: the condition exists, the status observed the current
/// generation, and the condition agrees with `disruptionsAllowed`.
pub fn up_to_date(status: &PodDisruptionBudgetStatus, generation: Option<i64>) -> bool {
    let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == DISRUPTION_ALLOWED)
    else {
        return false;
    };
    if status.observed_generation.unwrap_or(0) != generation.unwrap_or(0) {
        return false;
    }
    if status.disruptions_allowed > 0 {
        c.status == "True" && c.reason == SUFFICIENT_PODS
    } else {
        c.status == "False" && c.reason == INSUFFICIENT_PODS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_changes() {
        let mut status = PodDisruptionBudgetStatus {
            disruptions_allowed: 1,
            observed_generation: Some(1),
            ..Default::default()
        };
        update_disruption_allowed(&mut status, at("2026-01-01T00:00:00Z"));
        assert!(up_to_date(&status, Some(1)));
        update_disruption_allowed(&mut status, at("2026-01-01T00:01:00Z"));
        let c = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(c.last_transition_time.0, at("2026-01-01T00:00:00Z"));
        status.disruptions_allowed = 0;
        assert!(!up_to_date(&status, Some(1)));
        update_disruption_allowed(&mut status, at("2026-01-01T00:02:00Z"));
        let c = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", INSUFFICIENT_PODS, "")
        );
        assert_eq!(c.last_transition_time.0, at("2026-01-01T00:02:00Z"));
        assert_eq!(c.observed_generation, Some(1));
        assert!(
            !up_to_date(&status, Some(2)),
            "a newer generation is not observed"
        );
    }
}
