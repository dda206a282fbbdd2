//! The status a replica controller writes: counts of its active pods, the observed generation and the
//! `ReplicaFailure` condition (upstream `calculateStatus`).

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::pods::{is_available, is_ready};

/// The condition type set while creating or deleting pods fails.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// Why pods could not be created or deleted, as the `ReplicaFailure` condition says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `FailedCreate` or `FailedDelete`.
    pub reason: String,
    /// The API's error.
    pub message: String,
}

/// The status fields this controller owns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Active pods.
    pub replicas: i32,
    /// Active pods whose labels include every template label.
    pub fully_labeled_replicas: i32,
    /// Active pods that are Ready.
    pub ready_replicas: i32,
    /// Active pods Ready for at least minReadySeconds.
    pub available_replicas: i32,
    /// The generation these counts were made for.
    pub observed_generation: Option<i64>,
    /// The `ReplicaFailure` condition, if set.
    pub failure: Option<Failure>,
}

/// What the status is computed from.
pub struct Observed<'a> {
    /// The owner's active pods.
    pub pods: &'a [Pod],
    /// The template's labels.
    pub template_labels: &'a BTreeMap<String, String>,
    /// `spec.minReadySeconds`.
    pub min_ready_seconds: i32,
    /// The owner's `metadata.generation`.
    pub generation: Option<i64>,
    /// The failure of this sync's creates or deletes.
    pub failure: Option<Failure>,
    /// The failure condition the owner has now.
    pub previous_failure: Option<Failure>,
    /// The time availability is judged at.
    pub now: Timestamp,
}

/// The status for `observed`. Like upstream, a failure already recorded is kept as it was (its time
/// and message stay those of the first failure) and a sync without failure clears it.
pub fn compute(observed: &Observed<'_>) -> ReplicaStatus {
    let count = |f: &dyn Fn(&Pod) -> bool| {
        i32::try_from(observed.pods.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX)
    };
    let fully_labeled = |pod: &Pod| {
        let labels = pod.metadata.labels.as_ref();
        observed
            .template_labels
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    };
    let failure = match (&observed.failure, &observed.previous_failure) {
        (Some(_), Some(previous)) => Some(previous.clone()),
        (failure, _) => failure.clone(),
    };
    ReplicaStatus {
        replicas: count(&|_| true),
        fully_labeled_replicas: count(&fully_labeled),
        ready_replicas: count(&is_ready),
        available_replicas: count(&|p| is_available(p, observed.min_ready_seconds, observed.now)),
        observed_generation: observed.generation,
        failure,
    }
}

/// The status an owner has now, read from its JSON (ReplicaSet and ReplicationController share the
/// shape).
pub fn current(owner: &Value) -> ReplicaStatus {
    let int = |field: &str| {
        owner
            .pointer(&format!("/status/{field}"))
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(0)
    };
    ReplicaStatus {
        replicas: int("replicas"),
        fully_labeled_replicas: int("fullyLabeledReplicas"),
        ready_replicas: int("readyReplicas"),
        available_replicas: int("availableReplicas"),
        observed_generation: owner
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64),
        failure: conditions(owner)
            .iter()
            .find(|c| c["type"] == REPLICA_FAILURE && c["status"] == "True")
            .map(|c| Failure {
                reason: c["reason"].as_str().unwrap_or_default().to_owned(),
                message: c["message"].as_str().unwrap_or_default().to_owned(),
            }),
    }
}

/// The merge patch that writes `status` to `owner`, keeping its other conditions and the time of a
/// failure condition that stays.
pub fn patch(owner: &Value, status: &ReplicaStatus, now: Timestamp) -> Value {
    let previous = current(owner).failure;
    let mut conditions: Vec<Value> = conditions(owner)
        .into_iter()
        .filter(|c| c["type"] != REPLICA_FAILURE || previous.as_ref() == status.failure.as_ref())
        .collect();
    if let Some(failure) = &status.failure
        && previous.as_ref() != Some(failure)
    {
        conditions.push(json!({
            "type": REPLICA_FAILURE,
            "status": "True",
            "lastTransitionTime": now.to_string(),
            "reason": failure.reason,
            "message": failure.message,
        }));
    }
    json!({
        "status": {
            "replicas": status.replicas,
            "fullyLabeledReplicas": status.fully_labeled_replicas,
            "readyReplicas": status.ready_replicas,
            "availableReplicas": status.available_replicas,
            "observedGeneration": status.observed_generation,
            "conditions": if conditions.is_empty() { Value::Null } else { Value::Array(conditions) },
        }
    })
}

fn conditions(owner: &Value) -> Vec<Value> {
    owner
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn pod(labels: &[(&str, &str)], ready_at: Option<i64>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready_at.is_some() { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(at(ready_at.unwrap_or(0)))),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        pod
    }

    fn failure(message: &str) -> Failure {
        Failure {
            reason: "FailedCreate".into(),
            message: message.into(),
        }
    }

    #[test]
    fn counts_replicas_fully_labeled_ready_and_available_pods() {
        let template = BTreeMap::from([
            ("app".to_owned(), "web".to_owned()),
            ("tier".to_owned(), "front".to_owned()),
        ]);
        let pods = [
            pod(&[("app", "web"), ("tier", "front")], Some(100)),
            pod(&[("app", "web")], Some(195)),
            pod(&[("app", "web"), ("tier", "front")], None),
        ];
        let status = compute(&Observed {
            pods: &pods,
            template_labels: &template,
            min_ready_seconds: 10,
            generation: Some(3),
            failure: None,
            previous_failure: None,
            now: at(200),
        });
        assert_eq!(
            status,
            ReplicaStatus {
                replicas: 3,
                fully_labeled_replicas: 2,
                ready_replicas: 2,
                available_replicas: 1,
                observed_generation: Some(3),
                failure: None,
            }
        );
    }

    #[test]
    fn a_recorded_failure_is_kept_while_failing_and_cleared_after_success() {
        let template = BTreeMap::new();
        let observed = |failure, previous| Observed {
            pods: &[],
            template_labels: &template,
            min_ready_seconds: 0,
            generation: None,
            failure,
            previous_failure: previous,
            now: at(0),
        };
        let kept = compute(&observed(Some(failure("new")), Some(failure("first"))));
        assert_eq!(kept.failure, Some(failure("first")));
        let set = compute(&observed(Some(failure("new")), None));
        assert_eq!(set.failure, Some(failure("new")));
        let cleared = compute(&observed(None, Some(failure("first"))));
        assert_eq!(cleared.failure, None);
    }

    #[test]
    fn the_status_read_back_from_a_patch_equals_the_status_written() {
        let owner = json!({"status": {"conditions": [{"type": "Other", "status": "True"}]}});
        let status = ReplicaStatus {
            replicas: 2,
            fully_labeled_replicas: 2,
            ready_replicas: 1,
            available_replicas: 1,
            observed_generation: Some(4),
            failure: Some(failure("quota exceeded")),
        };
        let patched = patch(&owner, &status, at(5));
        assert_eq!(current(&patched), status);
        let types: Vec<&Value> = patched["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["type"])
            .collect();
        assert_eq!(types, ["Other", REPLICA_FAILURE]);
    }

    #[test]
    fn clearing_the_failure_removes_only_its_condition() {
        let owner = json!({"status": {"conditions": [
            {"type": REPLICA_FAILURE, "status": "True", "reason": "FailedCreate", "message": "x"}
        ]}});
        let patched = patch(&owner, &ReplicaStatus::default(), at(5));
        assert_eq!(patched["status"]["conditions"], Value::Null);
        assert_eq!(current(&patched).failure, None);
    }
}
