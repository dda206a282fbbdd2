//! The annotations a Deployment puts on its new ReplicaSet (upstream `SetNewReplicaSetAnnotations`):
//! its own annotations copied, the revision, the history of revisions a re-used ReplicaSet had, and the
//! replicas annotations proportional scaling reads.

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use flotilla_sdk::kube::ResourceExt;

use super::replica_sets::{
    DESIRED_REPLICAS, MAX_REPLICAS, REVISION, REVISION_HISTORY, set_replicas_annotations,
};

/// The longest revision history kept on a ReplicaSet, in characters (upstream's default).
const MAX_REVISION_HISTORY_CHARS: usize = 2000;

/// Annotations of the Deployment that are not copied to its ReplicaSets: the controller's own and
/// kubectl's record of the applied configuration.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// Brings the annotations of `rs` (the Deployment's new ReplicaSet, `exists` when already created) up
/// to date for `new_revision`; whether anything changed. A ReplicaSet only ever moves to a higher
/// revision; one re-used by a rollback keeps its former revisions in the revision history.
/// `replicas` is `(spec.replicas, spec.replicas + maxSurge)`, written on a ReplicaSet about to be
/// created.
pub fn set_new_replica_set_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
    replicas: (i32, i32),
) -> bool {
    let mut changed = false;
    for (key, value) in d.annotations() {
        if NOT_COPIED.contains(&key.as_str()) || rs.annotations().get(key) == Some(value) {
            continue;
        }
        rs.annotations_mut().insert(key.clone(), value.clone());
        changed = true;
    }
    let old = rs.annotations().get(REVISION).cloned();
    let old_revision = match old.as_deref().map(str::parse::<i64>) {
        None => 0,
        Some(Ok(n)) => n,
        // Someone wrote garbage: leave the revision alone rather than guess.
        Some(Err(_)) => return changed,
    };
    if old_revision < new_revision {
        rs.annotations_mut()
            .insert(REVISION.into(), new_revision.to_string());
        changed = true;
        if let Some(old) = old {
            push_history(rs, &old);
        }
    }
    if !exists && set_replicas_annotations(rs, replicas.0, replicas.1) {
        changed = true;
    }
    changed
}

/// Appends `old` to the revision history, dropping the oldest entries past the length limit.
fn push_history(rs: &mut ReplicaSet, old: &str) {
    let history = rs
        .annotations()
        .get(REVISION_HISTORY)
        .cloned()
        .unwrap_or_default();
    let mut entries: Vec<&str> = history.split(',').filter(|e| !e.is_empty()).collect();
    entries.push(old);
    while entries.join(",").len() > MAX_REVISION_HISTORY_CHARS && entries.len() > 1 {
        entries.remove(0);
    }
    let joined = entries.join(",");
    rs.annotations_mut().insert(REVISION_HISTORY.into(), joined);
}

/// Sets the Deployment's revision annotation; whether it changed.
pub fn set_deployment_revision(d: &mut Deployment, revision: &str) -> bool {
    if d.annotations().get(REVISION).map(String::as_str) == Some(revision) {
        return false;
    }
    d.annotations_mut().insert(REVISION.into(), revision.into());
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::replica_sets::tests::{rs, with_revision};
    use super::super::replica_sets::{int_annotation, revision};
    use super::super::spec::tests::rolling;
    use super::*;

    #[test]
    fn a_new_replicaset_gets_the_revision_the_replicas_annotations_and_the_deployments_annotations()
    {
        let mut d = rolling(4, json!(1), json!(0));
        d.annotations_mut().insert("team".into(), "a".into());
        d.annotations_mut().insert(REVISION.into(), "9".into());
        let mut new = rs("new", 1, 0, 0);
        assert!(set_new_replica_set_annotations(
            &d,
            &mut new,
            3,
            false,
            (4, 5)
        ));
        assert_eq!(revision(&new), 3);
        assert_eq!(new.annotations()["team"], "a");
        assert_eq!(int_annotation(&new, DESIRED_REPLICAS), Some(4));
        assert_eq!(int_annotation(&new, MAX_REPLICAS), Some(5));
        assert!(!new.annotations().contains_key(REVISION_HISTORY));
        // Nothing left to change.
        assert!(!set_new_replica_set_annotations(
            &d,
            &mut new,
            3,
            true,
            (4, 5)
        ));
    }

    #[test]
    fn a_reused_replicaset_takes_the_new_revision_and_remembers_its_old_ones() {
        let d = rolling(4, json!(1), json!(0));
        let mut reused = with_revision(rs("old", 1, 0, 0), 1);
        assert!(set_new_replica_set_annotations(
            &d,
            &mut reused,
            3,
            true,
            (4, 5)
        ));
        assert_eq!(revision(&reused), 3);
        assert_eq!(reused.annotations()[REVISION_HISTORY], "1");
        assert!(set_new_replica_set_annotations(
            &d,
            &mut reused,
            5,
            true,
            (4, 5)
        ));
        assert_eq!(reused.annotations()[REVISION_HISTORY], "1,3");
        // An existing ReplicaSet's replicas annotations are proportional scaling's business.
        assert_eq!(int_annotation(&reused, DESIRED_REPLICAS), None);
    }

    #[test]
    fn a_revision_never_goes_down() {
        let d = rolling(1, json!(1), json!(0));
        let mut newer = with_revision(rs("r", 1, 0, 0), 7);
        assert!(!set_new_replica_set_annotations(
            &d,
            &mut newer,
            4,
            true,
            (1, 2)
        ));
        assert_eq!(revision(&newer), 7);
    }

    #[test]
    fn the_deployment_revision_is_written_only_when_it_differs() {
        let mut d = rolling(1, json!(1), json!(0));
        assert!(set_deployment_revision(&mut d, "2"));
        assert!(!set_deployment_revision(&mut d, "2"));
        assert_eq!(d.annotations()[REVISION], "2");
    }
}
