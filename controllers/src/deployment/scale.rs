//! Scaling a Deployment while a rollout is under way (upstream `scale` in `sync.go`): a single active
//! ReplicaSet takes the new size; otherwise the room (`replicas + maxSurge`, minus what runs) is shared
//! among the active ReplicaSets in proportion to their size, read against the `max-replicas`
//! annotation each got at its last sizing, and the rounding leftover goes to the largest.

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use flotilla_sdk::kube::ResourceExt;

use super::replica_sets::{
    DESIRED_REPLICAS, MAX_REPLICAS, available, by_creation, by_size_newer, by_size_older,
    int_annotation, is_active, size, total_size,
};
use super::spec;

/// One ReplicaSet to size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resize {
    /// The ReplicaSet's name.
    pub name: String,
    /// Its new `spec.replicas`.
    pub replicas: i32,
    /// Whether the replicas annotations are written even when the size stays (proportional scaling
    /// records the deployment size it scaled for on every ReplicaSet).
    pub always: bool,
}

/// Whether the new ReplicaSet runs the whole Deployment: its size, its desired-replicas annotation and
/// its available pods all equal `spec.replicas` (upstream `IsSaturated`).
pub fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else { return false };
    let desired = spec::replicas(d);
    size(rs) == desired
        && int_annotation(rs, DESIRED_REPLICAS) == Some(desired)
        && available(rs) == desired
}

/// The only active ReplicaSet; with none active, the new one or else the newest old one; `None` with
/// several active (upstream `FindActiveOrLatest`).
pub fn active_or_latest<'a>(
    new: Option<&'a ReplicaSet>,
    olds: &[&'a ReplicaSet],
) -> Option<&'a ReplicaSet> {
    if new.is_none() && olds.is_empty() {
        return None;
    }
    let mut newest_first: Vec<&ReplicaSet> = olds.to_vec();
    newest_first.sort_by(|a, b| by_creation(b, a));
    let active: Vec<&ReplicaSet> = newest_first
        .iter()
        .copied()
        .chain(new)
        .filter(|rs| is_active(rs))
        .collect();
    match active.as_slice() {
        [] => new.or_else(|| newest_first.first().copied()),
        [only] => Some(only),
        _ => None,
    }
}

/// The sizes `d` wants for its ReplicaSets when its `spec.replicas` changed; empty when nothing is to
/// do.
pub fn plan(d: &Deployment, new: Option<&ReplicaSet>, olds: &[&ReplicaSet]) -> Vec<Resize> {
    let desired = spec::replicas(d);
    if let Some(rs) = active_or_latest(new, olds) {
        if size(rs) == desired {
            return Vec::new();
        }
        return vec![Resize {
            name: rs.name_any(),
            replicas: desired,
            always: false,
        }];
    }
    if is_saturated(d, new) {
        return olds
            .iter()
            .filter(|rs| is_active(rs))
            .map(|rs| Resize {
                name: rs.name_any(),
                replicas: 0,
                always: false,
            })
            .collect();
    }
    if !spec::is_rolling_update(d) {
        return Vec::new();
    }
    let mut active: Vec<&ReplicaSet> = olds
        .iter()
        .copied()
        .chain(new)
        .filter(|rs| is_active(rs))
        .collect();
    let allowed = if desired > 0 {
        desired + spec::max_surge(d)
    } else {
        0
    };
    let to_add = allowed - total_size(active.iter().copied());
    if to_add > 0 {
        active.sort_by(|a, b| by_size_newer(a, b));
    } else if to_add < 0 {
        active.sort_by(|a, b| by_size_older(a, b));
    }
    let mut added = 0;
    let mut sizes: Vec<i32> = active
        .iter()
        .map(|rs| {
            if to_add == 0 {
                return size(rs);
            }
            let share = proportion(rs, d, to_add, added);
            added += share;
            size(rs) + share
        })
        .collect();
    if let Some(first) = sizes.first_mut()
        && to_add != 0
    {
        *first = (*first + to_add - added).max(0);
    }
    active
        .iter()
        .zip(sizes)
        .map(|(rs, replicas)| Resize {
            name: rs.name_any(),
            replicas,
            always: true,
        })
        .collect()
}

/// How many replicas `rs` gains (or loses, negative) of `to_add`, `added` being handed out already
/// (upstream `GetProportion`).
fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if size(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// How much `rs` should grow (negative: shrink) to keep its share of the Deployment at the new size
/// (upstream `getReplicaSetFraction`).
fn fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    let desired = spec::replicas(d);
    if desired == 0 {
        return -size(rs);
    }
    let deployment_replicas = desired + spec::max_surge(d);
    // Without the annotation, fall back to the Deployment's pod count: not exact, but the min/max
    // in `proportion` keep the result within bounds.
    let annotated = int_annotation(rs, MAX_REPLICAS)
        .unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
    if annotated <= 0 {
        return 0;
    }
    let scaled = f64::from(size(rs)) * f64::from(deployment_replicas) / f64::from(annotated);
    // Rounds half away from zero, like Go's math.Round; the value is far inside i32.
    #[allow(clippy::cast_possible_truncation)]
    let rounded = scaled.round() as i32;
    rounded - size(rs)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::replica_sets::set_replicas_annotations;
    use super::super::replica_sets::tests::rs;
    use super::super::spec::tests::rolling;
    use flotilla_sdk::k8s_openapi;

    use super::*;

    fn annotated(mut r: ReplicaSet, desired: i32, max: i32) -> ReplicaSet {
        set_replicas_annotations(&mut r, desired, max);
        r
    }

    fn sizes(plan: &[Resize]) -> Vec<(&str, i32)> {
        let mut v: Vec<(&str, i32)> = plan.iter().map(|r| (r.name.as_str(), r.replicas)).collect();
        v.sort();
        v
    }

    #[test]
    fn a_single_active_replicaset_takes_the_new_size() {
        let d = rolling(7, json!(1), json!(0));
        let new = rs("new", 2, 3, 3);
        let old = rs("old", 1, 0, 0);
        assert_eq!(sizes(&plan(&d, Some(&new), &[&old])), [("new", 7)]);
        // Already there: nothing to do.
        let d3 = rolling(3, json!(1), json!(0));
        assert!(plan(&d3, Some(&new), &[&old]).is_empty());
        // Nothing active: the new one, else the newest old one.
        let idle_new = rs("new", 3, 0, 0);
        assert_eq!(sizes(&plan(&d, Some(&idle_new), &[&old])), [("new", 7)]);
        let older = rs("older", 0, 0, 0);
        assert_eq!(sizes(&plan(&d, None, &[&older, &old])), [("old", 7)]);
    }

    #[test]
    fn a_saturated_new_replicaset_scales_the_old_ones_to_zero() {
        let d = rolling(4, json!(1), json!(0));
        let new = annotated(rs("new", 2, 4, 4), 4, 5);
        let old = rs("old", 1, 1, 1);
        assert_eq!(sizes(&plan(&d, Some(&new), &[&old])), [("old", 0)]);
    }

    #[test]
    fn scaling_up_mid_rollout_keeps_the_proportions() {
        // 6 old + 4 new sized for 10 (no surge); the deployment is scaled to 20.
        let d = rolling(20, json!(0), json!(1));
        let old = annotated(rs("old", 1, 6, 6), 10, 10);
        let new = annotated(rs("new", 2, 4, 0), 10, 10);
        let plan = plan(&d, Some(&new), &[&old]);
        assert_eq!(sizes(&plan), [("new", 8), ("old", 12)]);
        assert!(plan.iter().all(|r| r.always));
    }

    #[test]
    fn scaling_down_mid_rollout_keeps_the_proportions() {
        let d = rolling(5, json!(0), json!(1));
        let old = annotated(rs("old", 1, 6, 6), 10, 10);
        let new = annotated(rs("new", 2, 4, 0), 10, 10);
        assert_eq!(
            sizes(&plan(&d, Some(&new), &[&old])),
            [("new", 2), ("old", 3)]
        );
    }

    #[test]
    fn the_rounding_leftover_goes_to_the_largest_newest_replicaset() {
        // Three of 1 sized for 3; scaled to 4: each share rounds to 0, the leftover 1 goes first in
        // size-then-newest order.
        let d = rolling(4, json!(0), json!(1));
        let a = annotated(rs("a", 1, 1, 1), 3, 3);
        let b = annotated(rs("b", 2, 1, 1), 3, 3);
        let c = annotated(rs("c", 3, 1, 0), 3, 3);
        assert_eq!(
            sizes(&plan(&d, Some(&c), &[&a, &b])),
            [("a", 1), ("b", 1), ("c", 2)]
        );
    }

    #[test]
    fn scaling_to_zero_empties_every_replicaset() {
        let d = rolling(0, json!(1), json!(1));
        let old = annotated(rs("old", 1, 6, 6), 10, 11);
        let new = annotated(rs("new", 2, 4, 0), 10, 11);
        assert_eq!(
            sizes(&plan(&d, Some(&new), &[&old])),
            [("new", 0), ("old", 0)]
        );
    }

    #[test]
    fn without_annotations_the_deployments_pod_count_is_the_reference() {
        let mut d = rolling(20, json!(0), json!(1));
        d.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
            replicas: Some(10),
            ..Default::default()
        });
        let old = rs("old", 1, 6, 6);
        let new = rs("new", 2, 4, 0);
        assert_eq!(
            sizes(&plan(&d, Some(&new), &[&old])),
            [("new", 8), ("old", 12)]
        );
    }
}
