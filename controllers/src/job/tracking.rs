//! The job-tracking finalizer protocol (upstream `trackJobStatusAndRemoveFinalizers`), as decisions
//! on a [`Tally`]; the reconcile does the writes in this order:
//!
//! 1. [`Tally::record`]: a finished pod that still carries the finalizer and is not yet in
//!    `status.uncountedTerminatedPods` is added there (an Indexed Job's succeeded pod goes straight
//!    into `completedIndexes`, which cannot count an index twice). The status is written, guarded by
//!    the Job's resourceVersion.
//! 2. The finalizer is removed from every finished pod that carries it.
//! 3. [`Tally::settle`]: every uid in `uncountedTerminatedPods` whose pod no longer carries the
//!    finalizer (or is gone) moves into `succeeded` / `failed`. The status is written again.
//!
//! A pod is thus counted once whatever step a worker dies after: a uid enters the uncounted list only
//! while its pod carries the finalizer, leaves it only once the pod does not, and each status write
//! fails with a conflict if the Job changed since it was read, so a stale view retries instead of
//! counting again.

use std::collections::HashSet;

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;

use super::failure_policy::{Judgement, judge};
use super::indexes::Indexes;
use super::per_index::fails_index;
use super::pods::{completion_index, has_finalizer, is_failed, is_succeeded, uid};
use super::spec::JobSpec;

/// At most this many pods are in `uncountedTerminatedPods` (plus newly completed indexes) after one
/// step, as upstream's `MaxUncountedPods`: it keeps the status small and one large Job from
/// monopolising a worker; the next sync takes the rest.
pub const MAX_UNCOUNTED_PODS: usize = 500;

/// The counting part of a Job's status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// `status.succeeded`.
    pub succeeded: i32,
    /// `status.failed`.
    pub failed: i32,
    /// `status.uncountedTerminatedPods.succeeded`: finished, finalizer not yet removed.
    pub uncounted_succeeded: Vec<String>,
    /// `status.uncountedTerminatedPods.failed`.
    pub uncounted_failed: Vec<String>,
    /// `status.completedIndexes`, for an Indexed Job (`succeeded` is then its size).
    pub completed: Option<Indexes>,
    /// `status.failedIndexes`, for an Indexed Job with `backoffLimitPerIndex`.
    pub failed_indexes: Option<Indexes>,
}

impl Tally {
    /// Whether `uid` is in either uncounted list.
    pub fn is_uncounted(&self, uid: &str) -> bool {
        self.uncounted_succeeded.iter().any(|u| u == uid)
            || self.uncounted_failed.iter().any(|u| u == uid)
    }

    /// How many pods are recorded but not counted yet.
    pub fn uncounted(&self) -> usize {
        self.uncounted_succeeded.len() + self.uncounted_failed.len()
    }

    /// Step 1: records the finished pods among `pods` that carry the finalizer; returns the pods whose
    /// finalizer step 2 may remove (recorded now or before) and whether the recording stopped at
    /// [`MAX_UNCOUNTED_PODS`]. With `finishing` (the Job has reached a terminal verdict), a pod that
    /// has not succeeded counts as failed, as upstream.
    /// The pods in `held` (an index's last failure, awaiting its replacement) are left alone.
    pub fn record<'p>(
        &mut self,
        pods: &'p [Pod],
        spec: &JobSpec,
        finishing: bool,
        held: &HashSet<&str>,
    ) -> (Vec<&'p Pod>, bool) {
        let mut strip = Vec::new();
        let mut added_indexes = 0;
        let mut full = false;
        let bound = spec.index_bound();
        let mut ordered: Vec<&Pod> = pods.iter().collect();
        if spec.indexed() {
            // Completed indexes go in index order, as upstream.
            ordered.sort_by_key(|p| completion_index(p).unwrap_or(i32::MAX));
        }
        for pod in ordered {
            if !has_finalizer(pod) {
                continue;
            }
            let id = uid(pod);
            let succeeded = is_succeeded(pod);
            let failed = !succeeded && (is_failed(pod, spec.only_replace_failed_pods) || finishing);
            if (!succeeded && !failed) || (!finishing && held.contains(id)) {
                continue;
            }
            strip.push(pod);
            if self.is_uncounted(id) {
                continue;
            }
            let index = completion_index(pod).filter(|i| *i < bound);
            if succeeded {
                if let Some(completed) = self.completed.as_mut() {
                    if let Some(ix) = index
                        && !completed.contains(ix)
                    {
                        completed.insert(ix);
                        added_indexes += 1;
                    }
                } else {
                    self.uncounted_succeeded.push(id.to_owned());
                }
            } else if (!spec.indexed() || index.is_some())
                && judge(spec.pod_failure_policy.as_ref(), pod) != Judgement::Ignore
            {
                self.uncounted_failed.push(id.to_owned());
                if let (Some(failed), Some(ix)) = (self.failed_indexes.as_mut(), index)
                    && fails_index(spec, pod)
                {
                    failed.insert(ix);
                }
            }
            if self.uncounted() + added_indexes >= MAX_UNCOUNTED_PODS {
                full = true;
                break;
            }
        }
        if let Some(completed) = &self.completed {
            self.succeeded = completed.total();
        }
        (strip, full)
    }

    /// Step 3: moves into the counts every uncounted uid that is not in `tracked` (the uids of pods
    /// still carrying the finalizer).
    pub fn settle(&mut self, tracked: &HashSet<&str>) {
        let counted = |list: &mut Vec<String>| {
            let before = list.len();
            list.retain(|u| tracked.contains(u.as_str()));
            i32::try_from(before - list.len()).unwrap_or(i32::MAX)
        };
        let succeeded = counted(&mut self.uncounted_succeeded);
        let failed = counted(&mut self.uncounted_failed);
        self.succeeded = self.succeeded.saturating_add(succeeded);
        self.failed = self.failed.saturating_add(failed);
    }
}

/// The uids of `pods` that carry the finalizer, but for those in `stripped`.
pub fn tracked<'p>(pods: &'p [Pod], stripped: &HashSet<String>) -> HashSet<&'p str> {
    pods.iter()
        .filter(|p| has_finalizer(p) && !stripped.contains(uid(p)))
        .map(uid)
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
    use serde_json::json;

    use super::super::names::COMPLETION_INDEX;
    use super::super::pods::tests::pod;
    use super::*;

    fn spec(indexed: bool) -> JobSpec {
        let mode = if indexed { "Indexed" } else { "NonIndexed" };
        let job: Job = serde_json::from_value(json!({"spec": {
            "completions": 3, "parallelism": 3, "completionMode": mode, "template": {},
        }}))
        .unwrap();
        JobSpec::of(&job)
    }

    fn indexed(uid: &str, phase: &str, index: i32) -> Pod {
        let mut p = pod(uid, phase, true);
        p.metadata.annotations = Some([(COMPLETION_INDEX.to_owned(), index.to_string())].into());
        p
    }

    fn none() -> HashSet<String> {
        HashSet::new()
    }

    #[test]
    fn a_finished_pod_is_recorded_uncounted_then_counted_once_its_finalizer_is_gone() {
        let spec = spec(false);
        let mut pods = vec![pod("a", "Succeeded", true), pod("b", "Running", true)];
        let mut tally = Tally::default();
        let (strip, full) = tally.record(&pods, &spec, false, &HashSet::new());
        assert!(!full);
        assert_eq!(strip.len(), 1);
        assert_eq!(tally.uncounted_succeeded, ["a"]);
        assert_eq!(tally.succeeded, 0);

        // The finalizer removal failed: the uid stays uncounted.
        let mut after = tally.clone();
        after.settle(&tracked(&pods, &none()));
        assert_eq!(after, tally);

        // It succeeded: counted, and only once.
        let stripped: HashSet<String> = ["a".to_owned()].into();
        tally.settle(&tracked(&pods, &stripped));
        assert_eq!((tally.succeeded, tally.uncounted()), (1, 0));
        pods[0].metadata.finalizers = None;
        let (strip, _) = tally.record(&pods, &spec, false, &HashSet::new());
        assert!(strip.is_empty());
        tally.settle(&tracked(&pods, &none()));
        assert_eq!(tally.succeeded, 1);
    }

    #[test]
    fn a_worker_that_died_between_the_steps_leaves_nothing_to_count_twice() {
        let spec = spec(false);
        // Died after step 1: the uid is uncounted and the pod still carries the finalizer.
        let pods = vec![pod("a", "Failed", true)];
        let mut tally = Tally {
            uncounted_failed: vec!["a".into()],
            ..Tally::default()
        };
        let (strip, _) = tally.record(&pods, &spec, false, &HashSet::new());
        assert_eq!(strip.len(), 1, "the finalizer is removed again");
        assert_eq!(tally.uncounted_failed, ["a"], "not recorded twice");
        // Died after step 2: the pod lost its finalizer, the uid is still uncounted.
        let pods = vec![pod("a", "Failed", false)];
        tally.settle(&tracked(&pods, &none()));
        assert_eq!((tally.failed, tally.uncounted()), (1, 0));
        // A pod that vanished meanwhile is counted too (it cannot carry the finalizer any more).
        let mut gone = Tally {
            uncounted_succeeded: vec!["z".into()],
            ..Tally::default()
        };
        gone.settle(&tracked(&[], &none()));
        assert_eq!(gone.succeeded, 1);
    }

    #[test]
    fn an_indexed_success_completes_its_index_once_and_a_stray_index_is_only_stripped() {
        let spec = spec(true);
        let pods = vec![
            indexed("a", "Succeeded", 2),
            indexed("b", "Succeeded", 2),
            indexed("c", "Succeeded", 7),
            indexed("d", "Failed", 0),
        ];
        let mut tally = Tally {
            completed: Some(Indexes::default()),
            ..Tally::default()
        };
        let (strip, _) = tally.record(&pods, &spec, false, &HashSet::new());
        assert_eq!(strip.len(), 4);
        assert_eq!(tally.completed.as_ref().unwrap().to_string(), "2");
        assert_eq!(tally.succeeded, 1);
        assert!(tally.uncounted_succeeded.is_empty());
        assert_eq!(tally.uncounted_failed, ["d"]);
    }

    #[test]
    fn a_finishing_job_counts_its_unfinished_tracked_pods_as_failed() {
        let spec = spec(false);
        let pods = vec![pod("a", "Running", true)];
        let mut tally = Tally::default();
        let (strip, _) = tally.record(&pods, &spec, true, &HashSet::new());
        assert_eq!(strip.len(), 1);
        assert_eq!(tally.uncounted_failed, ["a"]);
    }

    #[test]
    fn a_failure_the_pod_failure_policy_ignores_is_released_but_not_counted() {
        let job: Job = serde_json::from_value(json!({"spec": {
            "completions": 3, "parallelism": 3, "template": {},
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]},
        }}))
        .unwrap();
        let spec = JobSpec::of(&job);
        let mut evicted = pod("a", "Failed", true);
        evicted.status = Some(
            serde_json::from_value(json!({"phase": "Failed",
                "conditions": [{"type": "DisruptionTarget", "status": "True"}]}))
            .unwrap(),
        );
        let pods = vec![evicted, pod("b", "Failed", true)];
        let mut tally = Tally::default();
        let (strip, _) = tally.record(&pods, &spec, false, &HashSet::new());
        assert_eq!(strip.len(), 2, "both pods are released");
        assert_eq!(
            tally.uncounted_failed,
            ["b"],
            "only the counted failure is recorded"
        );
    }

    #[test]
    fn recording_stops_at_the_uncounted_cap() {
        let spec = spec(false);
        let pods: Vec<Pod> = (0..MAX_UNCOUNTED_PODS + 10)
            .map(|i| pod(&format!("u{i}"), "Succeeded", true))
            .collect();
        let mut tally = Tally::default();
        let (strip, full) = tally.record(&pods, &spec, false, &HashSet::new());
        assert!(full);
        assert_eq!(strip.len(), MAX_UNCOUNTED_PODS);
        assert_eq!(tally.uncounted(), MAX_UNCOUNTED_PODS);
    }
}
