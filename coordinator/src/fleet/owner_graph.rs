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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use flotilla_common::{FOREGROUND_FINALIZER, KindedKey, ORPHAN_FINALIZER, ResourceKind};

use super::mapping::{RoutedKey, Via};
use crate::informer::{CachedObject, InformerEvent, Informers, OwnerRef};

/// How long a discovered kind may take to sync before the graph stops waiting for it (a resource whose
/// list keeps failing must not stop collection everywhere else; upstream's collector likewise proceeds
/// after a bounded wait).
pub const SYNC_GRACE: Duration = Duration::from_secs(60);

/// The discovered kinds and the owner-graph controllers routed over them.
#[derive(Debug, Default)]
pub struct OwnerGraph {
    controllers: Vec<String>,
    /// Covered kinds, with when they were first discovered.
    kinds: BTreeMap<ResourceKind, Instant>,
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

    /// Stops routing keys to `controller` (it was retired). When no owner-graph controller is left, the
    /// graph forgets what it covered (a later one discovers afresh) and returns those kinds, whose
    /// informers nobody in the graph needs any more; otherwise `None`.
    pub fn remove_controller(&mut self, controller: &str) -> Option<Vec<ResourceKind>> {
        self.controllers.retain(|c| c != controller);
        if !self.controllers.is_empty() {
            return None;
        }
        self.by_type.clear();
        self.discovered = false;
        Some(std::mem::take(&mut self.kinds).into_keys().collect())
    }

    /// Whether any owner-graph controller is routed.
    pub fn has_controllers(&self) -> bool {
        !self.controllers.is_empty()
    }

    /// Whether `controller` is routed by the graph.
    pub fn routes(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// Records a discovery; returns the kinds not covered before (their informers must start). Kinds
    /// that vanish stay covered: their objects' deletions still reach the graph.
    pub fn discovered(&mut self, kinds: Vec<ResourceKind>) -> Vec<ResourceKind> {
        self.discovered = true;
        let now = Instant::now();
        let mut added = Vec::new();
        for kind in kinds {
            if self.kinds.insert(kind.clone(), now).is_none() {
                self.by_type
                    .insert((kind.api_version(), kind.kind.clone()), kind.clone());
                added.push(kind);
            }
        }
        added
    }

    /// Whether the first discovery is done and every covered kind's informer has synced, or has had
    /// [`SYNC_GRACE`] to do so.
    pub fn synced(&self, informers: &Informers, now: Instant) -> bool {
        self.discovered
            && self.kinds.iter().all(|(kind, since)| {
                informers.is_synced(kind) || now.duration_since(*since) >= SYNC_GRACE
            })
    }

    /// The covered kinds.
    pub fn kinds(&self) -> impl Iterator<Item = &ResourceKind> {
        self.kinds.keys()
    }

    /// Whether `kind` is covered.
    pub fn covers(&self, kind: &ResourceKind) -> bool {
        self.kinds.contains_key(kind)
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

    /// The (controller, key) pairs an informer event enqueues, each by [`Via::OWNER_GRAPH`].
    pub fn keys_for(&self, event: &InformerEvent, informers: &Informers, out: &mut Vec<RoutedKey>) {
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
                out.push((controller.clone(), key.clone(), Via::OWNER_GRAPH));
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
        let kind = self.kinds().find(|k| parsed.is_of(k))?;
        let object = informers
            .store(kind)?
            .get(&kind.object_key(parsed.namespace, parsed.name))?;
        let mut dependents = Vec::new();
        for kind in self.kinds() {
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
        for kind in self.kinds() {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use prometheus_client::registry::Registry;
    use serde_json::{Value, json};

    use super::*;

    fn configmaps() -> ResourceKind {
        ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)
    }

    fn secrets() -> ResourceKind {
        ResourceKind::new("", "v1", "Secret", "secrets", true)
    }

    /// Informers whose stores the test fills directly (their watches never reach a server).
    fn graph() -> (OwnerGraph, Informers) {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let informers = Informers::new(
            kube::Client::try_from(config).unwrap(),
            &mut Registry::default(),
        );
        let mut graph = OwnerGraph::default();
        assert!(graph.add_controller("garbagecollector"));
        for kind in graph.discovered(vec![configmaps(), secrets()]) {
            informers.ensure(&kind);
        }
        (graph, informers)
    }

    fn object(
        kind: &ResourceKind,
        name: &str,
        owners: &[(&str, &str)],
        meta: Value,
    ) -> Arc<CachedObject> {
        let refs: Vec<Value> = owners
            .iter()
            .map(|(owner, uid)| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid}))
            .collect();
        let mut metadata = json!({"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "resourceVersion": "1", "ownerReferences": refs});
        if let (Some(m), Some(extra)) = (metadata.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        Arc::new(CachedObject::from_value(kind, json!({"metadata": metadata})).unwrap())
    }

    fn cache(informers: &Informers, object: &Arc<CachedObject>) {
        informers.store(&object.kind).unwrap().apply(object.clone());
    }

    fn keys(graph: &OwnerGraph, informers: &Informers, event: InformerEvent) -> Vec<String> {
        let mut out = Vec::new();
        graph.keys_for(&event, informers, &mut out);
        let mut keys: Vec<String> = out.into_iter().map(|(_, key, _)| key).collect();
        keys.sort();
        keys
    }

    fn applied(new: &Arc<CachedObject>) -> InformerEvent {
        InformerEvent::Applied {
            old: None,
            new: new.clone(),
        }
    }

    #[tokio::test]
    async fn a_dependent_is_a_key_only_when_its_owner_is_absent_or_another_object() {
        let (graph, informers) = graph();
        let owner = object(&configmaps(), "owner", &[], json!({}));
        cache(&informers, &owner);
        let solid = object(&secrets(), "solid", &[("owner", "uid-owner")], json!({}));
        let orphaned = object(&secrets(), "orphaned", &[("gone", "uid-gone")], json!({}));
        let stale = object(&secrets(), "stale", &[("owner", "uid-previous")], json!({}));
        assert!(keys(&graph, &informers, applied(&solid)).is_empty());
        assert_eq!(
            keys(&graph, &informers, applied(&orphaned)),
            ["/v1/secrets/ns/orphaned"]
        );
        assert_eq!(
            keys(&graph, &informers, applied(&stale)),
            ["/v1/secrets/ns/stale"]
        );
    }

    #[tokio::test]
    async fn a_deleted_owner_enqueues_its_dependents_of_every_kind() {
        let (graph, informers) = graph();
        let owner = object(&configmaps(), "owner", &[], json!({}));
        for dependent in [
            object(&secrets(), "s", &[("owner", "uid-owner")], json!({})),
            object(&configmaps(), "c", &[("owner", "uid-owner")], json!({})),
            object(
                &secrets(),
                "unrelated",
                &[("other", "uid-other")],
                json!({}),
            ),
        ] {
            cache(&informers, &dependent);
        }
        let deleted = InformerEvent::Deleted {
            old: owner,
            final_state_unknown: false,
        };
        assert_eq!(
            keys(&graph, &informers, deleted),
            ["/v1/configmaps/ns/c", "/v1/secrets/ns/s"]
        );
        let (object, dependents) = graph
            .payload("/v1/secrets/ns/unrelated", &informers)
            .unwrap();
        assert_eq!(object.name, "unrelated");
        assert!(dependents.is_empty());
    }

    #[tokio::test]
    async fn a_foreground_deletion_enqueues_the_owner_its_dependents_and_again_the_owner_as_they_go()
     {
        let (graph, informers) = graph();
        let deleting = json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": [FOREGROUND_FINALIZER]});
        let before = object(&configmaps(), "owner", &[], json!({}));
        let owner = object(&configmaps(), "owner", &[], deleting);
        cache(&informers, &owner);
        let dependent = object(&secrets(), "s", &[("owner", "uid-owner")], json!({}));
        cache(&informers, &dependent);
        let started = InformerEvent::Applied {
            old: Some(before),
            new: owner.clone(),
        };
        assert_eq!(
            keys(&graph, &informers, started),
            ["/v1/configmaps/ns/owner", "/v1/secrets/ns/s"]
        );
        let (_, dependents) = graph
            .payload("/v1/configmaps/ns/owner", &informers)
            .unwrap();
        assert_eq!(dependents.len(), 1);
        let gone = InformerEvent::Deleted {
            old: dependent,
            final_state_unknown: false,
        };
        assert_eq!(keys(&graph, &informers, gone), ["/v1/configmaps/ns/owner"]);
    }

    /// Regression: when the last owner-graph controller retired, the graph kept its kinds as covered while
    /// their informers stopped, so a later owner-graph controller never started them again.
    #[tokio::test]
    async fn the_last_controller_leaving_returns_the_covered_kinds_and_a_new_one_discovers_afresh()
    {
        let (mut graph, informers) = graph();
        assert!(!graph.add_controller("second"), "discovery runs already");
        assert_eq!(graph.remove_controller("second"), None, "one is left");
        let mut covered = graph
            .remove_controller("garbagecollector")
            .expect("the last one left");
        covered.sort();
        assert_eq!(covered, [configmaps(), secrets()]);
        assert!(!graph.has_controllers());
        assert_eq!(graph.kinds().count(), 0);
        assert!(
            graph.add_controller("garbagecollector"),
            "discovery restarts"
        );
        assert_eq!(
            graph.discovered(vec![configmaps()]),
            [configmaps()],
            "a kind covered before is new again, so its informer starts"
        );
        informers.shutdown();
    }

    #[tokio::test]
    async fn kinds_not_covered_and_kinds_that_never_sync_do_not_stall_the_graph() {
        let (graph, informers) = graph();
        let pods = ResourceKind::new("", "v1", "Pod", "pods", true);
        let pod = Arc::new(
            CachedObject::from_value(&pods, json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u",
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "ux"}]}}))
            .unwrap(),
        );
        assert!(
            keys(&graph, &informers, applied(&pod)).is_empty(),
            "pods are not covered"
        );
        let now = Instant::now();
        assert!(!graph.synced(&informers, now), "nothing synced yet");
        assert!(graph.synced(&informers, now + SYNC_GRACE));
    }
}
