//! The ownerReference graph over the shared informers, and the keys of owner-graph controllers (the
//! garbage collector) it produces. This is the part of upstream's graph builder that must see every
//! object: which objects may need action now. The decisions themselves (is an owner really gone,
//! delete or orphan) belong to the worker, which checks owners against the API.
//!
//! An object is a key when
//! - it is being deleted with the `orphan` or `foregroundDeletion` finalizer (its dependents must be
//!   orphaned or deleted first);
//! - one of its owners is absent from the cache, has another uid, is of a kind not discovered, or is
//!   being deleted in the foreground;
//! - it is a dependent of an object that was deleted or started deleting;
//! - it is a foreground-deleting owner of an object that was deleted or dropped its reference.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use flotilla_common::{KindedKey, ResourceKind};

use crate::informer::{CachedObject, InformerEvent, Informers, OwnerRef};

/// The finalizer of an object whose dependents are orphaned before it goes.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer of an object whose blocking dependents are deleted before it goes.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// The discovered kinds and the owner-graph controllers routed over them.
#[derive(Debug, Default)]
pub struct OwnerGraph {
    controllers: Vec<String>,
    kinds: BTreeSet<ResourceKind>,
    /// (apiVersion, kind) → kind, for resolving ownerReferences.
    by_type: HashMap<(String, String), ResourceKind>,
    discovered: bool,
}

impl OwnerGraph {
    /// Routes keys to `controller` too; true if it is the first owner-graph controller (discovery
    /// must start).
    pub fn add_controller(&mut self, controller: &str) -> bool {
        self.controllers.push(controller.to_owned());
        self.controllers.len() == 1
    }

    /// Whether `controller` is routed by the graph.
    pub fn routes(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// Records a discovery; returns the kinds not covered before (their informers must start). Kinds
    /// that vanish stay covered: their objects' deletions still reach the graph.
    pub fn discovered(&mut self, kinds: Vec<ResourceKind>) -> Vec<ResourceKind> {
        self.discovered = true;
        let mut added = Vec::new();
        for kind in kinds {
            if self.kinds.insert(kind.clone()) {
                self.by_type
                    .insert((kind.api_version(), kind.kind.clone()), kind.clone());
                added.push(kind);
            }
        }
        added
    }

    /// Whether the first discovery is done and every covered kind's informer has synced.
    pub fn synced(&self, informers: &Informers) -> bool {
        self.discovered && self.kinds.iter().all(|k| informers.is_synced(k))
    }

    /// The covered kinds.
    pub fn kinds(&self) -> impl Iterator<Item = &ResourceKind> {
        self.kinds.iter()
    }

    /// Whether `kind` is covered.
    pub fn covers(&self, kind: &ResourceKind) -> bool {
        self.kinds.contains(kind)
    }

    /// The keys of `kind`'s cached objects that need action: the initial list after a sync.
    pub fn initial_keys(&self, kind: &ResourceKind, informers: &Informers) -> Vec<String> {
        let Some(store) = informers.store(kind) else {
            return Vec::new();
        };
        store
            .list()
            .iter()
            .filter(|object| self.needs_action(object, informers))
            .map(|object| kinded_key(object))
            .collect()
    }

    /// The (controller, key) pairs an informer event enqueues.
    pub fn keys_for(
        &self,
        event: &InformerEvent,
        informers: &Informers,
        out: &mut Vec<(String, String)>,
    ) {
        if self.controllers.is_empty() || !self.covers(event.kind()) {
            return;
        }
        let mut keys = Vec::new();
        match event {
            InformerEvent::Applied { old, new } => {
                if self.needs_action(new, informers) {
                    keys.push(kinded_key(new));
                }
                let started_deleting = new.deleting && !old.as_ref().is_some_and(|o| o.deleting);
                if started_deleting {
                    self.dependents(&new.uid, informers, &mut keys);
                }
                if let Some(old) = old {
                    let dropped = old
                        .owners
                        .iter()
                        .filter(|o| !new.owners.iter().any(|n| n.uid == o.uid));
                    self.waiting_owners(old, dropped, informers, &mut keys);
                }
            }
            InformerEvent::Deleted { old, .. } => {
                self.dependents(&old.uid, informers, &mut keys);
                self.waiting_owners(old, old.owners.iter(), informers, &mut keys);
            }
            InformerEvent::Synced { .. } => {}
        }
        for key in keys {
            for controller in &self.controllers {
                out.push((controller.clone(), key.clone()));
            }
        }
    }

    /// The object a kinded key names, and its dependents of every covered kind.
    pub fn payload(
        &self,
        key: &str,
        informers: &Informers,
    ) -> Option<(Arc<CachedObject>, Vec<Arc<CachedObject>>)> {
        let parsed = KindedKey::parse(key)?;
        let kind = self.kinds.iter().find(|k| parsed.is_of(k))?;
        let object = informers
            .store(kind)?
            .get(&kind.object_key(parsed.namespace, parsed.name))?;
        let mut dependents = Vec::new();
        for kind in &self.kinds {
            if let Some(store) = informers.store(kind) {
                dependents.extend(store.dependents_of(&object.uid));
            }
        }
        Some((object, dependents))
    }

    /// Whether `object` may need the collector now (see the module docs).
    fn needs_action(&self, object: &CachedObject, informers: &Informers) -> bool {
        if object.deleting && has_graph_finalizer(object) {
            return true;
        }
        object
            .owners
            .iter()
            .any(|owner| match self.cached_owner(object, owner, informers) {
                Some(cached) => {
                    cached.uid != owner.uid || (cached.deleting && has_foreground(&cached))
                }
                None => true,
            })
    }

    /// The cached object an ownerReference of `dependent` names, if its kind is covered and cached.
    fn cached_owner(
        &self,
        dependent: &CachedObject,
        owner: &OwnerRef,
        informers: &Informers,
    ) -> Option<Arc<CachedObject>> {
        let kind = self
            .by_type
            .get(&(owner.api_version.clone(), owner.kind.clone()))?;
        informers
            .store(kind)?
            .get(&kind.object_key(dependent.namespace.as_deref(), &owner.name))
    }

    fn dependents(&self, uid: &str, informers: &Informers, keys: &mut Vec<String>) {
        for kind in &self.kinds {
            if let Some(store) = informers.store(kind) {
                keys.extend(store.dependents_of(uid).iter().map(|d| kinded_key(d)));
            }
        }
    }

    /// The owners among `owners` of `dependent` that wait, in the foreground, for their dependents.
    fn waiting_owners<'a>(
        &self,
        dependent: &CachedObject,
        owners: impl Iterator<Item = &'a OwnerRef>,
        informers: &Informers,
        keys: &mut Vec<String>,
    ) {
        for owner in owners {
            if let Some(cached) = self.cached_owner(dependent, owner, informers)
                && cached.uid == owner.uid
                && cached.deleting
                && has_foreground(&cached)
            {
                keys.push(kinded_key(&cached));
            }
        }
    }
}

/// The kinded key of a cached object.
pub fn kinded_key(object: &CachedObject) -> String {
    object
        .kind
        .kinded_key(object.namespace.as_deref(), &object.name)
}

fn has_graph_finalizer(object: &CachedObject) -> bool {
    object
        .finalizers
        .iter()
        .any(|f| f == ORPHAN_FINALIZER || f == FOREGROUND_FINALIZER)
}

fn has_foreground(object: &CachedObject) -> bool {
    object.finalizers.iter().any(|f| f == FOREGROUND_FINALIZER)
}
