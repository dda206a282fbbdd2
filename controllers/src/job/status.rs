//! A Job's status as the controller owns it, read from the Job and written back as one merge patch in
//! the shape kube-controller-manager writes: `ready`, `terminating` and `uncountedTerminatedPods`
//! always present (zero and `{}` included), `active`, `succeeded` and `failed` left out when zero,
//! and the Job's resourceVersion in the patch, so a write based on a stale Job fails with a conflict
//! instead of counting a pod twice.

use flotilla_sdk::k8s_openapi::api::batch::v1::{Job, JobCondition};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::indexes::Indexes;
use super::spec::JobSpec;
use super::tracking::Tally;

/// The status fields this controller writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// `startTime`.
    pub start_time: Option<Time>,
    /// `completionTime`.
    pub completion_time: Option<Time>,
    /// `active`.
    pub active: i32,
    /// `ready`; `None` until first written (a Job whose status lacks it gets it written, as upstream).
    pub ready: Option<i32>,
    /// `terminating`; `None` until first written.
    pub terminating: Option<i32>,
    /// `succeeded`, `failed`, `uncountedTerminatedPods`, `completedIndexes`.
    pub tally: Tally,
    /// Whether `uncountedTerminatedPods` is present at all.
    pub has_uncounted: bool,
    /// `conditions`.
    pub conditions: Vec<JobCondition>,
}

impl Status {
    /// The status `job` has now.
    pub fn of(job: &Job, spec: &JobSpec) -> Self {
        let Some(status) = job.status.as_ref() else {
            return Self {
                tally: Tally {
                    completed: spec.indexed().then(Indexes::default),
                    failed_indexes: spec.backoff_limit_per_index.map(|_| Indexes::default()),
                    ..Tally::default()
                },
                ..Self::default()
            };
        };
        let uncounted = status.uncounted_terminated_pods.as_ref();
        let list = |l: Option<&Vec<String>>| l.cloned().unwrap_or_default();
        Self {
            start_time: status.start_time.clone(),
            completion_time: status.completion_time.clone(),
            active: status.active.unwrap_or(0),
            ready: status.ready,
            terminating: status.terminating,
            tally: Tally {
                succeeded: status.succeeded.unwrap_or(0),
                failed: status.failed.unwrap_or(0),
                uncounted_succeeded: list(uncounted.and_then(|u| u.succeeded.as_ref())),
                uncounted_failed: list(uncounted.and_then(|u| u.failed.as_ref())),
                completed: spec.indexed().then(|| {
                    Indexes::parse(
                        status.completed_indexes.as_deref().unwrap_or_default(),
                        spec.index_bound(),
                    )
                }),
                failed_indexes: spec.backoff_limit_per_index.map(|_| {
                    Indexes::parse(
                        status.failed_indexes.as_deref().unwrap_or_default(),
                        spec.index_bound(),
                    )
                }),
            },
            has_uncounted: uncounted.is_some(),
            conditions: status.conditions.clone().unwrap_or_default(),
        }
    }

    /// The merge patch writing this status over a Job at `resource_version`.
    pub fn patch(&self, resource_version: &str) -> Value {
        let positive = |n: i32| if n > 0 { json!(n) } else { Value::Null };
        let uids = |l: &Vec<String>| {
            if l.is_empty() { Value::Null } else { json!(l) }
        };
        let completed = self
            .tally
            .completed
            .as_ref()
            .map(ToString::to_string)
            .filter(|s| !s.is_empty());
        json!({
            "metadata": {"resourceVersion": resource_version},
            "status": {
                "startTime": self.start_time,
                "completionTime": self.completion_time,
                "active": positive(self.active),
                "ready": self.ready.unwrap_or(0),
                "terminating": self.terminating.unwrap_or(0),
                "succeeded": positive(self.tally.succeeded),
                "failed": positive(self.tally.failed),
                "completedIndexes": completed,
                // Written, even empty, exactly when backoffLimitPerIndex is set, as upstream.
                "failedIndexes": self.tally.failed_indexes.as_ref().map(ToString::to_string),
                "uncountedTerminatedPods": {
                    "succeeded": uids(&self.tally.uncounted_succeeded),
                    "failed": uids(&self.tally.uncounted_failed),
                },
                "conditions": if self.conditions.is_empty() { Value::Null } else { json!(self.conditions) },
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn zero_counters_are_left_out_but_ready_terminating_and_uncounted_are_written() {
        let status = Status {
            active: 2,
            ready: Some(0),
            terminating: Some(0),
            has_uncounted: true,
            ..Status::default()
        };
        let patch = status.patch("42");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let s = &patch["status"];
        assert_eq!(s["active"], 2);
        assert_eq!(
            (s["ready"].clone(), s["terminating"].clone()),
            (json!(0), json!(0))
        );
        assert!(s["succeeded"].is_null() && s["failed"].is_null());
        assert_eq!(
            s["uncountedTerminatedPods"],
            json!({"succeeded": null, "failed": null})
        );
        assert!(s["conditions"].is_null() && s["completedIndexes"].is_null());
    }

    #[test]
    fn a_status_read_back_from_its_patch_is_the_same_status() {
        let spec = JobSpec::of(
            &serde_json::from_value(
                json!({"spec": {"completionMode": "Indexed", "completions": 5, "template": {}}}),
            )
            .unwrap(),
        );
        let mut status = Status {
            active: 1,
            ready: Some(1),
            terminating: Some(0),
            has_uncounted: true,
            tally: Tally {
                succeeded: 2,
                failed: 1,
                uncounted_failed: vec!["u".into()],
                completed: Some(Indexes::parse("0,3", 5)),
                ..Tally::default()
            },
            ..Status::default()
        };
        let mut job: Job = serde_json::from_value(json!({"spec": {"template": {}}})).unwrap();
        let mut written = status.patch("1")["status"].clone();
        // A merge patch's nulls mean "absent".
        if let Value::Object(map) = &mut written {
            map.retain(|_, v| !v.is_null());
        }
        job.status = Some(serde_json::from_value(written).unwrap());
        status.has_uncounted = true;
        assert_eq!(Status::of(&job, &spec), status);
    }
}
