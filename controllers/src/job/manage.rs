//! How many pods a Job should run and which to delete when it runs too many (upstream `manageJob`'s
//! arithmetic and `activePodsForRemoval`): the decisions only; the reconcile creates and deletes.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;

use super::pods::{completion_index, is_ready, restarts};
use super::spec::JobSpec;

/// The most pods one sync creates or deletes (upstream `MaxPodCreateDeletePerSync`); the rest wait
/// for the next sync, so one large Job cannot monopolise a worker or the API.
pub const MAX_POD_CHANGES_PER_SYNC: usize = 500;

/// How many pods should be active: never more than `parallelism` nor than the completions still
/// missing; a work-queue Job keeps what runs once any pod succeeded.
pub fn want_active(spec: &JobSpec, succeeded: i32, active: i32) -> i32 {
    match spec.completions {
        None if succeeded > 0 => active,
        None => spec.parallelism,
        Some(completions) => (completions - succeeded).clamp(0, spec.parallelism),
    }
}

/// At least `at_least` of the `active` pods to delete, worst first; for an Indexed Job also every
/// pod of an index out of range and every duplicate of an index (keeping its best pod).
pub fn removal<'p>(spec: &JobSpec, active: &[&'p Pod], at_least: usize) -> Vec<&'p Pod> {
    let mut remove: Vec<&Pod> = Vec::new();
    let mut left: Vec<&Pod> = Vec::new();
    if spec.indexed() {
        let mut by_index: BTreeMap<i32, Vec<&Pod>> = BTreeMap::new();
        for &pod in active {
            match completion_index(pod).filter(|i| *i < spec.index_bound()) {
                Some(ix) => by_index.entry(ix).or_default().push(pod),
                None => remove.push(pod),
            }
        }
        for (_, mut pods) in by_index {
            pods.sort_by_key(|p| rank(p));
            // The best ranks last: keep it.
            let best = pods.pop();
            remove.extend(pods);
            left.extend(best);
        }
    } else {
        left = active.to_vec();
    }
    if remove.len() < at_least {
        left.sort_by_key(|p| rank(p));
        remove.extend(left.into_iter().take(at_least - remove.len()));
    }
    remove.truncate(MAX_POD_CHANGES_PER_SYNC);
    remove
}

/// Worse pods first (upstream `controller.ActivePods`): unscheduled, then pending, then not ready,
/// then more restarts, then newer.
fn rank(pod: &Pod) -> impl Ord + use<> {
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => 0,
        Some("Running") => 2,
        _ => 1,
    };
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (
        scheduled,
        phase,
        is_ready(pod),
        Reverse(restarts(pod)),
        Reverse(created),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
    use serde_json::json;

    use super::super::names::COMPLETION_INDEX;
    use super::*;

    fn spec(extra: serde_json::Value) -> JobSpec {
        let mut spec = json!({"completions": 5, "parallelism": 2, "template": {}});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        JobSpec::of(&serde_json::from_value::<Job>(json!({"spec": spec})).unwrap())
    }

    fn pod(name: &str, node: Option<&str>, phase: &str, index: Option<i32>) -> Pod {
        let annotations = index.map(|i| json!({COMPLETION_INDEX: i.to_string()}));
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn names(pods: &[&Pod]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn active_pods_never_exceed_parallelism_nor_the_missing_completions() {
        let s = spec(json!({}));
        assert_eq!(want_active(&s, 0, 0), 2);
        assert_eq!(want_active(&s, 4, 2), 1);
        assert_eq!(want_active(&s, 7, 0), 0);
        let queue = spec(json!({"completions": null, "parallelism": 3}));
        assert_eq!(want_active(&queue, 0, 1), 3);
        assert_eq!(
            want_active(&queue, 1, 2),
            2,
            "after a success, what runs finishes"
        );
    }

    #[test]
    fn the_unscheduled_and_pending_pods_go_first() {
        let s = spec(json!({}));
        let running = pod("running", Some("n"), "Running", None);
        let pending = pod("pending", Some("n"), "Pending", None);
        let unscheduled = pod("unscheduled", None, "Pending", None);
        let active = [&running, &pending, &unscheduled];
        assert_eq!(names(&removal(&s, &active, 2)), ["unscheduled", "pending"]);
        assert!(removal(&s, &active, 0).is_empty());
    }

    #[test]
    fn an_indexed_job_drops_duplicates_and_out_of_range_indexes_whatever_the_count() {
        let s = spec(json!({"completionMode": "Indexed"}));
        let a = pod("a", Some("n"), "Running", Some(1));
        let b = pod("b", None, "Pending", Some(1));
        let c = pod("c", Some("n"), "Running", Some(9));
        let d = pod("d", Some("n"), "Running", Some(2));
        let mut removed = names(&removal(&s, &[&a, &b, &c, &d], 0));
        removed.sort();
        assert_eq!(removed, ["b", "c"]);
    }
}
