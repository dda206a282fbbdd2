//! The status conditions a terminating namespace reports about its deletion, worded as upstream's
//! `namespace_condition_updater.go` words them, and how they are merged into the namespace's status
//! (a condition's `lastTransitionTime` moves only when its status flips).

use flotilla_sdk::k8s_openapi::api::core::v1::{NamespaceCondition, NamespaceStatus};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::tally::Totals;

/// Discovery of the server's resources failed (partly).
pub const DISCOVERY_FAILURE: &str = "NamespaceDeletionDiscoveryFailure";
/// A discovered groupVersion did not parse.
pub const GROUP_VERSION_PARSING_FAILURE: &str = "NamespaceDeletionGroupVersionParsingFailure";
/// Deleting some content failed.
pub const CONTENT_FAILURE: &str = "NamespaceDeletionContentFailure";
/// Content is still there (terminating gracefully or held by finalizers).
pub const CONTENT_REMAINING: &str = "NamespaceContentRemaining";
/// Remaining content carries finalizers.
pub const FINALIZERS_REMAINING: &str = "NamespaceFinalizersRemaining";

/// Every condition type, in the order they are added to a status.
const TYPES: [&str; 5] = [
    DISCOVERY_FAILURE,
    GROUP_VERSION_PARSING_FAILURE,
    CONTENT_FAILURE,
    CONTENT_REMAINING,
    FINALIZERS_REMAINING,
];

/// The reason and message of a condition type when all is well (status `False`).
fn ok(condition_type: &str) -> (&'static str, &'static str) {
    match condition_type {
        DISCOVERY_FAILURE => (
            "ResourcesDiscovered",
            "All resources successfully discovered",
        ),
        GROUP_VERSION_PARSING_FAILURE => (
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed",
        ),
        CONTENT_FAILURE => (
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization",
        ),
        CONTENT_REMAINING => ("ContentRemoved", "All content successfully removed"),
        _ => (
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished",
        ),
    }
}

/// What one deletion pass found, as the conditions report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// Why discovery was incomplete.
    pub discovery_failure: Option<String>,
    /// A groupVersion that did not parse.
    pub parsing_failure: Option<String>,
    /// The content deletions that failed, described.
    pub content_errors: Vec<String>,
    /// What is left.
    pub totals: Totals,
}

impl Findings {
    /// Whether anything failed (then the namespace must not be finalized).
    pub fn failed(&self) -> bool {
        self.discovery_failure.is_some()
            || self.parsing_failure.is_some()
            || !self.content_errors.is_empty()
    }
}

fn condition(
    condition_type: &str,
    status: &str,
    reason: &str,
    message: String,
) -> NamespaceCondition {
    NamespaceCondition {
        type_: condition_type.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_transition_time: None,
    }
}

/// The five conditions `findings` call for, in [`TYPES`] order, without transition times.
pub fn desired(findings: &Findings) -> Vec<NamespaceCondition> {
    TYPES
        .iter()
        .map(|&t| {
            failing(t, findings).unwrap_or_else(|| {
                let (reason, message) = ok(t);
                condition(t, "False", reason, message.to_owned())
            })
        })
        .collect()
}

/// The `True` condition of type `t`, if `findings` call for one.
fn failing(t: &str, findings: &Findings) -> Option<NamespaceCondition> {
    let totals = &findings.totals;
    match t {
        DISCOVERY_FAILURE => findings
            .discovery_failure
            .clone()
            .map(|m| condition(t, "True", "DiscoveryFailed", m)),
        GROUP_VERSION_PARSING_FAILURE => findings
            .parsing_failure
            .clone()
            .map(|m| condition(t, "True", "GroupVersionParsingFailed", m)),
        CONTENT_FAILURE if !findings.content_errors.is_empty() => {
            let mut errors = findings.content_errors.clone();
            errors.sort();
            let message = format!(
                "Failed to delete all resource types, {} remaining: {}",
                errors.len(),
                errors.join(", ")
            );
            Some(condition(t, "True", "ContentDeletionFailed", message))
        }
        CONTENT_REMAINING if !totals.remaining.is_empty() => {
            let parts: Vec<String> = totals
                .remaining
                .iter()
                .map(|(resource, n)| format!("{resource} has {n} resource instances"))
                .collect();
            let message = format!("Some resources are remaining: {}", parts.join(", "));
            Some(condition(t, "True", "SomeResourcesRemain", message))
        }
        FINALIZERS_REMAINING if !totals.finalizers.is_empty() => {
            let parts: Vec<String> = totals
                .finalizers
                .iter()
                .map(|(finalizer, n)| format!("{finalizer} in {n} resource instances"))
                .collect();
            let message = format!(
                "Some content in the namespace has finalizers remaining: {}",
                parts.join(", ")
            );
            Some(condition(t, "True", "SomeFinalizersRemain", message))
        }
        _ => None,
    }
}

/// Merges `desired` into `status` at `now`: a missing condition is appended; a changed one takes the
/// new status, reason and message, and `now` as its transition time only if its status flipped.
/// Other conditions are kept. Returns whether anything changed.
pub fn merge(status: &mut NamespaceStatus, desired: Vec<NamespaceCondition>, now: &Time) -> bool {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let mut changed = false;
    for mut new in desired {
        match conditions.iter_mut().find(|c| c.type_ == new.type_) {
            None => {
                new.last_transition_time = Some(now.clone());
                conditions.push(new);
                changed = true;
            }
            Some(old) => {
                if old.status == new.status
                    && old.reason == new.reason
                    && old.message == new.message
                {
                    continue;
                }
                if old.status != new.status {
                    old.last_transition_time = Some(now.clone());
                }
                old.status = new.status;
                old.reason = new.reason;
                old.message = new.message;
                changed = true;
            }
        }
    }
    changed
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use flotilla_sdk::k8s_openapi;

    use super::*;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn by_type<'a>(conditions: &'a [NamespaceCondition], t: &str) -> &'a NamespaceCondition {
        conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    fn held_configmap() -> Findings {
        Findings {
            totals: Totals {
                estimate: 15,
                remaining: BTreeMap::from([("configmaps.".to_owned(), 1)]),
                finalizers: BTreeMap::from([("example.com/hold".to_owned(), 1)]),
            },
            ..Findings::default()
        }
    }

    #[test]
    fn content_held_by_a_finalizer_reads_as_in_upstreams_recording() {
        // kube-fixtures kcm/21-namespace-terminating-stuck-on-finalizer.json.
        let conditions = desired(&held_configmap());
        let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, TYPES);
        let discovery = by_type(&conditions, DISCOVERY_FAILURE);
        assert_eq!(discovery.status, "False");
        assert_eq!(discovery.reason.as_deref(), Some("ResourcesDiscovered"));
        let content = by_type(&conditions, CONTENT_FAILURE);
        assert_eq!(content.status, "False");
        assert_eq!(content.reason.as_deref(), Some("ContentDeleted"));
        assert_eq!(
            content.message.as_deref(),
            Some("All content successfully deleted, may be waiting on finalization")
        );
        let remaining = by_type(&conditions, CONTENT_REMAINING);
        assert_eq!(remaining.status, "True");
        assert_eq!(remaining.reason.as_deref(), Some("SomeResourcesRemain"));
        assert_eq!(
            remaining.message.as_deref(),
            Some("Some resources are remaining: configmaps. has 1 resource instances")
        );
        let finalizers = by_type(&conditions, FINALIZERS_REMAINING);
        assert_eq!(finalizers.status, "True");
        assert_eq!(finalizers.reason.as_deref(), Some("SomeFinalizersRemain"));
        assert_eq!(
            finalizers.message.as_deref(),
            Some(
                "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
            )
        );
    }

    #[test]
    fn an_empty_namespace_reports_every_condition_false() {
        let conditions = desired(&Findings::default());
        assert!(conditions.iter().all(|c| c.status == "False"));
        assert_eq!(
            by_type(&conditions, CONTENT_REMAINING).reason.as_deref(),
            Some("ContentRemoved")
        );
        assert_eq!(
            by_type(&conditions, FINALIZERS_REMAINING).reason.as_deref(),
            Some("ContentHasNoFinalizers")
        );
    }

    #[test]
    fn failures_are_reported_true_with_sorted_errors() {
        let findings = Findings {
            discovery_failure: Some("Discovery failed for some groups, 1 failing: x".into()),
            parsing_failure: Some("unexpected GroupVersion string: a/b/c".into()),
            content_errors: vec!["b broke".into(), "a broke".into()],
            totals: Totals::default(),
        };
        assert!(findings.failed());
        let conditions = desired(&findings);
        assert_eq!(
            by_type(&conditions, DISCOVERY_FAILURE).reason.as_deref(),
            Some("DiscoveryFailed")
        );
        assert_eq!(
            by_type(&conditions, GROUP_VERSION_PARSING_FAILURE)
                .reason
                .as_deref(),
            Some("GroupVersionParsingFailed")
        );
        let content = by_type(&conditions, CONTENT_FAILURE);
        assert_eq!(content.status, "True");
        assert_eq!(content.reason.as_deref(), Some("ContentDeletionFailed"));
        assert_eq!(
            content.message.as_deref(),
            Some("Failed to delete all resource types, 2 remaining: a broke, b broke")
        );
    }

    #[test]
    fn merging_moves_the_transition_time_only_when_the_status_flips() {
        let mut status = NamespaceStatus::default();
        assert!(merge(&mut status, desired(&held_configmap()), &at(100)));
        assert!(!merge(&mut status, desired(&held_configmap()), &at(200)));

        let mut more = held_configmap();
        more.totals.remaining.insert("configmaps.".into(), 2);
        assert!(merge(&mut status, desired(&more), &at(300)));
        let conditions = status.conditions.clone().unwrap();
        let remaining = by_type(&conditions, CONTENT_REMAINING);
        assert_eq!(remaining.last_transition_time, Some(at(100)));
        assert!(remaining.message.as_deref().unwrap().contains("has 2"));

        assert!(merge(&mut status, desired(&Findings::default()), &at(400)));
        let conditions = status.conditions.unwrap();
        let remaining = by_type(&conditions, CONTENT_REMAINING);
        assert_eq!(remaining.status, "False");
        assert_eq!(remaining.last_transition_time, Some(at(400)));
        let discovery = by_type(&conditions, DISCOVERY_FAILURE);
        assert_eq!(discovery.last_transition_time, Some(at(100)));
    }

    #[test]
    fn conditions_of_other_types_are_kept() {
        let mut status = NamespaceStatus {
            conditions: Some(vec![condition("Other", "True", "R", "m".into())]),
            ..NamespaceStatus::default()
        };
        merge(&mut status, desired(&Findings::default()), &at(1));
        let conditions = status.conditions.unwrap();
        assert_eq!(conditions.len(), 6);
        assert_eq!(conditions[0].type_, "Other");
    }
}
