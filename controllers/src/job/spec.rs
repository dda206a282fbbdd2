//! What the controller reads from a Job's spec, with the API's defaults applied for objects that did
//! not go through defaulting (upstream `SetDefaults_Job`), so the rest of the controller never
//! unwraps an option.

use flotilla_sdk::k8s_openapi::api::batch::v1::{Job, PodFailurePolicy, SuccessPolicy};

/// `spec.completionMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionMode {
    /// Any `completions` successful pods complete the Job.
    NonIndexed,
    /// One successful pod per index `0..completions` completes the Job.
    Indexed,
}

/// A Job's spec as the controller uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// `spec.parallelism`, at least 0; 1 when unset.
    pub parallelism: i32,
    /// `spec.completions`; `None` for a work-queue Job (done when any pod succeeds).
    pub completions: Option<i32>,
    /// `spec.completionMode`; `None` when it names a mode this controller does not know.
    pub mode: Option<CompletionMode>,
    /// `spec.backoffLimit`; 6 when unset.
    pub backoff_limit: i32,
    /// `spec.suspend`.
    pub suspend: bool,
    /// `spec.activeDeadlineSeconds`.
    pub active_deadline_seconds: Option<i64>,
    /// `spec.podReplacementPolicy` is `Failed` (or a `podFailurePolicy` is set): a terminating pod is
    /// not replaced, nor counted failed, before it reaches phase Failed.
    pub only_replace_failed_pods: bool,
    /// The pods' `restartPolicy` is `OnFailure`: container restarts count against `backoffLimit`.
    pub restart_on_failure: bool,
    /// `spec.podFailurePolicy`.
    pub pod_failure_policy: Option<PodFailurePolicy>,
    /// `spec.backoffLimitPerIndex` of an Indexed Job.
    pub backoff_limit_per_index: Option<i32>,
    /// `spec.maxFailedIndexes`.
    pub max_failed_indexes: Option<i32>,
    /// `spec.successPolicy` of an Indexed Job.
    pub success_policy: Option<SuccessPolicy>,
}

impl JobSpec {
    /// The spec of `job`.
    pub fn of(job: &Job) -> Self {
        let Some(spec) = job.spec.as_ref() else {
            return Self {
                parallelism: 1,
                completions: Some(1),
                mode: Some(CompletionMode::NonIndexed),
                backoff_limit: 6,
                suspend: false,
                active_deadline_seconds: None,
                only_replace_failed_pods: false,
                restart_on_failure: false,
                pod_failure_policy: None,
                backoff_limit_per_index: None,
                max_failed_indexes: None,
                success_policy: None,
            };
        };
        let mode = match spec.completion_mode.as_deref() {
            None | Some("NonIndexed") => Some(CompletionMode::NonIndexed),
            Some("Indexed") => Some(CompletionMode::Indexed),
            Some(_) => None,
        };
        // Upstream defaults both to 1 only when both are unset; a set parallelism leaves completions
        // unset (a work-queue Job).
        let (parallelism, completions) = match (spec.parallelism, spec.completions) {
            (None, None) => (1, Some(1)),
            (parallelism, completions) => (parallelism.unwrap_or(1).max(0), completions),
        };
        Self {
            parallelism,
            completions,
            mode,
            backoff_limit: spec.backoff_limit.unwrap_or(6),
            suspend: spec.suspend == Some(true),
            active_deadline_seconds: spec.active_deadline_seconds,
            only_replace_failed_pods: spec.pod_replacement_policy.as_deref() == Some("Failed")
                || spec.pod_failure_policy.is_some(),
            restart_on_failure: spec
                .template
                .spec
                .as_ref()
                .and_then(|s| s.restart_policy.as_deref())
                == Some("OnFailure"),
            pod_failure_policy: spec.pod_failure_policy.clone(),
            backoff_limit_per_index: spec
                .backoff_limit_per_index
                .filter(|_| mode == Some(CompletionMode::Indexed)),
            max_failed_indexes: spec.max_failed_indexes,
            success_policy: spec
                .success_policy
                .clone()
                .filter(|_| mode == Some(CompletionMode::Indexed)),
        }
    }

    /// Whether the Job is Indexed.
    pub fn indexed(&self) -> bool {
        self.mode == Some(CompletionMode::Indexed)
    }

    /// `completions` as the bound of valid indexes (0 when unset: an Indexed Job always sets it).
    pub fn index_bound(&self) -> i32 {
        self.completions.unwrap_or(0).max(0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn job(spec: serde_json::Value) -> Job {
        serde_json::from_value(serde_json::json!({"spec": spec})).unwrap()
    }

    #[test]
    fn an_undefaulted_job_runs_one_pod_to_one_completion() {
        let spec = JobSpec::of(&job(serde_json::json!({"template": {}})));
        assert_eq!((spec.parallelism, spec.completions), (1, Some(1)));
        assert_eq!(spec.backoff_limit, 6);
        assert_eq!(spec.mode, Some(CompletionMode::NonIndexed));
    }

    #[test]
    fn a_set_parallelism_without_completions_is_a_work_queue_job() {
        let spec = JobSpec::of(&job(serde_json::json!({"parallelism": 3, "template": {}})));
        assert_eq!((spec.parallelism, spec.completions), (3, None));
    }

    #[test]
    fn an_unknown_completion_mode_is_none_and_pod_failure_policy_replaces_only_failed_pods() {
        let spec = JobSpec::of(&job(serde_json::json!({
            "completionMode": "Sideways",
            "podFailurePolicy": {"rules": []},
            "template": {},
        })));
        assert_eq!(spec.mode, None);
        assert!(spec.only_replace_failed_pods);
    }
}
