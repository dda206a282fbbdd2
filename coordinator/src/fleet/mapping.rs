//! Which controller keys an informer event touches: the object itself for its controllers' primary kind,
//! its controller owner for owned kinds, and declared selector or field mappings for the rest. Selector
//! mappings are answered from a [`SelectorIndex`] per (primary kind, selector path), built on first use
//! and kept current by [`Routes::observe`].

use std::collections::BTreeMap;

use flotilla_common::ResourceKind;
use serde_json::Value;

use super::messages::{ControllerSpec, MappingRule, Primary};
use super::selector_index::{SelectorIndex, lookup};
use crate::informer::{CachedObject, InformerEvent, Informers};

/// For one kind, what each interested controller does with its events.
#[derive(Debug, Default)]
pub struct Routes {
    /// kind → (controller, role).
    by_kind: BTreeMap<ResourceKind, Vec<(String, Role)>>,
    /// (primary kind, selector path) → the primaries' selectors, once a lookup needed them.
    selectors: BTreeMap<(ResourceKind, String), SelectorIndex>,
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

    /// Removes every route of `controller` (it was retired), and the selector indexes no route uses
    /// any more.
    pub fn remove(&mut self, controller: &str) {
        for routes in self.by_kind.values_mut() {
            routes.retain(|(c, _)| c != controller);
        }
        self.by_kind.retain(|_, routes| !routes.is_empty());
        let used: Vec<(ResourceKind, String)> = self
            .by_kind
            .values()
            .flatten()
            .filter_map(|(_, role)| match role {
                Role::Mapped {
                    primary,
                    rule: MappingRule::Selector(path),
                } => Some((primary.clone(), path.clone())),
                _ => None,
            })
            .collect();
        self.selectors.retain(|slot, _| used.contains(slot));
    }

    /// Keeps the selector indexes current with an informer event; call it for every event, before
    /// [`Routes::keys_for`].
    pub fn observe(&mut self, event: &InformerEvent) {
        for ((kind, _), index) in &mut self.selectors {
            match event {
                InformerEvent::Applied { new, .. } if &new.kind == kind => index.apply(new),
                InformerEvent::Deleted { old, .. } if &old.kind == kind => index.remove(old),
                _ => {}
            }
        }
    }

    /// The (controller, key) pairs an event on `object` enqueues.
    pub fn keys_for(
        &mut self,
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
                    map_related(
                        object,
                        primary,
                        rule,
                        informers,
                        &mut self.selectors,
                        |key| out.push((controller.clone(), key)),
                    );
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
    selectors: &mut BTreeMap<(ResourceKind, String), SelectorIndex>,
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
            let slot = (primary.clone(), path.clone());
            if !selectors.contains_key(&slot) {
                let Some(store) = informers.store(primary) else {
                    return;
                };
                let primaries = store.list();
                let index = SelectorIndex::build(path, primaries.iter().map(AsRef::as_ref));
                selectors.insert(slot.clone(), index);
            }
            let Some(index) = selectors.get(&slot) else {
                return;
            };
            let scope = ns.filter(|_| primary.namespaced);
            index.matching(scope, &object.labels, |key| emit(key.to_owned()));
        }
    }
}
