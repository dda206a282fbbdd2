//! A set of RBAC grants — verbs on (API group, resource) — with what the fleet's roles need: union,
//! RBAC's wildcard matching, and one canonical list of `PolicyRule`s that the Helm chart renders alike.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_sdk::k8s_openapi::api::rbac::v1::PolicyRule;

/// RBAC's wildcard: every API group, every resource (subresources included) or every verb.
pub const ALL: &str = "*";

/// Verbs granted on (API group, resource) pairs. The core group is `""`; a resource is a plural
/// (`pods`) or a plural with its subresource (`replicasets/status`); any part may be [`ALL`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    grants: BTreeMap<(String, String), BTreeSet<String>>,
}

impl Rules {
    /// No grant at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// These rules plus `verbs` on each of `resources` in `group`.
    #[must_use]
    pub fn grant(mut self, group: &str, resources: &[&str], verbs: &[&str]) -> Self {
        for resource in resources {
            self.grants
                .entry((group.to_owned(), (*resource).to_owned()))
                .or_default()
                .extend(verbs.iter().map(|v| (*v).to_owned()));
        }
        self
    }

    /// Adds every grant of `other`.
    pub fn extend(&mut self, other: &Rules) {
        for (key, verbs) in &other.grants {
            self.grants
                .entry(key.clone())
                .or_default()
                .extend(verbs.iter().cloned());
        }
    }

    /// Whether no verb is granted on anything.
    pub fn is_empty(&self) -> bool {
        self.grants.values().all(BTreeSet::is_empty)
    }

    /// Whether a request with `verb` on `resource` (`plural` or `plural/subresource`) of `group` is
    /// allowed, matching wildcards as kube-apiserver's RBAC authorizer does (`*` as the resource also
    /// covers subresources).
    pub fn allows(&self, group: &str, resource: &str, verb: &str) -> bool {
        self.grants.iter().any(|((g, r), verbs)| {
            matches(g, group)
                && matches(r, resource)
                && (verbs.contains(verb) || verbs.contains(ALL))
        })
    }

    /// The rules as `PolicyRule`s in one canonical form, so two rule sets that grant the same are
    /// equal as lists: one rule per (group, resource), ordered by group then resource, verbs sorted;
    /// a verb another grant's wildcards already cover is left out, and a rule left with no verb
    /// dropped. The Helm chart's `flotilla.rules` template computes the same form.
    pub fn policy_rules(&self) -> Vec<PolicyRule> {
        self.grants
            .iter()
            .filter_map(|((group, resource), verbs)| {
                let verbs: Vec<String> = if verbs.contains(ALL) {
                    vec![ALL.to_owned()]
                } else {
                    verbs.iter().cloned().collect()
                };
                let kept: Vec<String> = verbs
                    .into_iter()
                    .filter(|verb| !self.covered_elsewhere(group, resource, verb))
                    .collect();
                (!kept.is_empty()).then(|| PolicyRule {
                    api_groups: Some(vec![group.clone()]),
                    resources: Some(vec![resource.clone()]),
                    verbs: kept,
                    ..PolicyRule::default()
                })
            })
            .collect()
    }

    /// Whether a grant on another (group, resource) pair, through its wildcards, allows `verb` on
    /// `resource` of `group`.
    fn covered_elsewhere(&self, group: &str, resource: &str, verb: &str) -> bool {
        self.grants.iter().any(|((g, r), verbs)| {
            (g != group || r != resource)
                && matches(g, group)
                && matches(r, resource)
                && (verbs.contains(verb) || verbs.contains(ALL))
        })
    }
}

impl FromIterator<Rules> for Rules {
    fn from_iter<I: IntoIterator<Item = Rules>>(iter: I) -> Self {
        let mut union = Rules::new();
        for rules in iter {
            union.extend(&rules);
        }
        union
    }
}

/// RBAC's match of one part of a rule against a request's.
fn matches(rule: &str, requested: &str) -> bool {
    rule == ALL || rule == requested
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(group: &str, resource: &str, verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            api_groups: Some(vec![group.to_owned()]),
            resources: Some(vec![resource.to_owned()]),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..PolicyRule::default()
        }
    }

    #[test]
    fn canonical_rules_are_one_per_group_and_resource_sorted() {
        let rules = Rules::new()
            .grant("apps", &["replicasets", "deployments"], &["patch", "get"])
            .grant("", &["pods"], &["delete"])
            .grant("apps", &["deployments"], &["get", "update"]);
        assert_eq!(
            rules.policy_rules(),
            [
                rule("", "pods", &["delete"]),
                rule("apps", "deployments", &["get", "patch", "update"]),
                rule("apps", "replicasets", &["get", "patch"]),
            ]
        );
    }

    #[test]
    fn a_verb_a_wildcard_grant_covers_is_left_out() {
        let rules = Rules::new()
            .grant(ALL, &[ALL], &["list", "watch"])
            .grant("", &["namespaces"], &["list", "watch", "get"])
            .grant("", &["pods"], &["watch"]);
        assert_eq!(
            rules.policy_rules(),
            [
                rule("", "namespaces", &["get"]),
                rule(ALL, ALL, &["list", "watch"]),
            ]
        );
    }

    #[test]
    fn the_wildcard_resource_covers_subresources_as_rbac_does() {
        let rules = Rules::new().grant(ALL, &[ALL], &["patch"]);
        assert!(rules.allows("apps", "replicasets/status", "patch"));
        assert!(!rules.allows("apps", "replicasets/status", "update"));
        let narrow = Rules::new().grant("apps", &["replicasets"], &["patch"]);
        assert!(!narrow.allows("apps", "replicasets/status", "patch"));
        assert!(!narrow.allows("", "replicasets", "patch"));
    }

    #[test]
    fn the_canonical_form_allows_exactly_what_the_grants_allow() {
        let rules = Rules::new()
            .grant(ALL, &[ALL], &["get"])
            .grant("apps", &["deployments"], &["get", "update"])
            .grant("", &["namespaces/finalize"], &[ALL, "update"]);
        let canonical = rules
            .policy_rules()
            .into_iter()
            .fold(Rules::new(), |acc, r| {
                let groups = r.api_groups.clone().unwrap_or_default();
                let resources = r.resources.clone().unwrap_or_default();
                let resources: Vec<&str> = resources.iter().map(String::as_str).collect();
                let verbs: Vec<&str> = r.verbs.iter().map(String::as_str).collect();
                groups
                    .iter()
                    .fold(acc, |acc, group| acc.grant(group, &resources, &verbs))
            });
        for (group, resource) in [
            ("apps", "deployments"),
            ("", "namespaces/finalize"),
            ("x", "y"),
        ] {
            for verb in ["get", "update", "delete"] {
                assert_eq!(
                    canonical.allows(group, resource, verb),
                    rules.allows(group, resource, verb),
                    "{verb} {group}/{resource}"
                );
            }
        }
    }
}
