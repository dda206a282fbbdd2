//! When a finished Job's `ttlSecondsAfterFinished` runs out (upstream `timeLeft`, `jobFinishTime`):
//! pure functions of the Job and the time now, so the expiry is tested without a clock.

use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Why a Job's expiry cannot be computed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExpiryError {
    /// The Job's Complete or Failed condition has no `lastTransitionTime`, so when it finished is
    /// unknown (upstream's "unable to find the time when the Job finished").
    #[error("job {0} finished but its finished condition has no lastTransitionTime")]
    NoFinishTime(String),
}

/// What the TTL says about a Job at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Not the controller's business: no TTL, not finished, or already being deleted.
    NotApplicable,
    /// Finished, and the TTL runs out after this long: look again then.
    Remaining(Duration),
    /// The TTL has run out (at the instant held): the Job may be deleted.
    Expired(Timestamp),
}

/// Whether `job` has a TTL and has finished: a Complete or Failed condition with status True, as
/// upstream's `IsJobFinished`.
pub fn needs_cleanup(job: &Job) -> bool {
    let has_ttl = job
        .spec
        .as_ref()
        .is_some_and(|s| s.ttl_seconds_after_finished.is_some());
    has_ttl && finished_condition(job).is_some()
}

/// The TTL's verdict on `job` at `now`. A Job that finished "in the future" (clock skew between
/// the API server and us) just waits longer, as upstream.
///
/// # Errors
/// [`ExpiryError::NoFinishTime`] when the Job finished but the condition carries no time.
pub fn expiry(job: &Job, now: Timestamp) -> Result<Expiry, ExpiryError> {
    if job.metadata.deletion_timestamp.is_some() || !needs_cleanup(job) {
        return Ok(Expiry::NotApplicable);
    }
    let ttl = job
        .spec
        .as_ref()
        .and_then(|s| s.ttl_seconds_after_finished)
        .unwrap_or(0);
    let finished_at = finished_condition(job)
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
        .ok_or_else(|| ExpiryError::NoFinishTime(job_key(job)))?;
    // Out of the representable range only for a finish time at the end of time: never expires.
    let expires_at = finished_at
        .checked_add(SignedDuration::from_secs(i64::from(ttl)))
        .unwrap_or(Timestamp::MAX);
    let remaining = expires_at.duration_since(now);
    if remaining.is_positive() {
        // A positive signed duration always fits a std one; the fallback is never taken.
        Ok(Expiry::Remaining(
            Duration::try_from(remaining).unwrap_or(Duration::ZERO),
        ))
    } else {
        Ok(Expiry::Expired(expires_at))
    }
}

/// The first condition that says the Job finished.
fn finished_condition(
    job: &Job,
) -> Option<&flotilla_sdk::k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

fn job_key(job: &Job) -> String {
    format!(
        "{}/{}",
        job.metadata.namespace.as_deref().unwrap_or_default(),
        job.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn job(ttl: Option<i32>, condition: Option<(&str, &str, Option<Timestamp>)>) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some("pi".into()),
                namespace: Some("batch".into()),
                ..ObjectMeta::default()
            },
            spec: Some(JobSpec {
                ttl_seconds_after_finished: ttl,
                ..JobSpec::default()
            }),
            status: condition.map(|(type_, status, time)| JobStatus {
                conditions: Some(vec![
                    JobCondition {
                        type_: "SuccessCriteriaMet".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(at(-100))),
                        ..JobCondition::default()
                    },
                    JobCondition {
                        type_: type_.into(),
                        status: status.into(),
                        last_transition_time: time.map(Time),
                        ..JobCondition::default()
                    },
                ]),
                ..JobStatus::default()
            }),
        }
    }

    #[test]
    fn a_completed_job_waits_exactly_the_rest_of_its_ttl_from_its_condition() {
        let j = job(Some(30), Some(("Complete", "True", Some(at(0)))));
        assert_eq!(
            expiry(&j, at(10)),
            Ok(Expiry::Remaining(Duration::from_secs(20)))
        );
        let just_before = at(29)
            .checked_add(SignedDuration::from_millis(750))
            .unwrap();
        assert_eq!(
            expiry(&j, just_before),
            Ok(Expiry::Remaining(Duration::from_millis(250)))
        );
    }

    #[test]
    fn a_failed_job_expires_once_its_ttl_has_passed_and_stays_expired() {
        let j = job(Some(30), Some(("Failed", "True", Some(at(0)))));
        assert_eq!(expiry(&j, at(30)), Ok(Expiry::Expired(at(30))));
        assert_eq!(expiry(&j, at(500)), Ok(Expiry::Expired(at(30))));
    }

    #[test]
    fn a_zero_ttl_expires_at_the_finish() {
        let j = job(Some(0), Some(("Complete", "True", Some(at(0)))));
        assert_eq!(expiry(&j, at(0)), Ok(Expiry::Expired(at(0))));
    }

    #[test]
    fn a_job_that_finished_in_the_future_waits_out_the_skew_too() {
        let j = job(Some(5), Some(("Complete", "True", Some(at(60)))));
        assert_eq!(
            expiry(&j, at(0)),
            Ok(Expiry::Remaining(Duration::from_secs(65)))
        );
    }

    #[test]
    fn unfinished_ttl_less_and_deleting_jobs_are_left_alone() {
        let running = job(Some(5), None);
        assert_eq!(expiry(&running, at(0)), Ok(Expiry::NotApplicable));
        let not_yet = job(Some(5), Some(("Complete", "False", Some(at(0)))));
        assert_eq!(expiry(&not_yet, at(100)), Ok(Expiry::NotApplicable));
        let suspended = job(Some(5), Some(("Suspended", "True", Some(at(0)))));
        assert_eq!(expiry(&suspended, at(100)), Ok(Expiry::NotApplicable));
        let no_ttl = job(None, Some(("Complete", "True", Some(at(0)))));
        assert!(!needs_cleanup(&no_ttl));
        assert_eq!(expiry(&no_ttl, at(100)), Ok(Expiry::NotApplicable));
        let mut deleting = job(Some(5), Some(("Complete", "True", Some(at(0)))));
        deleting.metadata.deletion_timestamp = Some(Time(at(1)));
        assert_eq!(expiry(&deleting, at(100)), Ok(Expiry::NotApplicable));
    }

    #[test]
    fn a_finished_condition_without_a_time_is_an_error_naming_the_job() {
        let j = job(Some(5), Some(("Complete", "True", None)));
        let err = expiry(&j, at(0)).unwrap_err();
        assert_eq!(err, ExpiryError::NoFinishTime("batch/pi".into()));
        assert!(err.to_string().contains("batch/pi"));
    }
}
