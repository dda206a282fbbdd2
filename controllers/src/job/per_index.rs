//! `spec.backoffLimitPerIndex` of an Indexed Job (upstream `indexed_job_utils.go`): each pod carries
//! how often its index failed before it (`batch.kubernetes.io/job-index-failure-count`, and the
//! failures a `podFailurePolicy` ignored in `…-ignored-failure-count`); a failure of a pod whose
//! count has reached the limit fails its index (`status.failedIndexes`), which is never retried; a
//! failed index is otherwise retried after the backoff its count earns, counted from its last
//! failure. The last failed pod of an index keeps its finalizer until its replacement exists (upstream
//! "delayed deletion"), so the count it carries cannot vanish with it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

use super::backoff::Failures;
use super::failure_policy::{Judgement, judge};
use super::indexes::Indexes;
use super::pods::{completion_index, finished_at, is_failed};
use super::spec::JobSpec;

/// The annotation counting an index's earlier failures.
pub const FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// The annotation counting an index's earlier failures a `podFailurePolicy` ignored.
pub const IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";

fn annotation(pod: &Pod, key: &str) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|n| *n >= 0)
        .unwrap_or(0)
}

/// How often the pod's index failed before it: counted and ignored failures.
pub fn failure_counts(pod: &Pod) -> (i32, i32) {
    (
        annotation(pod, FAILURE_COUNT),
        annotation(pod, IGNORED_FAILURE_COUNT),
    )
}

/// Whether the failed `pod` fails its index: a `FailIndex` rule matched, or a counted failure once
/// the index used up `backoffLimitPerIndex`.
pub fn fails_index(spec: &JobSpec, pod: &Pod) -> bool {
    let Some(limit) = spec.backoff_limit_per_index else {
        return false;
    };
    if !is_failed(pod, spec.only_replace_failed_pods) {
        return false;
    }
    match judge(spec.pod_failure_policy.as_ref(), pod) {
        Judgement::FailIndex => true,
        Judgement::Ignore => false,
        Judgement::FailJob(_) | Judgement::Count => failure_counts(pod).0 >= limit,
    }
}

/// The last failed pod of each index that still needs a pod (not succeeded, not failed, no active
/// pod): the one its replacement takes its count from.
pub fn last_failures<'p>(
    spec: &JobSpec,
    pods: &'p [Pod],
    busy: &BTreeSet<i32>,
    done: &Indexes,
    failed: &Indexes,
) -> BTreeMap<i32, &'p Pod> {
    let mut last: BTreeMap<i32, &Pod> = BTreeMap::new();
    for pod in pods
        .iter()
        .filter(|p| is_failed(p, spec.only_replace_failed_pods))
    {
        let Some(ix) = completion_index(pod).filter(|i| *i < spec.index_bound()) else {
            continue;
        };
        if busy.contains(&ix) || done.contains(ix) || failed.contains(ix) {
            continue;
        }
        let absolute = |p: &Pod| {
            let (counted, ignored) = failure_counts(p);
            counted.saturating_add(ignored)
        };
        let later = last.get(&ix).is_none_or(|prev| {
            absolute(prev) <= absolute(pod) && finished_at(pod) >= finished_at(prev)
        });
        if later {
            last.insert(ix, pod);
        }
    }
    last
}

/// The counts the replacement of `replaced` (the index's last failed pod, if any) carries.
pub fn next_counts(spec: &JobSpec, replaced: Option<&Pod>) -> (i32, i32) {
    let Some(pod) = replaced else {
        return (0, 0);
    };
    let (counted, ignored) = failure_counts(pod);
    match judge(spec.pod_failure_policy.as_ref(), pod) {
        Judgement::Ignore => (counted, ignored.saturating_add(1)),
        Judgement::FailJob(_) | Judgement::FailIndex | Judgement::Count => {
            (counted.saturating_add(1), ignored)
        }
    }
}

/// How long the index whose last failed pod is `replaced` waits at `now` before its replacement.
pub fn remaining(replaced: Option<&Pod>, now: Timestamp) -> Duration {
    let Some(pod) = replaced else {
        return Duration::ZERO;
    };
    let (counted, ignored) = failure_counts(pod);
    let failures = Failures {
        count: u32::try_from(counted.saturating_add(ignored).saturating_add(1)).unwrap_or(1),
        last: finished_at(pod),
    };
    failures.remaining(now)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
    use flotilla_sdk::k8s_openapi::jiff::SignedDuration;
    use serde_json::json;

    use super::super::names::COMPLETION_INDEX;
    use super::*;

    fn spec() -> JobSpec {
        let job: Job = serde_json::from_value(json!({"spec": {
            "completions": 3, "parallelism": 3, "completionMode": "Indexed",
            "backoffLimitPerIndex": 1, "template": {},
        }}))
        .unwrap();
        JobSpec::of(&job)
    }

    fn failed(index: i32, count: i32, at: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("p{index}-{count}"), "annotations": {
                COMPLETION_INDEX: index.to_string(), FAILURE_COUNT: count.to_string()}},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 1, "finishedAt": at}}}]},
        }))
        .unwrap()
    }

    #[test]
    fn an_index_fails_once_its_failures_reach_the_per_index_limit() {
        let spec = spec();
        assert!(!fails_index(&spec, &failed(1, 0, "2026-01-01T00:00:00Z")));
        assert!(fails_index(&spec, &failed(1, 1, "2026-01-01T00:00:00Z")));
    }

    #[test]
    fn a_fail_index_rule_fails_the_index_at_its_first_failure() {
        let job: Job = serde_json::from_value(json!({"spec": {
            "completions": 3, "parallelism": 3, "completionMode": "Indexed",
            "backoffLimitPerIndex": 5, "template": {},
            "podFailurePolicy": {"rules": [
                {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}},
            ]},
        }}))
        .unwrap();
        let spec = JobSpec::of(&job);
        assert!(fails_index(&spec, &failed(1, 0, "2026-01-01T00:00:00Z")));
    }

    #[test]
    fn the_replacement_carries_the_last_failures_count_plus_one_after_its_backoff() {
        let spec = spec();
        let pods = [
            failed(1, 0, "2026-01-01T00:00:00Z"),
            failed(1, 1, "2026-01-01T00:00:30Z"),
            failed(2, 0, "2026-01-01T00:00:00Z"),
        ];
        let busy = BTreeSet::from([2]);
        let last = last_failures(
            &spec,
            &pods,
            &busy,
            &Indexes::default(),
            &Indexes::default(),
        );
        assert_eq!(last.len(), 1, "index 2 has an active pod");
        let replaced = last[&1];
        assert_eq!(failure_counts(replaced), (1, 0));
        assert_eq!(next_counts(&spec, Some(replaced)), (2, 0));
        assert_eq!(next_counts(&spec, None), (0, 0));
        let at = "2026-01-01T00:00:30Z".parse::<Timestamp>().unwrap();
        // The second failure of the index: 20 s.
        assert_eq!(
            remaining(Some(replaced), at + SignedDuration::from_secs(5)),
            Duration::from_secs(15)
        );
    }
}
