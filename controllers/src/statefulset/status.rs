//! A StatefulSet's status (upstream `computeReplicaStatus`, `completeRollingUpdate`,
//! `inconsistentStatus`): pod counts by readiness, availability and revision, the revisions, the
//! collision count and the generation observed, and the merge patch that writes it.

use flotilla_sdk::k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::pods::{is_available, is_created, is_running_and_ready, is_terminating, revision};

/// The status fields this controller owns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// `metadata.generation` of the set this status describes.
    pub observed_generation: i64,
    /// Pods created (whatever their state).
    pub replicas: i32,
    /// Pods Running and Ready.
    pub ready_replicas: i32,
    /// Of those, ready for `minReadySeconds`.
    pub available_replicas: i32,
    /// Pods not being deleted at the current revision.
    pub current_replicas: i32,
    /// Pods not being deleted at the update revision.
    pub updated_replicas: i32,
    /// The revision of the pods before the update in progress.
    pub current_revision: String,
    /// The revision the set's template makes.
    pub update_revision: String,
    /// Name collisions met making revisions.
    pub collision_count: i32,
}

impl Status {
    /// The status as the set carries it.
    pub fn of(set: &StatefulSet) -> Self {
        let Some(s) = set.status.as_ref() else {
            return Self::default();
        };
        from_api(s)
    }

    /// Counts `pods` (those in range and those condemned, before this sync's writes) against the
    /// revisions (upstream `updateStatus`).
    pub fn count(&mut self, pods: &[&Pod], min_ready_seconds: i32, now: Timestamp) {
        self.replicas = 0;
        self.ready_replicas = 0;
        self.available_replicas = 0;
        self.current_replicas = 0;
        self.updated_replicas = 0;
        for pod in pods {
            let created = is_created(pod);
            if created {
                self.replicas += 1;
            }
            if is_running_and_ready(pod) {
                self.ready_replicas += 1;
                if is_available(pod, min_ready_seconds, now) {
                    self.available_replicas += 1;
                }
            }
            if created && !is_terminating(pod) {
                let rev = revision(pod);
                if rev == self.current_revision {
                    self.current_replicas += 1;
                }
                if rev == self.update_revision {
                    self.updated_replicas += 1;
                }
            }
        }
    }

    /// Marks a finished rolling update: every wanted pod ready at the update revision makes the update
    /// revision current (upstream `completeRollingUpdate`).
    pub fn complete_rolling_update(&mut self, rolling: bool, replicas: i32) {
        if rolling
            && self.updated_replicas == replicas
            && self.ready_replicas == replicas
            && self.replicas == replicas
        {
            self.current_replicas = self.updated_replicas;
            self.current_revision = self.update_revision.clone();
        }
    }

    /// The merge patch of `.status` that writes this status.
    pub fn patch(&self) -> Value {
        json!({"status": {
            "observedGeneration": self.observed_generation,
            "replicas": self.replicas,
            "readyReplicas": self.ready_replicas,
            "availableReplicas": self.available_replicas,
            "currentReplicas": self.current_replicas,
            "updatedReplicas": self.updated_replicas,
            "currentRevision": self.current_revision,
            "updateRevision": self.update_revision,
            "collisionCount": self.collision_count,
        }})
    }
}

fn from_api(s: &StatefulSetStatus) -> Status {
    Status {
        observed_generation: s.observed_generation.unwrap_or(0),
        replicas: s.replicas,
        ready_replicas: s.ready_replicas.unwrap_or(0),
        available_replicas: s.available_replicas.unwrap_or(0),
        current_replicas: s.current_replicas.unwrap_or(0),
        updated_replicas: s.updated_replicas.unwrap_or(0),
        current_revision: s.current_revision.clone().unwrap_or_default(),
        update_revision: s.update_revision.clone().unwrap_or_default(),
        collision_count: s.collision_count.unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use flotilla_sdk::k8s_openapi::jiff::SignedDuration;

    use super::super::names::REVISION_LABEL;
    use super::*;

    fn pod(phase: &str, ready: bool, rev: &str, deleting: bool) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.labels = Some([(REVISION_LABEL.to_owned(), rev.to_owned())].into());
        if deleting {
            pod.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        }
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(Timestamp::UNIX_EPOCH)),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        pod
    }

    #[test]
    fn a_terminating_pod_counts_as_a_ready_replica_but_at_no_revision() {
        // The fixture's web-2 while it terminates: replicas 3, ready 3, current/updated 2.
        let pods = [
            pod("Running", true, "r1", false),
            pod("Running", true, "r1", false),
            pod("Running", true, "r1", true),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let mut status = Status {
            current_revision: "r1".into(),
            update_revision: "r1".into(),
            ..Status::default()
        };
        status.count(&refs, 0, Timestamp::UNIX_EPOCH);
        assert_eq!(
            (
                status.replicas,
                status.ready_replicas,
                status.available_replicas
            ),
            (3, 3, 3)
        );
        assert_eq!((status.current_replicas, status.updated_replicas), (2, 2));
    }

    #[test]
    fn availability_counts_only_pods_ready_for_min_ready_seconds() {
        let pods = [
            pod("Running", true, "r1", false),
            pod("Pending", false, "r1", false),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let mut status = Status::default();
        status.count(
            &refs,
            10,
            Timestamp::UNIX_EPOCH + SignedDuration::from_secs(5),
        );
        assert_eq!(
            (
                status.replicas,
                status.ready_replicas,
                status.available_replicas
            ),
            (2, 1, 0)
        );
        status.count(
            &refs,
            10,
            Timestamp::UNIX_EPOCH + SignedDuration::from_secs(10),
        );
        assert_eq!(status.available_replicas, 1);
    }

    #[test]
    fn a_finished_rolling_update_makes_the_update_revision_current() {
        let mut status = Status {
            replicas: 2,
            ready_replicas: 2,
            updated_replicas: 2,
            current_replicas: 0,
            current_revision: "r1".into(),
            update_revision: "r2".into(),
            ..Status::default()
        };
        let mut on_delete = status.clone();
        on_delete.complete_rolling_update(false, 2);
        assert_eq!(on_delete.current_revision, "r1");
        status.complete_rolling_update(true, 3);
        assert_eq!(status.current_revision, "r1", "one pod is still missing");
        status.complete_rolling_update(true, 2);
        assert_eq!(
            (status.current_revision.as_str(), status.current_replicas),
            ("r2", 2)
        );
    }
}
