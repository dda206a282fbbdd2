//! Rollout progress (upstream `progress.go`): the `Progressing` condition moves to
//! `NewReplicaSetAvailable` when the rollout completes, is refreshed as `ReplicaSetUpdated` whenever
//! pods move, and turns `False` / `ProgressDeadlineExceeded` when nothing moved for
//! `progressDeadlineSeconds`; the Deployment is looked at again when its deadline passes.

use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};
use flotilla_sdk::kube::ResourceExt;

use super::conditions::{
    self, NEW_RS_AVAILABLE, PROGRESSING, REPLICA_FAILURE, RS_UPDATED, TIMED_OUT, new_condition,
};
use super::spec;
use super::status::count;

/// Whether the rollout is complete: every replica updated and available, no old ones left, and the
/// status is of the current generation (upstream `DeploymentComplete`).
pub fn complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let desired = spec::replicas(d);
    count(status.updated_replicas) == desired
        && count(status.replicas) == desired
        && count(status.available_replicas) == desired
        && status.observed_generation >= d.metadata.generation
}

/// Whether pods moved between `old` and `new`: more updated, fewer old, more ready or more available
/// (upstream `DeploymentProgressing`).
pub fn progressing(old: &DeploymentStatus, new: &DeploymentStatus) -> bool {
    let old_olds = count(old.replicas) - count(old.updated_replicas);
    let new_olds = count(new.replicas) - count(new.updated_replicas);
    count(new.updated_replicas) > count(old.updated_replicas)
        || new_olds < old_olds
        || count(new.ready_replicas) > count(old.ready_replicas)
        || count(new.available_replicas) > count(old.available_replicas)
}

/// Whether the `Progressing` condition of `status` is older than the deadline at `now` (upstream
/// `DeploymentTimedOut`).
pub fn timed_out(d: &Deployment, status: &DeploymentStatus, now: Timestamp) -> bool {
    let Some(deadline) = spec::progress_deadline(d) else {
        return false;
    };
    let Some(condition) = conditions::get(status, PROGRESSING) else {
        return false;
    };
    match condition.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => false,
        Some(TIMED_OUT) => true,
        _ => condition
            .last_update_time
            .as_ref()
            .is_some_and(|from| from.0 + SignedDuration::from_secs(i64::from(deadline)) < now),
    }
}

/// `new` (the computed status) with the `Progressing` and `ReplicaFailure` conditions a rollout sync
/// sets; `d` is the Deployment as this sync changed it, whose status is what progress is measured
/// against (upstream `syncRolloutStatus`).
pub fn rollout_status(
    d: &Deployment,
    mut new: DeploymentStatus,
    new_rs: Option<&ReplicaSet>,
    all: &[&ReplicaSet],
    now: Timestamp,
) -> DeploymentStatus {
    let old = d.status.clone().unwrap_or_default();
    if spec::progress_deadline(d).is_none() {
        conditions::remove(&mut new, PROGRESSING);
    }
    let current = conditions::get(&old, PROGRESSING);
    let is_complete_rollout = count(new.replicas) == count(new.updated_replicas)
        && current.is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE));
    if spec::progress_deadline(d).is_some() && !is_complete_rollout {
        let subject = match new_rs {
            Some(rs) => format!("ReplicaSet {:?}", rs.name_any()),
            None => format!("Deployment {:?}", d.name_any()),
        };
        if complete(d, &new) {
            let message = format!("{subject} has successfully progressed.");
            let condition = new_condition(PROGRESSING, "True", NEW_RS_AVAILABLE, message, now);
            conditions::set(&mut new, condition);
        } else if progressing(&old, &new) {
            let message = format!("{subject} is progressing.");
            let mut condition = new_condition(PROGRESSING, "True", RS_UPDATED, message, now);
            // Progress refreshes the update time even when the reason stays, which `set` would not.
            if let Some(current) = current {
                if current.status == "True" {
                    condition.last_transition_time = current.last_transition_time.clone();
                }
                conditions::remove(&mut new, PROGRESSING);
            }
            conditions::set(&mut new, condition);
        } else if timed_out(d, &new, now) {
            let message = format!("{subject} has timed out progressing.");
            let condition = new_condition(PROGRESSING, "False", TIMED_OUT, message, now);
            conditions::set(&mut new, condition);
        }
    }
    match conditions::replica_failure(all, new_rs) {
        Some(failure) => conditions::set(&mut new, failure),
        None => conditions::remove(&mut new, REPLICA_FAILURE),
    }
    new
}

/// When to look at a rollout again to see whether its deadline passed; `None` without a deadline, for
/// a complete rollout, or one already timed out (upstream `requeueStuckDeployment`, applied to the
/// status being written).
pub fn requeue_after(
    d: &Deployment,
    status: &DeploymentStatus,
    now: Timestamp,
) -> Option<Duration> {
    let deadline = spec::progress_deadline(d)?;
    let condition = conditions::get(status, PROGRESSING)?;
    if complete(d, status) || condition.reason.as_deref() == Some(TIMED_OUT) {
        return None;
    }
    let from = condition.last_update_time.as_ref()?.0;
    let due = from + SignedDuration::from_secs(i64::from(deadline));
    let left = Duration::try_from(due.duration_since(now)).unwrap_or(Duration::ZERO);
    // A second past the deadline, so that the condition is then strictly older than it.
    Some(left + Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::super::conditions::{FOUND_NEW_RS, get};
    use super::super::replica_sets::tests::rs;
    use super::super::spec::tests::rolling;
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn counts(replicas: i32, updated: i32, available: i32) -> DeploymentStatus {
        DeploymentStatus {
            observed_generation: Some(1),
            replicas: Some(replicas),
            updated_replicas: Some(updated),
            ready_replicas: Some(available),
            available_replicas: Some(available),
            ..DeploymentStatus::default()
        }
    }

    fn with_progressing(mut d: Deployment, reason: &str, since: i64) -> Deployment {
        let mut status = d.status.take().unwrap_or_default();
        conditions::set(
            &mut status,
            new_condition(PROGRESSING, "True", reason, String::new(), at(since)),
        );
        d.status = Some(status);
        d
    }

    /// What `status::calculate` hands over: the counts with the Deployment's current conditions.
    fn computed(d: &Deployment, mut status: DeploymentStatus) -> DeploymentStatus {
        status.conditions = d.status.as_ref().and_then(|s| s.conditions.clone());
        status
    }

    fn reason(status: &DeploymentStatus) -> Option<&str> {
        get(status, PROGRESSING).and_then(|c| c.reason.as_deref())
    }

    #[test]
    fn a_complete_rollout_reports_the_new_replicaset_available() {
        let d = with_progressing(rolling(3, json!(1), json!(0)), RS_UPDATED, 100);
        let new = rs("web-1", 1, 3, 3);
        let status = rollout_status(
            &d,
            computed(&d, counts(3, 3, 3)),
            Some(&new),
            &[&new],
            at(110),
        );
        assert_eq!(reason(&status), Some(NEW_RS_AVAILABLE));
        let c = get(&status, PROGRESSING).unwrap();
        assert_eq!(
            c.message.as_deref(),
            Some("ReplicaSet \"web-1\" has successfully progressed.")
        );
        assert_eq!(c.last_transition_time, Some(Time(at(100))));
        assert_eq!(requeue_after(&d, &status, at(110)), None);
    }

    #[test]
    fn progress_refreshes_the_update_time_even_with_the_same_reason() {
        let mut d = with_progressing(rolling(3, json!(1), json!(0)), RS_UPDATED, 100);
        if let Some(s) = d.status.as_mut() {
            s.replicas = Some(3);
            s.updated_replicas = Some(1);
        }
        let new = rs("web-1", 1, 2, 0);
        let status = rollout_status(
            &d,
            computed(&d, counts(3, 2, 1)),
            Some(&new),
            &[&new],
            at(150),
        );
        let c = get(&status, PROGRESSING).unwrap();
        assert_eq!(c.reason.as_deref(), Some(RS_UPDATED));
        assert_eq!(c.last_update_time, Some(Time(at(150))));
        assert_eq!(c.last_transition_time, Some(Time(at(100))));
    }

    #[test]
    fn no_progress_past_the_deadline_times_out_and_stops_requeueing() {
        let mut d = rolling(3, json!(1), json!(0));
        if let Some(s) = d.spec.as_mut() {
            s.progress_deadline_seconds = Some(30);
        }
        d.status = Some(counts(3, 0, 3));
        let d = with_progressing(d, FOUND_NEW_RS, 100);
        let still = computed(&d, counts(3, 0, 3));
        // Before the deadline: unchanged, looked at again just after it.
        let before = rollout_status(&d, still.clone(), None, &[], at(120));
        assert_eq!(reason(&before), Some(FOUND_NEW_RS));
        assert_eq!(
            requeue_after(&d, &before, at(120)),
            Some(Duration::from_secs(11))
        );
        // After it: False / ProgressDeadlineExceeded.
        let after = rollout_status(&d, still, None, &[], at(131));
        let c = get(&after, PROGRESSING).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some(TIMED_OUT))
        );
        assert_eq!(
            c.message.as_deref(),
            Some("Deployment \"web\" has timed out progressing.")
        );
        assert_eq!(requeue_after(&d, &after, at(131)), None);
    }

    #[test]
    fn without_a_deadline_there_is_no_progressing_condition() {
        let mut d = with_progressing(rolling(1, json!(1), json!(0)), RS_UPDATED, 100);
        if let Some(s) = d.spec.as_mut() {
            s.progress_deadline_seconds = None;
        }
        let mut new = counts(1, 0, 0);
        new.conditions = d.status.as_ref().unwrap().conditions.clone();
        let status = rollout_status(&d, new, None, &[], at(200));
        assert_eq!(get(&status, PROGRESSING), None);
        assert_eq!(requeue_after(&d, &status, at(200)), None);
    }

    #[test]
    fn progress_is_more_updated_fewer_old_more_ready_or_more_available() {
        let base = counts(4, 1, 2);
        assert!(!progressing(&base, &base));
        assert!(progressing(&base, &counts(4, 2, 2)));
        assert!(progressing(&base, &counts(3, 1, 2)));
        assert!(progressing(&base, &counts(4, 1, 3)));
        assert!(!progressing(&base, &counts(5, 1, 1)));
    }
}
