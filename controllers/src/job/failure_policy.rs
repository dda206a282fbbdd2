//! `spec.podFailurePolicy` (upstream `pod_failure_policy.go`): the first rule matching a failed pod —
//! by a container's non-zero exit code (`In` / `NotIn`, optionally one container) or by a pod
//! condition — decides whether the failure fails the Job at once (`FailJob`), fails the pod's index
//! at once (`FailIndex`), is not counted against `backoffLimit` (`Ignore`) or counts as usual
//! (`Count`, and no matching rule).

use flotilla_sdk::k8s_openapi::api::batch::v1::{
    PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
};
use flotilla_sdk::k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// What a failed pod means for its Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// The Job fails, with this message.
    FailJob(String),
    /// The failure is counted and fails the pod's index at once (`backoffLimitPerIndex`).
    FailIndex,
    /// The failure is not counted.
    Ignore,
    /// The failure counts against `backoffLimit`.
    Count,
}

/// The judgement of `policy` (none: [`Judgement::Count`]) on the failed `pod`.
pub fn judge(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Judgement {
    let Some(policy) = policy else {
        return Judgement::Count;
    };
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.as_ref();
    for (index, rule) in policy.rules.iter().enumerate() {
        let matched = if let Some(requirement) = &rule.on_exit_codes {
            let containers = status.into_iter().flat_map(|s| {
                s.container_statuses
                    .iter()
                    .flatten()
                    .chain(s.init_container_statuses.iter().flatten())
            });
            let mut matching = containers.filter_map(|c| exit_code_matching(c, requirement));
            matching.next().map(|(container, code)| {
                format!(
                    "Container {container} for pod {namespace}/{name} failed with exit code {code} matching {} rule at index {index}",
                    rule.action
                )
            })
        } else if let Some(patterns) = &rule.on_pod_conditions {
            let conditions = status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten();
            let mut matching = conditions.filter(|c| {
                patterns.iter().any(|p| {
                    p.type_ == c.type_ && p.status.as_deref().unwrap_or("True") == c.status
                })
            });
            matching.next().map(|c| {
                format!(
                    "Pod {namespace}/{name} has condition {} matching {} rule at index {index}",
                    c.type_, rule.action
                )
            })
        } else {
            None
        };
        let Some(message) = matched else {
            continue;
        };
        match rule.action.as_str() {
            "FailJob" => return Judgement::FailJob(message),
            "Ignore" => return Judgement::Ignore,
            "Count" => return Judgement::Count,
            // Validation allows it only with backoffLimitPerIndex.
            "FailIndex" => return Judgement::FailIndex,
            // An action from a newer API: the rule does not apply, as upstream's switch.
            _ => {}
        }
    }
    Judgement::Count
}

/// The container's name and exit code when it terminated with a non-zero code the requirement
/// selects.
fn exit_code_matching<'c>(
    container: &'c ContainerStatus,
    requirement: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<(&'c str, i32)> {
    let code = container.state.as_ref()?.terminated.as_ref()?.exit_code;
    if code == 0 {
        return None;
    }
    if requirement
        .container_name
        .as_deref()
        .is_some_and(|n| n != container.name)
    {
        return None;
    }
    let listed = requirement.values.contains(&code);
    let selected = match requirement.operator.as_str() {
        "In" => listed,
        "NotIn" => !listed,
        _ => false,
    };
    selected.then_some((container.name.as_str(), code))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(rules: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({ "rules": rules })).unwrap()
    }

    fn failed(exit_code: i32, conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed", "conditions": conditions, "containerStatuses": [
                {"name": "main", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": exit_code}}}]},
        }))
        .unwrap()
    }

    #[test]
    fn the_first_matching_rule_decides_and_fail_job_says_why_as_upstream() {
        let p = policy(json!([
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [0, 3]}},
        ]));
        assert_eq!(judge(Some(&p), &failed(3, json!([]))), Judgement::Ignore);
        assert_eq!(
            judge(Some(&p), &failed(42, json!([]))),
            Judgement::FailJob(
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
                    .into()
            )
        );
        assert_eq!(judge(None, &failed(42, json!([]))), Judgement::Count);
    }

    #[test]
    fn a_pod_condition_rule_matches_its_type_and_status_true_by_default() {
        let p = policy(json!([
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "Count", "onExitCodes": {"operator": "In", "values": [1]}},
        ]));
        let evicted = failed(1, json!([{"type": "DisruptionTarget", "status": "True"}]));
        assert_eq!(judge(Some(&p), &evicted), Judgement::Ignore);
        let not_really = failed(1, json!([{"type": "DisruptionTarget", "status": "False"}]));
        assert_eq!(judge(Some(&p), &not_really), Judgement::Count);
        let fail = policy(
            json!([{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]),
        );
        assert_eq!(
            judge(Some(&fail), &evicted),
            Judgement::FailJob(
                "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0".into()
            )
        );
    }
}
