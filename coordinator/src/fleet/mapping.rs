//! Which controller keys an informer event touches: the object itself for its controllers' primary kind,
//! its controller owner for owned kinds, and declared selector or field mappings for the rest.

use std::collections::BTreeMap;

use flotilla_common::{LabelSelector, ResourceKind};
use serde_json::Value;

use super::messages::{ControllerSpec, MappingRule, Primary};
use crate::informer::{CachedObject, Informers};

/// For one kind, what each interested controller does with its events.
#[derive(Debug, Default, Clone)]
pub struct Routes {
    /// kind → (controller, role).
    by_kind: BTreeMap<ResourceKind, Vec<(String, Role)>>,
}

#[derive(Debug, Clone)]
enum Role {
    Primary,
    Mapped {
        primary: ResourceKind,
        rule: MappingRule,
    },
}

impl Routes {
    /// Adds the routes of a newly registered controller of one primary kind; an owner-graph
    /// controller is routed by `super::OwnerGraph` instead.
    pub fn add(&mut self, spec: &ControllerSpec) {
        let Primary::Kind(primary) = &spec.primary else {
            return;
        };
        self.by_kind
            .entry(primary.clone())
            .or_default()
            .push((spec.name.clone(), Role::Primary));
        for m in &spec.mappings {
            self.by_kind.entry(m.kind.clone()).or_default().push((
                spec.name.clone(),
                Role::Mapped {
                    primary: primary.clone(),
                    rule: m.rule.clone(),
                },
            ));
        }
    }

    /// Removes every route of `controller` (it was retired).
    pub fn remove(&mut self, controller: &str) {
        for routes in self.by_kind.values_mut() {
            routes.retain(|(c, _)| c != controller);
        }
        self.by_kind.retain(|_, routes| !routes.is_empty());
    }

    /// The (controller, key) pairs an event on `object` enqueues.
    pub fn keys_for(
        &self,
        object: &CachedObject,
        informers: &Informers,
        out: &mut Vec<(String, String)>,
    ) {
        let Some(routes) = self.by_kind.get(&object.kind) else {
            return;
        };
        for (controller, role) in routes {
            match role {
                Role::Primary => out.push((controller.clone(), object.key())),
                Role::Mapped { primary, rule } => {
                    map_related(object, primary, rule, informers, |key| {
                        out.push((controller.clone(), key))
                    });
                }
            }
        }
    }
}

fn map_related(
    object: &CachedObject,
    primary: &ResourceKind,
    rule: &MappingRule,
    informers: &Informers,
    mut emit: impl FnMut(String),
) {
    let ns = object.namespace.as_deref();
    match rule {
        MappingRule::Owner => {
            if let Some(owner) = &object.controller_owner
                && owner.kind == primary.kind
                && owner.api_version == primary.api_version()
            {
                emit(primary.object_key(ns, &owner.name));
            }
        }
        MappingRule::Field(path) => {
            if let Some(Value::String(name)) = lookup(&object.value, path)
                && !name.is_empty()
            {
                emit(primary.object_key(ns, name));
            }
        }
        MappingRule::Selector(path) => {
            let Some(store) = informers.store(primary) else {
                return;
            };
            let candidates = match ns {
                Some(ns) if primary.namespaced => store.by_namespace(ns),
                _ => store.list(),
            };
            for candidate in candidates {
                let Some(selector) = lookup(&candidate.value, path) else {
                    continue;
                };
                if selector_matches(selector, &object.labels) {
                    emit(candidate.key());
                }
            }
        }
    }
}

/// A selector is either a LabelSelector (`matchLabels` / `matchExpressions`, e.g. a ReplicaSet's) or a
/// plain map (a Service's, where an empty map selects nothing).
fn selector_matches(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let is_label_selector =
        selector.get("matchLabels").is_some() || selector.get("matchExpressions").is_some();
    let parsed = if is_label_selector {
        LabelSelector::from_label_selector_json(selector)
    } else {
        LabelSelector::from_map_json(selector)
    };
    parsed.map(|s| s.matches(labels)).unwrap_or(false)
}

/// The value at a dotted path, e.g. `spec.selector`.
fn lookup<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, part| v.get(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_follows_dotted_paths() {
        let v = serde_json::json!({"spec": {"selector": {"app": "web"}}});
        assert_eq!(
            lookup(&v, "spec.selector.app"),
            Some(&Value::String("web".into()))
        );
        assert_eq!(lookup(&v, "spec.missing"), None);
    }

    #[test]
    fn a_service_style_selector_matches_by_subset_and_an_empty_one_matches_nothing() {
        let labels: BTreeMap<String, String> = [
            ("app".to_owned(), "web".to_owned()),
            ("x".into(), "y".into()),
        ]
        .into();
        assert!(selector_matches(
            &serde_json::json!({"app": "web"}),
            &labels
        ));
        assert!(!selector_matches(
            &serde_json::json!({"app": "db"}),
            &labels
        ));
        assert!(!selector_matches(&serde_json::json!({}), &labels));
    }

    #[test]
    fn a_label_selector_with_expressions_matches() {
        let labels: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
        let sel = serde_json::json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]});
        assert!(selector_matches(&sel, &labels));
    }
}
