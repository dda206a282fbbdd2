//! What the controller reads from its ReplicaSets: sizes, counts, revisions, the replicas annotations
//! and the orders upstream sorts them in (`controller.ReplicaSetsBy*`, `deploymentutil.Get*Count*`).

use std::cmp::Ordering;

use flotilla_sdk::k8s_openapi::api::apps::v1::ReplicaSet;
use flotilla_sdk::kube::ResourceExt;

/// The revision of a ReplicaSet's template, also copied to the Deployment.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// The revisions a re-used ReplicaSet had before, comma-separated.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// `spec.replicas` of the Deployment when it last sized this ReplicaSet.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas + maxSurge` of the Deployment when it last sized this ReplicaSet.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// `spec.replicas`, 1 when unset (the API's default).
pub fn size(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// Sets `spec.replicas`.
pub fn set_size(rs: &mut ReplicaSet, replicas: i32) {
    rs.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
}

/// `status.replicas`: its active pods, as its controller last counted them.
pub fn actual(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

/// `status.readyReplicas`.
pub fn ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// `status.availableReplicas`.
pub fn available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// `status.terminatingReplicas`, when its controller reports it.
pub fn terminating(rs: &ReplicaSet) -> Option<i32> {
    rs.status.as_ref().and_then(|s| s.terminating_replicas)
}

/// At most how many pods the ReplicaSet runs now: its size, or more while its controller has not yet
/// seen the deletions of a scale-down.
pub fn pods_at_most(rs: &ReplicaSet) -> i32 {
    size(rs).max(actual(rs))
}

/// At most how many of its pods are available once its controller acts on its size: a scale-down
/// removes unavailable pods first, so a status that has not caught up with a scale-down overstates.
pub fn available_at_most(rs: &ReplicaSet) -> i32 {
    available(rs).min(size(rs))
}

/// A ReplicaSet with a size above 0 (upstream `FilterActiveReplicaSets`).
pub fn is_active(rs: &ReplicaSet) -> bool {
    size(rs) > 0
}

/// The sum of the sizes.
pub fn total_size<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    rss.into_iter().map(size).sum()
}

/// The revision annotation as a number; 0 when missing or malformed (as upstream's `Revision`).
pub fn revision(rs: &ReplicaSet) -> i64 {
    rs.annotations()
        .get(REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The highest revision among `rss` (0 for none).
pub fn max_revision<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    rss.into_iter().map(revision).max().unwrap_or(0)
}

/// An integer annotation.
pub fn int_annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.annotations().get(key).and_then(|v| v.parse().ok())
}

/// Whether the desired/max replicas annotations differ from `desired` and `max`.
pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    int_annotation(rs, DESIRED_REPLICAS) != Some(desired)
        || int_annotation(rs, MAX_REPLICAS) != Some(max)
}

/// Sets the desired/max replicas annotations; whether anything changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    if !replicas_annotations_need_update(rs, desired, max) {
        return false;
    }
    let annotations = rs.annotations_mut();
    annotations.insert(DESIRED_REPLICAS.into(), desired.to_string());
    annotations.insert(MAX_REPLICAS.into(), max.to_string());
    true
}

/// Older first, by creation time then name (upstream `ReplicaSetsByCreationTimestamp`).
pub fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    let created = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
    created(a)
        .cmp(&created(b))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Larger first, newer first among equals (upstream `ReplicaSetsBySizeNewer`, used to scale up).
pub fn by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    size(b).cmp(&size(a)).then_with(|| by_creation(b, a))
}

/// Larger first, older first among equals (upstream `ReplicaSetsBySizeOlder`, used to scale down).
pub fn by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    size(b).cmp(&size(a)).then_with(|| by_creation(a, b))
}

/// Lower revision first, then older (upstream `ReplicaSetsByRevision`).
pub fn by_revision(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    revision(a)
        .cmp(&revision(b))
        .then_with(|| by_creation(a, b))
}

#[cfg(test)]
pub(crate) mod tests {
    use flotilla_sdk::k8s_openapi::api::apps::v1::{ReplicaSetSpec, ReplicaSetStatus};
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use flotilla_sdk::k8s_openapi::jiff::Timestamp;

    use super::*;

    /// A ReplicaSet named `name`, created at second `created`, of `size` with `available` pods.
    pub(crate) fn rs(name: &str, created: i64, size: i32, available: i32) -> ReplicaSet {
        let mut rs = ReplicaSet {
            spec: Some(ReplicaSetSpec {
                replicas: Some(size),
                ..ReplicaSetSpec::default()
            }),
            status: Some(ReplicaSetStatus {
                replicas: size,
                ready_replicas: Some(available),
                available_replicas: Some(available),
                ..ReplicaSetStatus::default()
            }),
            ..ReplicaSet::default()
        };
        rs.metadata.name = Some(name.into());
        rs.metadata.uid = Some(format!("{name}-uid"));
        rs.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
        rs
    }

    pub(crate) fn with_revision(mut rs: ReplicaSet, revision: i64) -> ReplicaSet {
        rs.annotations_mut()
            .insert(REVISION.into(), revision.to_string());
        rs
    }

    #[test]
    fn sorting_by_size_breaks_ties_by_age_in_opposite_directions() {
        let (old, new, big) = (rs("old", 1, 2, 2), rs("new", 2, 2, 2), rs("big", 3, 5, 5));
        let mut up = [&old, &new, &big];
        up.sort_by(|a, b| by_size_newer(a, b));
        assert_eq!(
            up.iter().map(|r| r.name_any()).collect::<Vec<_>>(),
            ["big", "new", "old"]
        );
        let mut down = [&new, &old, &big];
        down.sort_by(|a, b| by_size_older(a, b));
        assert_eq!(
            down.iter().map(|r| r.name_any()).collect::<Vec<_>>(),
            ["big", "old", "new"]
        );
    }

    #[test]
    fn malformed_revisions_count_as_zero_and_the_max_wins() {
        let mut bad = rs("bad", 1, 0, 0);
        bad.annotations_mut().insert(REVISION.into(), "x".into());
        let rss = [
            with_revision(rs("a", 1, 0, 0), 3),
            bad,
            with_revision(rs("b", 2, 0, 0), 7),
        ];
        assert_eq!(revision(&rss[1]), 0);
        assert_eq!(max_revision(&rss), 7);
        assert_eq!(max_revision(&[]), 0);
    }

    #[test]
    fn a_scale_down_not_yet_acted_on_bounds_pods_by_status_and_availability_by_size() {
        let mut old = rs("old", 1, 5, 5);
        set_size(&mut old, 3);
        assert_eq!(pods_at_most(&old), 5);
        assert_eq!(available_at_most(&old), 3);
    }
}
