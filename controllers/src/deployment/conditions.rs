//! The Deployment's conditions (`Available`, `Progressing`, `ReplicaFailure`) and upstream's rules for
//! changing them (`SetDeploymentCondition`): the same status and reason leave a condition untouched,
//! the same status keeps its transition time.

use flotilla_sdk::k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus, ReplicaSet};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

/// Whether at least `replicas - maxUnavailable` pods are available.
pub const AVAILABLE: &str = "Available";
/// Whether the rollout moves (or has completed).
pub const PROGRESSING: &str = "Progressing";
/// A ReplicaSet cannot create or delete pods.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// `Progressing=True`: the new ReplicaSet was created by this sync.
pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
/// `Progressing=True`: the new ReplicaSet existed already (first sync with a deadline).
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
/// `Progressing=True`: pods moved since the last sync.
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
/// `Progressing=True`: the rollout is complete.
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
/// `Progressing=False`: no progress within `progressDeadlineSeconds`.
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
/// `Progressing=False`: the new ReplicaSet could not be created.
pub const FAILED_RS_CREATE: &str = "ReplicaSetCreateError";
/// `Progressing=Unknown`: the Deployment is paused.
pub const PAUSED: &str = "DeploymentPaused";
/// `Progressing=Unknown`: the Deployment was resumed.
pub const RESUMED: &str = "DeploymentResumed";
/// `Available=True`.
pub const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
/// `Available=False`.
pub const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

/// `now` without its fraction of a second, as the API stores condition times; comparing a condition
/// read back with one just made then works.
pub fn whole_seconds(now: Timestamp) -> Timestamp {
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

/// A condition made at `now` (both times set to it).
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    let now = Time(whole_seconds(now));
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// The condition of `type_`.
pub fn get<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
}

/// Sets `condition`: nothing changes when one of its type has the same status and reason; one with the
/// same status keeps its transition time; the condition moves to the end of the list.
pub fn set(status: &mut DeploymentStatus, mut condition: DeploymentCondition) {
    if let Some(current) = get(status, &condition.type_) {
        if current.status == condition.status && current.reason == condition.reason {
            return;
        }
        if current.status == condition.status {
            condition.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove(status, &condition.type_.clone());
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(condition);
}

/// Removes the condition of `type_`.
pub fn remove(status: &mut DeploymentStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != type_);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

/// The `ReplicaFailure` to report: the new ReplicaSet's, else the first old one's (upstream
/// `getReplicaFailures`).
pub fn replica_failure(
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
) -> Option<DeploymentCondition> {
    let failure_of = |rs: &ReplicaSet| {
        rs.status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == REPLICA_FAILURE)
            .map(|c| DeploymentCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_update_time: c.last_transition_time.clone(),
                last_transition_time: c.last_transition_time.clone(),
            })
    };
    new.and_then(failure_of)
        .or_else(|| all.iter().find_map(|rs| failure_of(rs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn the_same_status_and_reason_leave_the_condition_untouched() {
        let mut status = DeploymentStatus::default();
        set(
            &mut status,
            new_condition(AVAILABLE, "True", MIN_AVAILABLE, "a".into(), at(10)),
        );
        set(
            &mut status,
            new_condition(AVAILABLE, "True", MIN_AVAILABLE, "b".into(), at(20)),
        );
        let c = get(&status, AVAILABLE).unwrap();
        assert_eq!(c.message.as_deref(), Some("a"));
        assert_eq!(c.last_update_time, Some(Time(at(10))));
    }

    #[test]
    fn a_new_reason_with_the_same_status_keeps_the_transition_time() {
        let mut status = DeploymentStatus::default();
        set(
            &mut status,
            new_condition(PROGRESSING, "True", NEW_RS_CREATED, "x".into(), at(10)),
        );
        set(
            &mut status,
            new_condition(PROGRESSING, "True", NEW_RS_AVAILABLE, "y".into(), at(20)),
        );
        let c = get(&status, PROGRESSING).unwrap();
        assert_eq!(c.reason.as_deref(), Some(NEW_RS_AVAILABLE));
        assert_eq!(c.last_transition_time, Some(Time(at(10))));
        assert_eq!(c.last_update_time, Some(Time(at(20))));
    }

    #[test]
    fn a_new_status_moves_the_transition_time_and_the_condition_to_the_end() {
        let mut status = DeploymentStatus::default();
        set(
            &mut status,
            new_condition(PROGRESSING, "True", RS_UPDATED, "x".into(), at(10)),
        );
        set(
            &mut status,
            new_condition(AVAILABLE, "False", MIN_UNAVAILABLE, "x".into(), at(10)),
        );
        set(
            &mut status,
            new_condition(PROGRESSING, "False", TIMED_OUT, "y".into(), at(30)),
        );
        let types: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, [AVAILABLE, PROGRESSING]);
        assert_eq!(
            get(&status, PROGRESSING).unwrap().last_transition_time,
            Some(Time(at(30)))
        );
        remove(&mut status, AVAILABLE);
        remove(&mut status, PROGRESSING);
        assert_eq!(status.conditions, None);
    }

    #[test]
    fn condition_times_are_whole_seconds() {
        let now = Timestamp::from_millisecond(12_345).unwrap();
        let c = new_condition(AVAILABLE, "True", MIN_AVAILABLE, String::new(), now);
        assert_eq!(c.last_update_time, Some(Time(at(12))));
    }
}
