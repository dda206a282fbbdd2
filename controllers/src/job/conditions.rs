//! A Job's conditions as upstream writes them: a new condition has `lastProbeTime` equal to
//! `lastTransitionTime`; an existing one is rewritten only when its status, reason or message changes
//! (upstream `newCondition`, `ensureJobConditionStatus`).

use flotilla_sdk::k8s_openapi::api::batch::v1::JobCondition;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

/// A condition of `type_` set at `now`.
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> JobCondition {
    JobCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// The condition of `type_`, if any.
pub fn find<'a>(conditions: &'a [JobCondition], type_: &str) -> Option<&'a JobCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is True.
pub fn is_true(conditions: &[JobCondition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Makes the condition of `type_` say `status`, `reason` and `message`: rewritten in place when it
/// says something else, added when missing unless `status` is False (a condition that never was True
/// is not worth a False entry). Returns whether anything changed.
pub fn ensure(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    let fresh = || new_condition(type_, status, reason, message, now);
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        let same = existing.status == status
            && existing.reason.as_deref() == Some(reason)
            && existing.message.as_deref() == Some(message);
        if !same {
            *existing = fresh();
        }
        return !same;
    }
    if status == "False" {
        return false;
    }
    conditions.push(fresh());
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_false_condition_is_not_added_but_a_true_one_flips_in_place() {
        let t0 = Timestamp::from_second(100).unwrap();
        let t1 = Timestamp::from_second(200).unwrap();
        let mut conditions = Vec::new();
        assert!(!ensure(
            &mut conditions,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            t0
        ));
        assert!(conditions.is_empty());
        assert!(ensure(
            &mut conditions,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            t0
        ));
        assert!(!ensure(
            &mut conditions,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            t1
        ));
        assert_eq!(conditions[0].last_transition_time, Some(Time(t0)));
        assert!(ensure(
            &mut conditions,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            t1
        ));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].status, "False");
        assert_eq!(conditions[0].last_probe_time, Some(Time(t1)));
        assert!(!is_true(&conditions, "Suspended"));
    }
}
