//! Which old ReplicaSets go when there are more than `revisionHistoryLimit` (upstream
//! `cleanupDeployment`): the lowest revisions first, and only those with no pods left.

use flotilla_sdk::k8s_openapi::api::apps::v1::ReplicaSet;

use super::replica_sets::{actual, by_revision, size};

/// The old ReplicaSets to delete so that at most `limit` remain; `None` keeps all. A ReplicaSet still
/// sized above 0, still running pods, being deleted, or whose status is behind its spec is skipped
/// (it may hold pods its status does not show yet), so fewer may go than the excess.
pub fn to_delete<'a>(olds: &[&'a ReplicaSet], limit: Option<i32>) -> Vec<&'a ReplicaSet> {
    let Some(limit) = limit else {
        return Vec::new();
    };
    let mut alive: Vec<&ReplicaSet> = olds
        .iter()
        .copied()
        .filter(|rs| rs.metadata.deletion_timestamp.is_none())
        .collect();
    let excess = alive
        .len()
        .saturating_sub(usize::try_from(limit).unwrap_or(0));
    alive.sort_by(|a, b| by_revision(a, b));
    alive
        .into_iter()
        .take(excess)
        .filter(|rs| {
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation);
            actual(rs) == 0 && size(rs) == 0 && rs.metadata.generation <= observed
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::kube::ResourceExt;

    use super::super::replica_sets::tests::{rs, with_revision};
    use super::*;

    fn empty(name: &str, revision: i64) -> ReplicaSet {
        with_revision(rs(name, revision, 0, 0), revision)
    }

    fn names(rss: &[&ReplicaSet]) -> Vec<String> {
        rss.iter().map(|r| r.name_any()).collect()
    }

    #[test]
    fn the_lowest_revisions_beyond_the_limit_go() {
        let (a, b, c, d) = (empty("a", 3), empty("b", 1), empty("c", 4), empty("d", 2));
        assert_eq!(names(&to_delete(&[&a, &b, &c, &d], Some(2))), ["b", "d"]);
        assert_eq!(
            names(&to_delete(&[&a, &b, &c, &d], Some(0))),
            ["b", "d", "a", "c"]
        );
        assert!(to_delete(&[&a, &b], Some(2)).is_empty());
        assert!(to_delete(&[&a, &b], None).is_empty());
    }

    #[test]
    fn replicasets_with_pods_or_unobserved_changes_are_kept_and_not_replaced_by_others() {
        let running = with_revision(rs("running", 1, 1, 1), 1);
        let mut unobserved = empty("unobserved", 2);
        unobserved.metadata.generation = Some(3);
        let newest = empty("newest", 3);
        // Two over the limit of 1: both candidates are skipped, the newest stays.
        assert!(to_delete(&[&running, &unobserved, &newest], Some(1)).is_empty());
    }
}
