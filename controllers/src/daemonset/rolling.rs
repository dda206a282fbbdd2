//! The RollingUpdate strategy (upstream `rollingUpdate`, `updatedDesiredNodeCounts`,
//! `SurgeCount`/`UnavailableCount`): how many nodes may be without an available pod (maxUnavailable)
//! or run a second one (maxSurge), and which old pods to delete or which nodes get a new pod next.
//! Creating the replacement on a node whose old pod was deleted is the ordinary sync's
//! ([`super::manage`]).

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::apps::v1::DaemonSet;
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube::ResourceExt;

use super::nodes::Fit;
use super::pods::{is_available, is_deleting, is_updated};

/// Why a rolling update cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollingError {
    /// maxUnavailable or maxSurge is neither a number nor a percentage.
    #[error("invalid value for {field}: {value:?}")]
    Invalid {
        /// `maxUnavailable` or `maxSurge`.
        field: &'static str,
        /// The value.
        value: String,
    },
    /// A node with pods of the DaemonSet is not in the cache (upstream's "couldn't get node").
    #[error("couldn't get node for nodeName {0:?}")]
    MissingNode(String),
}

/// The strategy's numbers for one sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Nodes that may run a new pod beside an available old one.
    pub max_surge: usize,
    /// Nodes that may be without an available pod.
    pub max_unavailable: usize,
}

/// Whether the strategy is RollingUpdate (what the API defaults an absent strategy to).
pub fn is_rolling(ds: &DaemonSet) -> bool {
    let strategy = ds.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    strategy
        .and_then(|s| s.type_.as_deref())
        .is_none_or(|t| t == "RollingUpdate")
}

/// Upstream `SurgeCount` and `UnavailableCount` for `desired` nodes, percentages rounded up; absent
/// values as the API defaults them (maxUnavailable 1, maxSurge 0). A configuration allowing neither
/// falls back to one unavailable node, as upstream.
///
/// # Errors
/// [`RollingError::Invalid`] for a value that is neither a number nor a percentage.
pub fn budget(ds: &DaemonSet, desired: usize) -> Result<Budget, RollingError> {
    if !is_rolling(ds) {
        return Ok(Budget {
            max_surge: 0,
            max_unavailable: 0,
        });
    }
    let rolling = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let unavailable = rolling.and_then(|r| r.max_unavailable.as_ref());
    let surge = rolling.and_then(|r| r.max_surge.as_ref());
    let max_unavailable = unavailable.map_or(Ok(1), |v| scaled(v, desired, "maxUnavailable"))?;
    let max_surge = surge.map_or(Ok(0), |v| scaled(v, desired, "maxSurge"))?;
    if desired > 0 && max_unavailable == 0 && max_surge == 0 {
        return Ok(Budget {
            max_surge,
            max_unavailable: 1,
        });
    }
    Ok(Budget {
        max_surge,
        max_unavailable,
    })
}

/// Upstream `AllowsSurge`: maxSurge of one node is above zero.
pub fn allows_surge(ds: &DaemonSet) -> bool {
    budget(ds, 1).is_ok_and(|b| b.max_surge > 0)
}

/// Upstream `GetScaledValueFromIntOrPercent` rounding up; negative values count as zero.
fn scaled(value: &IntOrString, total: usize, field: &'static str) -> Result<usize, RollingError> {
    let invalid = || RollingError::Invalid {
        field,
        value: match value {
            IntOrString::Int(i) => i.to_string(),
            IntOrString::String(s) => s.clone(),
        },
    };
    match value {
        IntOrString::Int(i) => Ok(usize::try_from(*i).unwrap_or(0)),
        IntOrString::String(s) => {
            let percent: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(invalid)?;
            let percent = u64::try_from(percent).unwrap_or(0);
            let total = u64::try_from(total).unwrap_or(u64::MAX);
            Ok(
                usize::try_from((percent.saturating_mul(total)).div_ceil(100))
                    .unwrap_or(usize::MAX),
            )
        }
    }
}

/// What the rolling update does in one sync.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Step {
    /// Old pods to delete, by name.
    pub delete: Vec<String>,
    /// Nodes that get a new pod beside their old one (surge only).
    pub create_on: Vec<String>,
}

/// The DaemonSet facts a step needs.
pub struct Rollout<'a> {
    /// The current revision's hash.
    pub hash: &'a str,
    /// The template generation.
    pub generation: Option<i64>,
    /// `spec.minReadySeconds`.
    pub min_ready_seconds: i32,
}

/// The node's current pod and old pod, or `None` when it has more than one of either (the ordinary
/// sync cleans that up first). Pods being deleted are not counted.
fn updated_and_old<'p>(
    rollout: &Rollout<'_>,
    pods: &'p [Pod],
) -> Option<(Option<&'p Pod>, Option<&'p Pod>)> {
    let mut new = None;
    let mut old = None;
    for pod in pods.iter().filter(|p| !is_deleting(p)) {
        let slot = if is_updated(pod, rollout.hash, rollout.generation) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod);
    }
    Some((new, old))
}

/// Upstream `rollingUpdate` for the nodes `fits` and the pods `by_node`, at `now`.
///
/// # Errors
/// [`RollingError`] for a bad budget, or with surge a node of the pods that is not in `fits`.
pub fn step(
    ds: &DaemonSet,
    rollout: &Rollout<'_>,
    fits: &BTreeMap<String, Fit>,
    by_node: &BTreeMap<String, Vec<Pod>>,
    now: Timestamp,
) -> Result<Step, RollingError> {
    // Every node that should run a pod takes part, with or without pods.
    let mut nodes: BTreeMap<&str, &[Pod]> = by_node
        .iter()
        .map(|(n, p)| (n.as_str(), p.as_slice()))
        .collect();
    let mut desired: usize = 0;
    for (node, fit) in fits {
        if fit.should_run {
            desired += 1;
            nodes.entry(node.as_str()).or_insert(&[]);
        }
    }
    let budget = budget(ds, desired)?;
    let available = |p: &Pod| is_available(p, rollout.min_ready_seconds, now);
    let mut step = Step::default();
    if budget.max_surge == 0 {
        let mut unavailable = 0;
        let mut replace = Vec::new();
        let mut candidates = Vec::new();
        for pods in nodes.values() {
            let Some((new, old)) = updated_and_old(rollout, pods) else {
                unavailable += 1;
                continue;
            };
            match (new, old) {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (Some(new), None) => {
                    if !available(new) {
                        unavailable += 1;
                    }
                }
                (None, Some(old)) => {
                    if !available(old) {
                        replace.push(old.name_any());
                    } else if unavailable < budget.max_unavailable {
                        candidates.push(old.name_any());
                    }
                }
            }
        }
        let room = budget
            .max_unavailable
            .saturating_sub(unavailable)
            .min(candidates.len());
        step.delete = replace;
        step.delete.extend(candidates.into_iter().take(room));
        return Ok(step);
    }

    let mut surging = 0;
    let mut available_nodes: usize = 0;
    let mut allowed_new = Vec::new();
    let mut candidate_new = Vec::new();
    let mut should_not_run = Vec::new();
    for (node, pods) in &nodes {
        let Some((new, old)) = updated_and_old(rollout, pods) else {
            surging += 1;
            continue;
        };
        if old.or(new).is_some_and(available) {
            available_nodes += 1;
        }
        let should_run = || {
            fits.get(*node)
                .map(|f| f.should_run)
                .ok_or_else(|| RollingError::MissingNode((*node).to_owned()))
        };
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !available(old) {
                    if should_run()? {
                        allowed_new.push((*node).to_owned());
                    } else {
                        step.delete.push(old.name_any());
                    }
                } else if !should_run()? {
                    should_not_run.push(old.name_any());
                } else if surging < budget.max_surge {
                    candidate_new.push((*node).to_owned());
                }
            }
            (Some(new), Some(old)) => {
                if available(new) {
                    step.delete.push(old.name_any());
                } else {
                    surging += 1;
                }
            }
        }
    }
    // Pods on nodes that no longer want them go only while enough others are available.
    let deletable = available_nodes
        .saturating_sub(desired)
        .min(should_not_run.len());
    step.delete
        .extend(should_not_run.into_iter().take(deletable));
    let room = budget
        .max_surge
        .saturating_sub(surging)
        .min(candidate_new.len());
    step.create_on = allowed_new;
    step.create_on.extend(candidate_new.into_iter().take(room));
    Ok(step)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::{Value, json};

    use super::super::pods::tests::pod;
    use super::*;

    fn ds(strategy: Value) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent"},
            "spec": {"selector": {}, "template": {}, "updateStrategy": strategy},
        }))
        .unwrap()
    }

    fn rolling(unavailable: Value, surge: Value) -> DaemonSet {
        ds(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": unavailable, "maxSurge": surge}}),
        )
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    const ROLLOUT: Rollout<'static> = Rollout {
        hash: "new",
        generation: None,
        min_ready_seconds: 0,
    };

    fn nodes(n: usize) -> BTreeMap<String, Fit> {
        (0..n).map(|i| (format!("n{i}"), Fit::RUN)).collect()
    }

    fn old_pods(n: usize) -> Vec<Pod> {
        (0..n)
            .map(|i| {
                pod(
                    &format!("old-{i}"),
                    &format!("n{i}"),
                    true,
                    "old",
                    0,
                    Some(0),
                )
            })
            .collect()
    }

    #[test]
    fn budgets_scale_percentages_up_and_never_allow_nothing() {
        let b = |u: Value, s: Value, n| budget(&rolling(u, s), n).unwrap();
        assert_eq!(
            b(json!(2), json!(0), 10),
            Budget {
                max_surge: 0,
                max_unavailable: 2
            }
        );
        assert_eq!(
            b(json!("25%"), json!(0), 10),
            Budget {
                max_surge: 0,
                max_unavailable: 3
            }
        );
        assert_eq!(
            b(json!(0), json!("10%"), 5),
            Budget {
                max_surge: 1,
                max_unavailable: 0
            }
        );
        assert_eq!(
            b(json!(0), json!(0), 5),
            Budget {
                max_surge: 0,
                max_unavailable: 1
            }
        );
        assert_eq!(
            b(json!(0), json!(0), 0),
            Budget {
                max_surge: 0,
                max_unavailable: 0
            }
        );
        assert!(matches!(
            budget(&rolling(json!("x"), json!(0)), 3),
            Err(RollingError::Invalid {
                field: "maxUnavailable",
                ..
            })
        ));
        let on_delete = ds(json!({"type": "OnDelete"}));
        assert_eq!(
            budget(&on_delete, 5).unwrap(),
            Budget {
                max_surge: 0,
                max_unavailable: 0
            }
        );
        assert!(!is_rolling(&on_delete));
        assert!(allows_surge(&rolling(json!(0), json!(1))));
        assert!(!allows_surge(&rolling(json!(1), json!(0))));
    }

    #[test]
    fn without_surge_at_most_max_unavailable_old_pods_go_at_once() {
        let d = rolling(json!(2), json!(0));
        let by_node = super::super::pods::by_node(&old_pods(5), false);
        let s = step(&d, &ROLLOUT, &nodes(5), &by_node, at(10)).unwrap();
        assert_eq!(s.delete, ["old-0", "old-1"]);
        assert!(s.create_on.is_empty());
    }

    #[test]
    fn without_surge_an_unavailable_new_pod_uses_up_the_budget() {
        let d = rolling(json!(1), json!(0));
        let mut pods = old_pods(3);
        pods[0] = pod("new-0", "n0", true, "new", 5, None);
        let by_node = super::super::pods::by_node(&pods, false);
        assert!(
            step(&d, &ROLLOUT, &nodes(3), &by_node, at(10))
                .unwrap()
                .delete
                .is_empty()
        );
        pods[0] = pod("new-0", "n0", true, "new", 5, Some(6));
        let by_node = super::super::pods::by_node(&pods, false);
        assert_eq!(
            step(&d, &ROLLOUT, &nodes(3), &by_node, at(10))
                .unwrap()
                .delete,
            ["old-1"]
        );
    }

    #[test]
    fn an_unavailable_old_pod_is_replaced_whatever_the_budget() {
        let d = rolling(json!(1), json!(0));
        let mut pods = old_pods(3);
        pods[0] = pod("new-0", "n0", true, "new", 5, None);
        pods[2] = pod("sick", "n2", true, "old", 0, None);
        let by_node = super::super::pods::by_node(&pods, false);
        assert_eq!(
            step(&d, &ROLLOUT, &nodes(3), &by_node, at(10))
                .unwrap()
                .delete,
            ["sick"]
        );
    }

    #[test]
    fn with_surge_at_most_max_surge_nodes_run_two_pods() {
        let d = rolling(json!(0), json!(1));
        let by_node = super::super::pods::by_node(&old_pods(4), false);
        let s = step(&d, &ROLLOUT, &nodes(4), &by_node, at(10)).unwrap();
        assert_eq!(s.create_on, ["n0"]);
        assert!(s.delete.is_empty());
        // While n0's new pod is not available, nothing else surges.
        let mut pods = old_pods(4);
        pods.push(pod("new-0", "n0", true, "new", 5, None));
        let by_node = super::super::pods::by_node(&pods, false);
        assert_eq!(
            step(&d, &ROLLOUT, &nodes(4), &by_node, at(10)).unwrap(),
            Step::default()
        );
        // Once it is, the old pod goes and the next node surges.
        pods[4] = pod("new-0", "n0", true, "new", 5, Some(6));
        let by_node = super::super::pods::by_node(&pods, false);
        let s = step(&d, &ROLLOUT, &nodes(4), &by_node, at(10)).unwrap();
        assert_eq!(s.delete, ["old-0"]);
        assert_eq!(s.create_on, ["n1"]);
    }

    #[test]
    fn with_surge_min_ready_seconds_holds_the_old_pod_until_the_new_one_is_available() {
        let d = rolling(json!(0), json!(1));
        let rollout = Rollout {
            min_ready_seconds: 30,
            ..ROLLOUT
        };
        let pods = vec![
            pod("old-0", "n0", true, "old", 0, Some(0)),
            pod("new-0", "n0", true, "new", 5, Some(6)),
        ];
        let by_node = super::super::pods::by_node(&pods, false);
        assert!(
            step(&d, &rollout, &nodes(1), &by_node, at(20))
                .unwrap()
                .delete
                .is_empty()
        );
        assert_eq!(
            step(&d, &rollout, &nodes(1), &by_node, at(37))
                .unwrap()
                .delete,
            ["old-0"]
        );
    }

    #[test]
    fn with_surge_a_pod_on_a_node_missing_from_the_cache_is_an_error() {
        let d = rolling(json!(0), json!(1));
        let by_node = super::super::pods::by_node(&old_pods(2), false);
        let only_first: BTreeMap<String, Fit> = [("n0".to_owned(), Fit::RUN)].into();
        assert_eq!(
            step(&d, &ROLLOUT, &only_first, &by_node, at(10)),
            Err(RollingError::MissingNode("n1".into()))
        );
    }
}
