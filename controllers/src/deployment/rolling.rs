//! The arithmetic of a rolling update (upstream `rolling.go` and `NewRSNewReplicas`): how far the new
//! ReplicaSet may grow within `replicas + maxSurge` pods, and how far the old ones may shrink while
//! `replicas - maxUnavailable` pods stay available.
//!
//! Upstream bounds both by the ReplicaSets' sizes and statuses as they are, so a ReplicaSet whose
//! controller has not yet acted on a scale-down briefly lets the pods exceed the surge (old pods still
//! running beside new ones) or lets its stale available count justify a second scale-down. Here the
//! surge is counted on [`pods_at_most`] and availability on [`available_at_most`], so both bounds hold
//! on the pods themselves at every moment; a rollout waits for the ReplicaSet controller instead.

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use flotilla_sdk::kube::ResourceExt;

use super::replica_sets::{available_at_most, by_creation, pods_at_most, size, total_size};
use super::spec;

/// The size the new ReplicaSet may have now: for RollingUpdate it grows toward `spec.replicas` as far
/// as `replicas + maxSurge` pods allow; for Recreate it is `spec.replicas` at once.
pub fn new_replica_set_size(d: &Deployment, all: &[&ReplicaSet], new: &ReplicaSet) -> i32 {
    let desired = spec::replicas(d);
    if !spec::is_rolling_update(d) {
        return desired;
    }
    let max_total = desired + spec::max_surge(d);
    let current: i32 = all.iter().map(|rs| pods_at_most(rs)).sum();
    if current >= max_total {
        return size(new);
    }
    let scale_up = (max_total - current).min(desired - size(new));
    size(new) + scale_up.max(0)
}

/// The new size of the new ReplicaSet, `None` when it stays (upstream `reconcileNewReplicaSet`).
pub fn reconcile_new(d: &Deployment, all: &[&ReplicaSet], new: &ReplicaSet) -> Option<i32> {
    let desired = spec::replicas(d);
    let current = size(new);
    let target = if current >= desired {
        desired
    } else {
        new_replica_set_size(d, all, new)
    };
    (target != current).then_some(target)
}

/// The old ReplicaSets to shrink and their new sizes (upstream `reconcileOldReplicaSets`): first the
/// pods that are not available anyway (they cost no availability), then as many available ones as
/// leave `replicas - maxUnavailable` available, oldest ReplicaSet first.
pub fn reconcile_old(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: &ReplicaSet,
    olds: &[&ReplicaSet],
) -> Vec<(String, i32)> {
    if total_size(olds.iter().copied()) == 0 {
        return Vec::new();
    }
    let min_available = spec::replicas(d) - spec::max_unavailable(d);
    let new_unavailable = size(new) - available_at_most(new);
    let max_scaled_down = total_size(all.iter().copied()) - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Vec::new();
    }
    let mut oldest_first: Vec<&ReplicaSet> = olds.to_vec();
    oldest_first.sort_by(|a, b| by_creation(a, b));
    let mut sizes: BTreeMap<String, i32> = BTreeMap::new();
    let size_of = |sizes: &BTreeMap<String, i32>, rs: &ReplicaSet| {
        sizes
            .get(&rs.name_any())
            .copied()
            .unwrap_or_else(|| size(rs))
    };

    // Unhealthy replicas first: removing them costs no availability and unblocks the rollout.
    let mut cleaned = 0;
    for rs in &oldest_first {
        if cleaned >= max_scaled_down {
            break;
        }
        let unhealthy = size(rs) - available_at_most(rs);
        if size(rs) == 0 || unhealthy == 0 {
            continue;
        }
        let n = (max_scaled_down - cleaned).min(unhealthy);
        sizes.insert(rs.name_any(), size(rs) - n);
        cleaned += n;
    }

    // Then available replicas, as far as availability allows.
    let available: i32 = oldest_first
        .iter()
        .map(|rs| available_at_most(rs).min(size_of(&sizes, rs)))
        .sum::<i32>()
        + available_at_most(new);
    if available > min_available {
        let to_scale_down = available - min_available;
        let mut scaled = 0;
        for rs in &oldest_first {
            if scaled >= to_scale_down {
                break;
            }
            let current = size_of(&sizes, rs);
            if current == 0 {
                continue;
            }
            let n = current.min(to_scale_down - scaled);
            sizes.insert(rs.name_any(), current - n);
            scaled += n;
        }
    }
    oldest_first
        .iter()
        .filter_map(|rs| {
            let target = *sizes.get(&rs.name_any())?;
            (target != size(rs)).then(|| (rs.name_any(), target))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::replica_sets::set_size;
    use super::super::replica_sets::tests::rs;
    use super::super::spec::tests::rolling;
    use super::*;

    #[test]
    fn the_new_replicaset_grows_up_to_the_surge_and_never_past_the_replicas() {
        // 10 replicas, surge 3 (25% rounded up): 10 old pods leave room for 3 new.
        let d = rolling(10, json!("25%"), json!("25%"));
        let old = rs("old", 1, 10, 10);
        let new = rs("new", 2, 0, 0);
        assert_eq!(reconcile_new(&d, &[&old, &new], &new), Some(3));
        // The old one shrank to 2: the new may take the rest, but no more than the replicas.
        let mut old = rs("old", 1, 2, 2);
        old.status.as_mut().unwrap().replicas = 2;
        let new = rs("new", 2, 3, 3);
        assert_eq!(reconcile_new(&d, &[&old, &new], &new), Some(10));
        // A new ReplicaSet above the replicas (after a scale-down) shrinks to them.
        let big = rs("new", 2, 12, 12);
        assert_eq!(reconcile_new(&d, &[&big], &big), Some(10));
    }

    #[test]
    fn pods_an_old_replicaset_has_not_yet_removed_still_count_against_the_surge() {
        let d = rolling(4, json!(1), json!(1));
        let mut old = rs("old", 1, 4, 4);
        set_size(&mut old, 2);
        let new = rs("new", 2, 1, 0);
        // Sizes say 3 of 5; the old ReplicaSet still runs 4 pods.
        assert_eq!(reconcile_new(&d, &[&old, &new], &new), None);
    }

    #[test]
    fn recreate_sizes_the_new_replicaset_at_once() {
        let mut d = rolling(5, json!(1), json!(1));
        if let Some(s) = d.spec.as_mut().and_then(|s| s.strategy.as_mut()) {
            s.type_ = Some(super::super::spec::RECREATE.into());
        }
        let new = rs("new", 2, 0, 0);
        assert_eq!(new_replica_set_size(&d, &[&new], &new), 5);
    }

    #[test]
    fn old_replicasets_shrink_only_as_far_as_availability_allows() {
        // 10 replicas, surge 3, unavailable 2: min available 8. 10 old + 3 new, none new available.
        let d = rolling(10, json!("25%"), json!("25%"));
        let old = rs("old", 1, 10, 10);
        let new = rs("new", 2, 3, 0);
        // 13 - 8 - 3 unavailable new = 2.
        assert_eq!(
            reconcile_old(&d, &[&old, &new], &new, &[&old]),
            [("old".into(), 8)]
        );
        // Once the 3 new are available, 8 + 3 available - 8 = 3 may go.
        let new = rs("new", 2, 3, 3);
        let old = rs("old", 1, 8, 8);
        assert_eq!(
            reconcile_old(&d, &[&old, &new], &new, &[&old]),
            [("old".into(), 5)]
        );
    }

    #[test]
    fn unhealthy_old_replicas_go_first_and_oldest_replicasets_before_newer() {
        // 4 replicas, surge 1, unavailable 0: min available 4.
        let d = rolling(4, json!(1), json!(0));
        let oldest = rs("oldest", 1, 2, 2);
        let sick = rs("sick", 2, 2, 0);
        let new = rs("new", 3, 1, 1);
        let all = [&oldest, &sick, &new];
        // 5 - 4 - 0 = 1 may go: one of sick's unavailable pods. Only 3 are available (below the
        // minimum of 4), so no available pod goes.
        assert_eq!(
            reconcile_old(&d, &all, &new, &[&oldest, &sick]),
            [("sick".into(), 1)]
        );
        let healthy = rs("healthy", 2, 2, 2);
        let new = rs("new", 3, 2, 2);
        let all = [&oldest, &healthy, &new];
        // 6 available, min 4: two go, from the oldest.
        assert_eq!(
            reconcile_old(&d, &all, &new, &[&oldest, &healthy]),
            [("oldest".into(), 0)]
        );
    }

    #[test]
    fn a_stale_available_count_does_not_justify_a_second_scale_down() {
        // min available 4. The old ReplicaSet was scaled 5 -> 4 but its status still says 5 available.
        let d = rolling(5, json!(2), json!(1));
        let mut old = rs("old", 1, 5, 5);
        set_size(&mut old, 4);
        let new = rs("new", 2, 3, 3);
        // Counting 5 + 3 available would allow 4 to go; only 4 + 3 are there once 'old' acts.
        assert_eq!(
            reconcile_old(&d, &[&old, &new], &new, &[&old]),
            [("old".into(), 1)]
        );
    }
}
