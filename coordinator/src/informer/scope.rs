//! Which namespaces a fleet's informers cover: every one, a fixed list (`--namespaces`), or those whose
//! labels match a selector (`--namespace-selector`), so several fleets can share one cluster.

use std::collections::BTreeSet;

use flotilla_common::{LabelSelector, validate_label};

use super::CachedObject;

/// The namespaces a coordinator's informers list, watch and cache. Cluster-scoped kinds are never
/// scoped (Nodes, PersistentVolumes, CRDs stay cluster-wide), with one exception: the Namespace
/// objects themselves are scoped by their name, so the namespace and serviceaccount controllers of a
/// scoped fleet act only on the fleet's own namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NamespaceScope {
    /// Every namespace (the default, as kube-controller-manager).
    #[default]
    All,
    /// `--namespaces a,b`: one list+watch per namespace per namespaced kind
    /// (`/api/v1/namespaces/a/pods`), each with its own resourceVersion and relist, so the API server
    /// sends nothing else and the fleet needs only namespace-level read rights.
    Names(BTreeSet<String>),
    /// `--namespace-selector k=v`: namespaced kinds are watched cluster-wide and objects of
    /// namespaces whose labels do not match are dropped on arrival (an API server cannot filter
    /// objects by their namespace's labels). A Namespace informer keeps the matching set; a namespace
    /// that starts matching makes every scoped informer relist, one that stops matching has its
    /// objects deleted from the cache (final state unknown).
    Selector(LabelSelector),
}

/// A scope that cannot work; the message names the flag.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScopeError {
    /// Both flags were given.
    #[error("--namespaces and --namespace-selector are mutually exclusive")]
    Both,
    /// A name in `--namespaces` is not a namespace name.
    #[error("--namespaces: {name:?} is not a valid namespace name: {reason}")]
    BadName {
        /// The offending entry.
        name: String,
        /// Why it is not a DNS-1123 label.
        reason: String,
    },
    /// `--namespace-selector` does not parse.
    #[error("--namespace-selector {input:?}: {reason}")]
    BadSelector {
        /// The flag's value.
        input: String,
        /// The parser's complaint.
        reason: String,
    },
    /// `--namespace-selector` selects every namespace, which is what omitting it means.
    #[error("--namespace-selector {0:?} selects every namespace; omit the flag instead")]
    SelectsEverything(String),
}

impl NamespaceScope {
    /// The scope that `--namespaces` (comma-split, blanks ignored) and `--namespace-selector` describe.
    ///
    /// # Errors
    /// [`ScopeError`] when both are given, a name is not a DNS-1123 label, or the selector does not
    /// parse or selects everything.
    pub fn from_flags(namespaces: &[String], selector: Option<&str>) -> Result<Self, ScopeError> {
        let names: BTreeSet<String> = namespaces
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        match (names.is_empty(), selector) {
            (false, Some(_)) => Err(ScopeError::Both),
            (true, None) => Ok(Self::All),
            (false, None) => {
                for name in &names {
                    validate_label(name).map_err(|reason| ScopeError::BadName {
                        name: name.clone(),
                        reason,
                    })?;
                }
                Ok(Self::Names(names))
            }
            (true, Some(input)) => {
                let parsed = LabelSelector::parse(input).map_err(|e| ScopeError::BadSelector {
                    input: input.to_owned(),
                    reason: e.to_string(),
                })?;
                if parsed.is_everything() {
                    return Err(ScopeError::SelectsEverything(input.to_owned()));
                }
                Ok(Self::Selector(parsed))
            }
        }
    }

    /// Whether every namespace is in scope.
    pub fn is_all(&self) -> bool {
        matches!(self, Self::All)
    }
}

impl std::fmt::Display for NamespaceScope {
    /// `*`, the names comma-separated, or `selector(<selector>)`: as logged at start-up.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::All => f.write_str("*"),
            Self::Names(names) => f.write_str(&names.iter().cloned().collect::<Vec<_>>().join(",")),
            Self::Selector(selector) => write!(f, "selector({selector})"),
        }
    }
}

/// The namespace an object counts as in for scoping: its own for namespaced objects, its name for a
/// Namespace, `None` (never scoped) for other cluster-scoped objects.
pub(crate) fn scoping_namespace(object: &CachedObject) -> Option<&str> {
    if object.kind.group.is_empty() && object.kind.kind == "Namespace" {
        Some(&object.name)
    } else {
        object.namespace.as_deref()
    }
}

/// Whether the informer of a kind follows the fleet's scope (namespaced kinds and Namespace itself).
pub(crate) fn is_scoped_kind(kind: &flotilla_common::ResourceKind) -> bool {
    kind.namespaced || (kind.group.is_empty() && kind.kind == "Namespace")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_scope_prints_as_the_start_up_log_shows_it() {
        let scope = |ns: &[&str], sel| NamespaceScope::from_flags(&strings(ns), sel).unwrap();
        assert_eq!(scope(&[], None).to_string(), "*");
        assert_eq!(scope(&["b", "a"], None).to_string(), "a,b");
        assert_eq!(scope(&[], Some("team=a")).to_string(), "selector(team=a)");
    }

    #[test]
    fn no_flag_means_every_namespace() {
        assert_eq!(
            NamespaceScope::from_flags(&[], None).unwrap(),
            NamespaceScope::All
        );
    }

    #[test]
    fn namespaces_are_deduplicated_and_blanks_ignored() {
        let scope = NamespaceScope::from_flags(&strings(&["b", " a", "", "b"]), None).unwrap();
        assert_eq!(
            scope,
            NamespaceScope::Names(["a".to_owned(), "b".to_owned()].into())
        );
    }

    #[test]
    fn both_flags_are_refused() {
        assert_eq!(
            NamespaceScope::from_flags(&strings(&["a"]), Some("team=a")).unwrap_err(),
            ScopeError::Both
        );
    }

    #[test]
    fn a_namespace_name_that_is_no_dns_label_is_refused_by_name() {
        let err = NamespaceScope::from_flags(&strings(&["ok", "Not_OK"]), None).unwrap_err();
        assert!(
            err.to_string().contains("\"Not_OK\"") && err.to_string().contains("--namespaces"),
            "{err}"
        );
    }

    #[test]
    fn a_selector_that_does_not_parse_or_selects_everything_is_refused() {
        assert!(matches!(
            NamespaceScope::from_flags(&[], Some("team in (a")).unwrap_err(),
            ScopeError::BadSelector { .. }
        ));
        assert!(matches!(
            NamespaceScope::from_flags(&[], Some("  ")).unwrap_err(),
            ScopeError::SelectsEverything(_)
        ));
    }

    #[test]
    fn a_selector_matches_namespace_labels() {
        let NamespaceScope::Selector(selector) =
            NamespaceScope::from_flags(&[], Some("team=a,tier!=dev")).unwrap()
        else {
            panic!("expected a selector scope")
        };
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        assert!(selector.matches(&labels(&[("team", "a")])));
        assert!(!selector.matches(&labels(&[("team", "a"), ("tier", "dev")])));
        assert!(!selector.matches(&labels(&[("team", "b")])));
    }

    #[test]
    fn namespaces_scope_by_name_and_other_cluster_scoped_objects_never() {
        let ns_kind =
            flotilla_common::ResourceKind::new("", "v1", "Namespace", "namespaces", false);
        let node_kind = flotilla_common::ResourceKind::new("", "v1", "Node", "nodes", false);
        let pod_kind = flotilla_common::ResourceKind::new("", "v1", "Pod", "pods", true);
        let obj = |kind: &flotilla_common::ResourceKind, ns: Option<&str>, name: &str| {
            let mut meta = serde_json::json!({"name": name, "uid": "u", "resourceVersion": "1"});
            if let Some(ns) = ns {
                meta["namespace"] = ns.into();
            }
            CachedObject::from_value(kind, serde_json::json!({ "metadata": meta })).unwrap()
        };
        assert_eq!(
            scoping_namespace(&obj(&ns_kind, None, "team-a")),
            Some("team-a")
        );
        assert_eq!(
            scoping_namespace(&obj(&pod_kind, Some("x"), "p")),
            Some("x")
        );
        assert_eq!(scoping_namespace(&obj(&node_kind, None, "n")), None);
        assert!(is_scoped_kind(&ns_kind) && is_scoped_kind(&pod_kind));
        assert!(!is_scoped_kind(&node_kind));
    }
}
