//! Whether a Job is done, and how (upstream `syncJob`'s `finishedCondition`): a verdict is first
//! written as an interim condition (`SuccessCriteriaMet` or `FailureTarget`) while pods are still
//! being accounted for, and becomes the terminal one (`Complete` or `Failed`, same reason and
//! message) once no pod is uncounted or terminating — so a Job is never declared finished with a
//! finished pod still uncounted.

use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::batch::v1::JobCondition;
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::conditions::find;
use super::failure_policy::{Judgement, judge};
use super::indexes::Indexes;
use super::names::{
    BACKOFF_LIMIT_EXCEEDED, BACKOFF_LIMIT_EXCEEDED_MESSAGE, COMPLETE, COMPLETIONS_REACHED,
    COMPLETIONS_REACHED_MESSAGE, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE, FAILED,
    FAILED_INDEXES, FAILED_INDEXES_MESSAGE, FAILURE_TARGET, MAX_FAILED_INDEXES_EXCEEDED,
    MAX_FAILED_INDEXES_EXCEEDED_MESSAGE, POD_FAILURE_POLICY, SUCCESS_CRITERIA_MET, SUCCESS_POLICY,
};
use super::pods::{is_failed, restarts};
use super::spec::JobSpec;

/// How a Job ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Complete rather than Failed.
    pub success: bool,
    /// The conditions' reason.
    pub reason: String,
    /// The conditions' message.
    pub message: String,
}

impl Verdict {
    fn new(success: bool, reason: &str, message: &str) -> Self {
        Self {
            success,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// The interim condition's type.
    pub fn interim(&self) -> &'static str {
        if self.success {
            SUCCESS_CRITERIA_MET
        } else {
            FAILURE_TARGET
        }
    }

    /// The terminal condition's type.
    pub fn terminal(&self) -> &'static str {
        if self.success { COMPLETE } else { FAILED }
    }
}

/// Whether the Job has a terminal condition: nothing more to do.
pub fn is_finished(conditions: &[JobCondition]) -> bool {
    conditions
        .iter()
        .any(|c| (c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True")
}

/// The verdict an earlier sync already wrote as an interim condition.
pub fn standing(conditions: &[JobCondition]) -> Option<Verdict> {
    [SUCCESS_CRITERIA_MET, FAILURE_TARGET]
        .into_iter()
        .find_map(|type_| find(conditions, type_).filter(|c| c.status == "True"))
        .map(|c| {
            Verdict::new(
                c.type_ == SUCCESS_CRITERIA_MET,
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default(),
            )
        })
}

/// The verdict of `spec.podFailurePolicy`: a failed pod matching a `FailJob` rule fails the Job
/// (reason `PodFailurePolicy`, the rule's message).
pub fn policy_failure(spec: &JobSpec, pods: &[Pod]) -> Option<Verdict> {
    let policy = spec.pod_failure_policy.as_ref()?;
    pods.iter()
        .filter(|p| is_failed(p, spec.only_replace_failed_pods))
        .find_map(|p| match judge(Some(policy), p) {
            Judgement::FailJob(message) => Some(Verdict::new(false, POD_FAILURE_POLICY, &message)),
            Judgement::FailIndex | Judgement::Ignore | Judgement::Count => None,
        })
}

/// The verdict of `backoffLimitPerIndex`: more failed indexes than `maxFailedIndexes`, or some
/// failed index once every index has succeeded or failed.
pub fn index_failure(spec: &JobSpec, failed: &Indexes, succeeded: i32) -> Option<Verdict> {
    spec.backoff_limit_per_index?;
    if spec
        .max_failed_indexes
        .is_some_and(|max| failed.total() > max)
    {
        let message = MAX_FAILED_INDEXES_EXCEEDED_MESSAGE;
        return Some(Verdict::new(false, MAX_FAILED_INDEXES_EXCEEDED, message));
    }
    (failed.total() > 0 && failed.total().saturating_add(succeeded) >= spec.index_bound())
        .then(|| Verdict::new(false, FAILED_INDEXES, FAILED_INDEXES_MESSAGE))
}

/// The verdict of `spec.successPolicy` on the succeeded indexes: the first rule whose
/// `succeededIndexes` all succeeded (or at least `succeededCount` of them), or, without indexes, at
/// least `succeededCount` succeeded indexes. The Job then succeeds; its remaining pods are deleted.
pub fn policy_success(spec: &JobSpec, succeeded: &Indexes) -> Option<Verdict> {
    let policy = spec.success_policy.as_ref()?;
    if succeeded.total() == 0 {
        return None;
    }
    let matched = policy.rules.iter().position(|rule| {
        match (&rule.succeeded_indexes, rule.succeeded_count) {
            (Some(text), count) => {
                let required = Indexes::parse(text, spec.index_bound());
                // An unparsable rule matches nothing, as upstream.
                let common = required.common(succeeded);
                required.total() > 0
                    && (common == required.total() || count.is_some_and(|c| common >= c))
            }
            (None, Some(count)) => succeeded.total() >= count,
            (None, None) => false,
        }
    })?;
    let message = format!("Matched rules at index {matched}");
    Some(Verdict::new(true, SUCCESS_POLICY, &message))
}

/// A failure verdict at `now`, if any: more failed pods than `backoffLimit` (or, for restartPolicy
/// OnFailure, as many container restarts in running pods), else a run longer than
/// `activeDeadlineSeconds`. Without a verdict, how long until the deadline passes, if one is set.
pub fn failure(
    spec: &JobSpec,
    failed: i32,
    pods: &[Pod],
    start_time: Option<&Time>,
    now: Timestamp,
) -> (Option<Verdict>, Option<Duration>) {
    if failed > spec.backoff_limit || past_backoff_on_failure(spec, pods) {
        let verdict = Verdict::new(
            false,
            BACKOFF_LIMIT_EXCEEDED,
            BACKOFF_LIMIT_EXCEEDED_MESSAGE,
        );
        return (Some(verdict), None);
    }
    let (Some(deadline), Some(start), false) =
        (spec.active_deadline_seconds, start_time, spec.suspend)
    else {
        return (None, None);
    };
    let allowed = SignedDuration::from_secs(deadline);
    let elapsed = now.duration_since(start.0);
    if elapsed >= allowed {
        let verdict = Verdict::new(false, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE);
        return (Some(verdict), None);
    }
    let left = Duration::try_from(allowed - elapsed).unwrap_or(Duration::ZERO);
    (None, Some(left))
}

fn past_backoff_on_failure(spec: &JobSpec, pods: &[Pod]) -> bool {
    if !spec.restart_on_failure {
        return false;
    }
    let total: i64 = pods
        .iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            matches!(phase, Some("Running" | "Pending"))
        })
        .map(restarts)
        .sum();
    if spec.backoff_limit == 0 {
        total > 0
    } else {
        total >= i64::from(spec.backoff_limit)
    }
}

/// The success verdict once `succeeded` pods succeeded and none is `active`: `completions` of them,
/// or, for a work-queue Job, any.
pub fn completion(spec: &JobSpec, succeeded: i32, active: i32) -> Option<Verdict> {
    let done = match spec.completions {
        Some(completions) => succeeded >= completions,
        None => succeeded > 0,
    };
    (done && active == 0)
        .then(|| Verdict::new(true, COMPLETIONS_REACHED, COMPLETIONS_REACHED_MESSAGE))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
    use serde_json::json;

    use super::super::conditions::new_condition;
    use super::*;

    fn spec(extra: serde_json::Value) -> JobSpec {
        let mut spec =
            json!({"completions": 3, "parallelism": 2, "backoffLimit": 2, "template": {}});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        JobSpec::of(&serde_json::from_value::<Job>(json!({"spec": spec})).unwrap())
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn failing_more_pods_than_the_backoff_limit_fails_the_job() {
        let spec = spec(json!({}));
        assert_eq!(failure(&spec, 2, &[], None, at(0)).0, None);
        let (verdict, _) = failure(&spec, 3, &[], None, at(0));
        let verdict = verdict.unwrap();
        assert_eq!(
            (verdict.success, verdict.reason.as_str()),
            (false, "BackoffLimitExceeded")
        );
        assert_eq!(
            (verdict.interim(), verdict.terminal()),
            ("FailureTarget", "Failed")
        );
    }

    #[test]
    fn the_deadline_is_a_requeue_until_it_passes_then_a_failure() {
        let spec = spec(json!({"activeDeadlineSeconds": 30}));
        let start = Time(at(100));
        let (verdict, left) = failure(&spec, 0, &[], Some(&start), at(110));
        assert_eq!((verdict, left), (None, Some(Duration::from_secs(20))));
        let (verdict, _) = failure(&spec, 0, &[], Some(&start), at(130));
        assert_eq!(verdict.unwrap().reason, "DeadlineExceeded");
        let suspended = super::super::spec::JobSpec {
            suspend: true,
            ..spec
        };
        assert_eq!(
            failure(&suspended, 0, &[], Some(&start), at(500)),
            (None, None)
        );
    }

    #[test]
    fn completions_reached_with_no_active_pod_is_a_success() {
        let spec = spec(json!({}));
        assert_eq!(completion(&spec, 3, 1), None);
        let verdict = completion(&spec, 3, 0).unwrap();
        assert_eq!(
            (verdict.interim(), verdict.terminal()),
            ("SuccessCriteriaMet", "Complete")
        );
        assert_eq!(verdict.message, "Reached expected number of succeeded pods");
        let queue = super::super::spec::JobSpec {
            completions: None,
            ..spec
        };
        assert!(completion(&queue, 1, 0).is_some());
        assert!(completion(&queue, 0, 0).is_none());
    }

    #[test]
    fn a_failed_pod_matching_a_fail_job_rule_fails_the_job_with_the_rules_message() {
        let spec = spec(json!({"podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        ]}}));
        let pod = |code: i32| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ns"},
                "status": {"phase": "Failed", "containerStatuses": [
                    {"name": "main", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": code}}}]},
            }))
            .unwrap()
        };
        assert_eq!(policy_failure(&spec, &[pod(1)]), None);
        let verdict = policy_failure(&spec, &[pod(1), pod(42)]).unwrap();
        assert_eq!(verdict.reason, "PodFailurePolicy");
        assert_eq!(
            verdict.message,
            "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 0"
        );
        assert!(
            spec.only_replace_failed_pods,
            "a policy waits for phase Failed"
        );
    }

    #[test]
    fn failed_indexes_fail_the_job_past_max_failed_indexes_or_once_every_index_is_done() {
        let per_index = spec(
            json!({"completionMode": "Indexed", "backoffLimitPerIndex": 1,
            "maxFailedIndexes": 1}),
        );
        let failed = |text: &str| Indexes::parse(text, 3);
        assert_eq!(index_failure(&per_index, &failed(""), 3), None);
        assert_eq!(
            index_failure(&per_index, &failed("1"), 1),
            None,
            "index 2 still runs"
        );
        let verdict = index_failure(&per_index, &failed("1"), 2).unwrap();
        assert_eq!(verdict.reason, "FailedIndexes");
        let verdict = index_failure(&per_index, &failed("0,1"), 0).unwrap();
        assert_eq!(verdict.reason, "MaxFailedIndexesExceeded");
        assert_eq!(index_failure(&spec(json!({})), &failed("0"), 3), None);
    }

    #[test]
    fn a_success_policy_rule_succeeds_the_job_on_its_indexes_or_its_count() {
        let indexed = spec(
            json!({"completionMode": "Indexed", "completions": 5, "successPolicy": {"rules": [
                {"succeededIndexes": "0-2", "succeededCount": 2},
                {"succeededCount": 4},
            ]}}),
        );
        let done = |text: &str| Indexes::parse(text, 5);
        assert_eq!(policy_success(&indexed, &done("")), None);
        assert_eq!(policy_success(&indexed, &done("0,3,4")), None);
        let verdict = policy_success(&indexed, &done("1,2")).unwrap();
        assert!(verdict.success);
        assert_eq!(
            (verdict.reason.as_str(), verdict.message.as_str()),
            ("SuccessPolicy", "Matched rules at index 0")
        );
        let verdict = policy_success(&indexed, &done("0,3,4,1")).unwrap();
        assert_eq!(verdict.message, "Matched rules at index 0");
        let by_count = policy_success(&indexed, &done("2,3,4,1")).unwrap();
        assert_eq!(by_count.message, "Matched rules at index 0");
        let only_count = spec(json!({"completionMode": "Indexed", "completions": 5,
            "successPolicy": {"rules": [{"succeededCount": 2}]}}));
        assert_eq!(policy_success(&only_count, &done("3")), None);
        assert!(policy_success(&only_count, &done("3,4")).is_some());
    }

    #[test]
    fn a_standing_interim_condition_is_the_verdict_and_a_terminal_one_finishes() {
        let now = at(1);
        let conditions = vec![new_condition(
            "FailureTarget",
            "True",
            "DeadlineExceeded",
            "m",
            now,
        )];
        let verdict = standing(&conditions).unwrap();
        assert!(!verdict.success && verdict.reason == "DeadlineExceeded");
        assert!(!is_finished(&conditions));
        assert!(is_finished(&[new_condition(
            "Complete", "True", "r", "m", now
        )]));
        assert!(!is_finished(&[new_condition(
            "Complete", "False", "r", "m", now
        )]));
    }
}
