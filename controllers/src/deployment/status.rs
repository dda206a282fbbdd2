//! The counts of a Deployment's status, summed over its ReplicaSets, and its `Available` condition
//! (upstream `calculateStatus`).

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

use super::conditions::{self, AVAILABLE, MIN_AVAILABLE, MIN_UNAVAILABLE, new_condition};
use super::replica_sets::{actual, available, ready, terminating, total_size};
use super::spec;

/// The status for `d` (the Deployment as this sync changed it) with ReplicaSets `all` of which `new`
/// runs the current template: counts, observed generation, the collision count and conditions kept,
/// `Available` set.
pub fn calculate(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: Timestamp,
) -> DeploymentStatus {
    let current = d.status.clone().unwrap_or_default();
    let available_replicas: i32 = all.iter().map(|rs| available(rs)).sum();
    let unavailable = (total_size(all.iter().copied()) - available_replicas).max(0);
    let terminating_replicas = all
        .iter()
        .filter_map(|rs| terminating(rs))
        .reduce(|a, b| a + b);
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: non_zero(all.iter().map(|rs| actual(rs)).sum()),
        updated_replicas: non_zero(new.map_or(0, actual)),
        ready_replicas: non_zero(all.iter().map(|rs| ready(rs)).sum()),
        available_replicas: non_zero(available_replicas),
        unavailable_replicas: non_zero(unavailable),
        terminating_replicas,
        collision_count: current.collision_count,
        conditions: current.conditions,
    };
    let condition = if available_replicas >= spec::replicas(d) - spec::max_unavailable(d) {
        new_condition(
            AVAILABLE,
            "True",
            MIN_AVAILABLE,
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        new_condition(
            AVAILABLE,
            "False",
            MIN_UNAVAILABLE,
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    conditions::set(&mut status, condition);
    status
}

/// Counts are omitted when 0, as the API's `omitempty` writes them.
fn non_zero(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

/// Whether two statuses say the same, a count of 0 and an absent count being the same.
pub fn same(a: &DeploymentStatus, b: &DeploymentStatus) -> bool {
    canonical(a) == canonical(b)
}

fn canonical(status: &DeploymentStatus) -> DeploymentStatus {
    let nz = |n: Option<i32>| n.filter(|n| *n != 0);
    DeploymentStatus {
        replicas: nz(status.replicas),
        updated_replicas: nz(status.updated_replicas),
        ready_replicas: nz(status.ready_replicas),
        available_replicas: nz(status.available_replicas),
        unavailable_replicas: nz(status.unavailable_replicas),
        conditions: status.conditions.clone().filter(|c| !c.is_empty()),
        ..status.clone()
    }
}

/// Total count fields, read the same whether absent or 0.
pub fn count(n: Option<i32>) -> i32 {
    n.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::conditions::get;
    use super::super::replica_sets::tests::rs;
    use super::super::spec::tests::rolling;
    use super::*;

    #[test]
    fn counts_are_summed_and_the_updated_ones_are_the_new_replicasets() {
        let d = rolling(5, json!(1), json!(1));
        let old = rs("old", 1, 2, 2);
        let new = rs("new", 2, 4, 1);
        let status = calculate(&d, &[&old, &new], Some(&new), Timestamp::UNIX_EPOCH);
        assert_eq!(status.replicas, Some(6));
        assert_eq!(status.updated_replicas, Some(4));
        assert_eq!(status.available_replicas, Some(3));
        assert_eq!(status.unavailable_replicas, Some(3));
        assert_eq!(status.observed_generation, Some(1));
        // 3 available < 5 - 1.
        let available = get(&status, AVAILABLE).unwrap();
        assert_eq!(
            (available.status.as_str(), available.reason.as_deref()),
            ("False", Some(MIN_UNAVAILABLE))
        );
    }

    #[test]
    fn more_available_than_wanted_is_not_negative_unavailability() {
        let d = rolling(2, json!(1), json!(0));
        let old = rs("old", 1, 3, 3);
        let status = calculate(&d, &[&old], None, Timestamp::UNIX_EPOCH);
        assert_eq!(status.unavailable_replicas, None);
        assert_eq!(status.updated_replicas, None);
        assert_eq!(
            get(&status, AVAILABLE).unwrap().reason.as_deref(),
            Some(MIN_AVAILABLE)
        );
    }

    #[test]
    fn zero_and_absent_counts_are_the_same_status() {
        let a = DeploymentStatus {
            replicas: Some(0),
            conditions: Some(Vec::new()),
            ..DeploymentStatus::default()
        };
        assert!(same(&a, &DeploymentStatus::default()));
        let b = DeploymentStatus {
            replicas: Some(1),
            ..DeploymentStatus::default()
        };
        assert!(!same(&b, &DeploymentStatus::default()));
    }
}
