//! One kind's cache: objects by key, the built-in indexes by namespace, controller owner UID, any owner
//! UID, pod node name and label, and the named indexes controllers declared (see [`super::IndexSpec`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::RwLock;

use super::named_index::IndexLookupError;
use super::{CachedObject, InformerEvent, relist_diff};

/// A read handle on one kind's cache; cheap to clone. Reads run concurrently; only the kind's
/// informer task writes. Every read returns objects in key order.
#[derive(Debug, Clone, Default)]
pub struct Store {
    inner: Arc<RwLock<StoreInner>>,
}

/// The objects and their indexes. Invariant: every key in an index is a key of `objects`, and
/// every object is in exactly the index entries its fields name.
#[derive(Debug, Default)]
struct StoreInner {
    /// Keyed by `namespace/name`; each key is allocated once and shared with the index entries that
    /// name the object (a reference count, not a copy, per index).
    objects: BTreeMap<Arc<str>, Arc<CachedObject>>,
    by_namespace: Index,
    by_owner_uid: Index,
    by_any_owner_uid: Index,
    by_node_name: Index,
    /// [`label_slot`] of each label of each object.
    by_label: Index,
    /// (name, dotted path) → the objects by the non-empty string at the path: the declared named
    /// indexes. Two controllers may declare one name with different paths; both are kept.
    named: BTreeMap<(String, String), Index>,
    /// The newest resourceVersion the store has applied.
    resource_version: u64,
}

/// Index value → keys of the objects with that value.
type Index = BTreeMap<String, BTreeSet<Arc<str>>>;

impl Store {
    /// The object with key `namespace/name` (or `name` when cluster-scoped).
    pub fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.inner.read().objects.get(key).cloned()
    }

    /// Every cached object.
    pub fn list(&self) -> Vec<Arc<CachedObject>> {
        self.inner.read().objects.values().cloned().collect()
    }

    /// The objects of namespace `ns`.
    pub fn by_namespace(&self, ns: &str) -> Vec<Arc<CachedObject>> {
        self.lookup(|s| &s.by_namespace, ns)
    }

    /// The objects whose controller ownerReference has UID `uid`.
    pub fn by_owner_uid(&self, uid: &str) -> Vec<Arc<CachedObject>> {
        self.lookup(|s| &s.by_owner_uid, uid)
    }

    /// The objects with any ownerReference (controller or not) to UID `uid`: its dependents of this
    /// kind.
    pub fn dependents_of(&self, uid: &str) -> Vec<Arc<CachedObject>> {
        self.lookup(|s| &s.by_any_owner_uid, uid)
    }

    /// The pods bound to node `node`.
    pub fn by_node_name(&self, node: &str) -> Vec<Arc<CachedObject>> {
        self.lookup(|s| &s.by_node_name, node)
    }

    /// The objects of namespace `ns` (`None`: cluster-scoped objects) whose label `label` has one of
    /// `values`, in key order: the candidates of a selector that requires that label.
    pub fn by_label(
        &self,
        ns: Option<&str>,
        label: &str,
        values: &BTreeSet<String>,
    ) -> Vec<Arc<CachedObject>> {
        let inner = self.inner.read();
        let keys: BTreeSet<&Arc<str>> = values
            .iter()
            .filter_map(|value| inner.by_label.get(&label_slot(ns, label, value)))
            .flatten()
            .collect();
        keys.into_iter()
            .filter_map(|key| inner.objects.get(key).cloned())
            .collect()
    }

    /// The objects under `value` in the named index `name`.
    ///
    /// # Errors
    /// [`IndexLookupError::Unknown`] when no index of that name is kept, and
    /// [`IndexLookupError::Ambiguous`] when two declarations gave the name different paths.
    pub fn by_index(
        &self,
        name: &str,
        value: &str,
    ) -> Result<Vec<Arc<CachedObject>>, IndexLookupError> {
        let inner = self.inner.read();
        let mut named = inner.named.iter().filter(|((n, _), _)| n == name);
        let Some(((_, path), index)) = named.next() else {
            return Err(IndexLookupError::Unknown(name.to_owned()));
        };
        if let Some(((_, other), _)) = named.next() {
            let mut paths = vec![path.clone(), other.clone()];
            paths.extend(named.map(|((_, p), _)| p.clone()));
            return Err(IndexLookupError::Ambiguous {
                name: name.to_owned(),
                paths,
            });
        }
        Ok(index
            .get(value)
            .into_iter()
            .flatten()
            .filter_map(|key| inner.objects.get(key).cloned())
            .collect())
    }

    /// Every object's key, in order.
    pub fn keys(&self) -> Vec<String> {
        self.inner
            .read()
            .objects
            .keys()
            .map(|k| k.to_string())
            .collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.inner.read().objects.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.read().objects.is_empty()
    }

    /// The newest resourceVersion among the changes the store has applied (0 before any).
    pub fn resource_version(&self) -> u64 {
        self.inner.read().resource_version
    }

    fn lookup(&self, index: impl Fn(&StoreInner) -> &Index, value: &str) -> Vec<Arc<CachedObject>> {
        let inner = self.inner.read();
        index(&inner)
            .get(value)
            .into_iter()
            .flatten()
            .filter_map(|key| inner.objects.get(key).cloned())
            .collect()
    }

    /// Adds or replaces an object; returns the one it replaced.
    pub(crate) fn apply(&self, object: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        self.inner.write().insert(object)
    }

    /// Removes the object with `key`; returns it if it was cached.
    pub(crate) fn delete(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.inner.write().remove(key)
    }

    /// Replaces the whole content with a relisted set, atomically, and returns the events that
    /// turn the old content into the new one (see [`relist_diff`]).
    pub(crate) fn replace(&self, relisted: Vec<Arc<CachedObject>>) -> Vec<InformerEvent> {
        self.replace_where(relisted, |_| true)
    }

    /// As [`Store::replace`], for one part of the content: only the cached objects for which `part`
    /// holds are compared with (and may be deleted by) the relisted set, which must hold only such
    /// objects. How one namespace's relist updates a kind listed per namespace.
    pub(crate) fn replace_where(
        &self,
        relisted: Vec<Arc<CachedObject>>,
        part: impl Fn(&CachedObject) -> bool,
    ) -> Vec<InformerEvent> {
        let mut inner = self.inner.write();
        let current: BTreeMap<String, Arc<CachedObject>> = inner
            .objects
            .iter()
            .filter(|(_, o)| part(o))
            .map(|(k, o)| (k.to_string(), o.clone()))
            .collect();
        let events = relist_diff(&current, relisted);
        for event in &events {
            match event {
                InformerEvent::Applied { new, .. } => {
                    inner.insert(new.clone());
                }
                InformerEvent::Deleted { old, .. } => {
                    inner.remove(&old.key());
                }
                InformerEvent::Synced { .. } => {}
            }
        }
        events
    }
}

impl Store {
    /// Keeps exactly the named indexes `wanted` ((name, dotted path) pairs): builds each new one over
    /// the objects cached now, drops the rest. Later changes keep them current.
    pub(crate) fn set_named_indexes(&self, wanted: &BTreeSet<(String, String)>) {
        let mut inner = self.inner.write();
        inner.named.retain(|slot, _| wanted.contains(slot));
        for slot in wanted {
            if inner.named.contains_key(slot) {
                continue;
            }
            let mut index = Index::new();
            for (key, object) in &inner.objects {
                index_insert(&mut index, object.string_at(&slot.1).as_deref(), key);
            }
            inner.named.insert(slot.clone(), index);
        }
    }

    /// Removes every object for which `leaving` holds (a namespace that left the fleet's scope) and
    /// returns them in key order.
    pub(crate) fn remove_where(
        &self,
        leaving: impl Fn(&CachedObject) -> bool,
    ) -> Vec<Arc<CachedObject>> {
        let mut inner = self.inner.write();
        let keys: Vec<Arc<str>> = inner
            .objects
            .iter()
            .filter(|(_, o)| leaving(o))
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter().filter_map(|k| inner.remove(k)).collect()
    }
}

impl StoreInner {
    fn insert(&mut self, object: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        let key: Arc<str> = object.key().into();
        let old = self.remove(&key);
        index_insert(&mut self.by_namespace, object.namespace.as_deref(), &key);
        index_insert(
            &mut self.by_owner_uid,
            object.controller_owner().map(|o| o.uid.as_str()),
            &key,
        );
        for owner in &object.owners {
            index_insert(&mut self.by_any_owner_uid, Some(&owner.uid), &key);
        }
        index_insert(&mut self.by_node_name, object.node_name.as_deref(), &key);
        for (label, value) in object.labels.iter() {
            let slot = label_slot(object.namespace.as_deref(), label, value);
            index_insert(&mut self.by_label, Some(&slot), &key);
        }
        for ((_, path), index) in &mut self.named {
            index_insert(index, object.string_at(path).as_deref(), &key);
        }
        self.resource_version = self.resource_version.max(object.resource_version);
        self.objects.insert(key, object);
        old
    }

    fn remove(&mut self, key: &str) -> Option<Arc<CachedObject>> {
        let old = self.objects.remove(key)?;
        index_remove(&mut self.by_namespace, old.namespace.as_deref(), key);
        index_remove(
            &mut self.by_owner_uid,
            old.controller_owner().map(|o| o.uid.as_str()),
            key,
        );
        for owner in &old.owners {
            index_remove(&mut self.by_any_owner_uid, Some(&owner.uid), key);
        }
        index_remove(&mut self.by_node_name, old.node_name.as_deref(), key);
        for (label, value) in old.labels.iter() {
            let slot = label_slot(old.namespace.as_deref(), label, value);
            index_remove(&mut self.by_label, Some(&slot), key);
        }
        for ((_, path), index) in &mut self.named {
            index_remove(index, old.string_at(path).as_deref(), key);
        }
        Some(old)
    }
}

/// The label index's value for label `label=value` in namespace `ns`. NUL cannot occur in a namespace
/// or a label key, so distinct triples never share a slot.
fn label_slot(ns: Option<&str>, label: &str, value: &str) -> String {
    format!("{}\0{label}\0{value}", ns.unwrap_or(""))
}

fn index_insert(index: &mut Index, value: Option<&str>, key: &Arc<str>) {
    if let Some(value) = value {
        index
            .entry(value.to_owned())
            .or_default()
            .insert(Arc::clone(key));
    }
}

fn index_remove(index: &mut Index, value: Option<&str>, key: &str) {
    let Some(value) = value else { return };
    if let Some(keys) = index.get_mut(value) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(value);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_common::ResourceKind;
    use serde_json::json;

    use super::*;

    fn pod(
        ns: &str,
        name: &str,
        rv: u64,
        owner: Option<&str>,
        node: Option<&str>,
    ) -> Arc<CachedObject> {
        let owners: Vec<_> = owner
            .map(|uid| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": true}))
            .into_iter()
            .collect();
        let kind = ResourceKind::new("", "v1", "Pod", "pods", true);
        let value = json!({"metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
            "resourceVersion": rv.to_string(), "ownerReferences": owners}, "spec": {"nodeName": node}});
        Arc::new(CachedObject::from_value(&kind, value).unwrap())
    }

    fn names(objects: Vec<Arc<CachedObject>>) -> Vec<String> {
        objects.iter().map(|o| o.key()).collect()
    }

    #[test]
    fn a_relist_of_one_namespace_leaves_the_other_namespaces_alone() {
        let store = Store::default();
        store.apply(pod("a", "p", 1, None, None));
        store.apply(pod("b", "p", 2, None, None));
        let events = store.replace_where(vec![pod("a", "q", 3, None, None)], |o| {
            o.namespace.as_deref() == Some("a")
        });
        assert_eq!(events.len(), 2, "delete a/p, apply a/q");
        let keys: Vec<String> = store.list().iter().map(|o| o.key()).collect();
        assert_eq!(keys, ["a/q", "b/p"]);
        let removed = store.remove_where(|o| o.namespace.as_deref() == Some("b"));
        assert_eq!(removed.len(), 1);
        assert!(store.by_namespace("b").is_empty());
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn indexes_find_objects_by_namespace_owner_and_node() {
        let store = Store::default();
        store.apply(pod("a", "p1", 1, Some("rs-1"), Some("n1")));
        store.apply(pod("a", "p2", 2, Some("rs-2"), None));
        store.apply(pod("b", "p3", 3, Some("rs-1"), Some("n1")));
        assert_eq!(names(store.by_namespace("a")), ["a/p1", "a/p2"]);
        assert_eq!(names(store.by_owner_uid("rs-1")), ["a/p1", "b/p3"]);
        assert_eq!(names(store.dependents_of("rs-1")), ["a/p1", "b/p3"]);
        assert_eq!(names(store.by_node_name("n1")), ["a/p1", "b/p3"]);
        assert_eq!(store.len(), 3);
        assert_eq!(store.resource_version(), 3);
    }

    #[test]
    fn an_update_moves_the_object_between_index_entries() {
        let store = Store::default();
        store.apply(pod("a", "p1", 1, Some("rs-1"), None));
        let old = store.apply(pod("a", "p1", 2, Some("rs-2"), Some("n2")));
        assert_eq!(old.map(|o| o.resource_version), Some(1));
        assert!(store.by_owner_uid("rs-1").is_empty());
        assert_eq!(names(store.by_owner_uid("rs-2")), ["a/p1"]);
        assert_eq!(names(store.by_node_name("n2")), ["a/p1"]);
    }

    #[test]
    fn the_label_index_follows_updates_and_deletes_per_namespace() {
        let labelled = |ns: &str, name: &str, rv: u64, app: &str| {
            let kind = ResourceKind::new("", "v1", "Pod", "pods", true);
            let value = json!({"metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                "resourceVersion": rv.to_string(), "labels": {"app": app}}});
            Arc::new(CachedObject::from_value(&kind, value).unwrap())
        };
        let web: BTreeSet<String> = ["web".to_owned()].into();
        let both: BTreeSet<String> = ["web".to_owned(), "db".to_owned()].into();
        let store = Store::default();
        store.apply(labelled("a", "p2", 1, "web"));
        store.apply(labelled("a", "p1", 2, "db"));
        store.apply(labelled("b", "p3", 3, "web"));
        assert_eq!(names(store.by_label(Some("a"), "app", &web)), ["a/p2"]);
        assert_eq!(
            names(store.by_label(Some("a"), "app", &both)),
            ["a/p1", "a/p2"]
        );
        store.apply(labelled("a", "p2", 4, "db"));
        assert!(store.by_label(Some("a"), "app", &web).is_empty());
        store.delete("a/p1");
        store.delete("a/p2");
        store.delete("b/p3");
        assert!(store.inner.read().by_label.is_empty());
    }

    #[test]
    fn a_delete_leaves_no_index_entry_behind() {
        let store = Store::default();
        store.apply(pod("a", "p1", 1, Some("rs-1"), Some("n1")));
        assert!(store.delete("a/p1").is_some());
        assert!(store.delete("a/p1").is_none());
        let inner = store.inner.read();
        assert!(inner.objects.is_empty());
        assert!(
            inner.by_namespace.is_empty()
                && inner.by_owner_uid.is_empty()
                && inner.by_any_owner_uid.is_empty()
                && inner.by_node_name.is_empty()
        );
    }

    #[test]
    fn a_replace_applies_the_relist_diff_to_objects_and_indexes() {
        let store = Store::default();
        store.apply(pod("a", "gone", 1, Some("rs-1"), None));
        store.apply(pod("a", "kept", 2, Some("rs-1"), None));
        let events = store.replace(vec![
            pod("a", "kept", 2, Some("rs-1"), None),
            pod("a", "new", 5, None, None),
        ]);
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(names(store.list()), ["a/kept", "a/new"]);
        assert_eq!(names(store.by_owner_uid("rs-1")), ["a/kept"]);
        assert_eq!(store.resource_version(), 5);
    }

    fn claim(ns: &str, name: &str, rv: u64, volume: Option<&str>) -> Arc<CachedObject> {
        let kind = ResourceKind::new(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
        );
        let value = json!({"metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
            "resourceVersion": rv.to_string()}, "spec": {"volumeName": volume}});
        Arc::new(CachedObject::from_value(&kind, value).unwrap())
    }

    fn by_volume() -> BTreeSet<(String, String)> {
        [("by-volume".to_owned(), "spec.volumeName".to_owned())].into()
    }

    #[test]
    fn a_named_index_is_built_over_the_cache_and_follows_updates_deletes_and_relists() {
        let store = Store::default();
        store.apply(claim("a", "data", 1, Some("pv-1")));
        store.apply(claim("a", "unbound", 2, None));
        store.set_named_indexes(&by_volume());
        store.apply(claim("b", "logs", 3, Some("pv-1")));
        let listed = |value: &str| names(store.by_index("by-volume", value).unwrap());
        assert_eq!(listed("pv-1"), ["a/data", "b/logs"]);
        store.apply(claim("a", "unbound", 4, Some("pv-2")));
        store.apply(claim("a", "data", 5, Some("pv-2")));
        assert_eq!(listed("pv-1"), ["b/logs"]);
        assert_eq!(listed("pv-2"), ["a/data", "a/unbound"]);
        store.delete("b/logs");
        assert!(listed("pv-1").is_empty());
        store.replace(vec![
            claim("a", "data", 5, Some("pv-2")),
            claim("c", "new", 6, Some("pv-1")),
        ]);
        assert_eq!(listed("pv-1"), ["c/new"]);
        assert_eq!(listed("pv-2"), ["a/data"], "the relist dropped a/unbound");
        store.delete("a/data");
        store.delete("c/new");
        assert!(
            store.inner.read().named.values().all(BTreeMap::is_empty),
            "no entry is left behind"
        );
    }

    #[test]
    fn an_undeclared_or_ambiguous_index_name_is_an_error_and_a_dropped_index_is_unknown() {
        let store = Store::default();
        store.apply(claim("a", "data", 1, Some("pv-1")));
        assert_eq!(
            store.by_index("by-volume", "pv-1").unwrap_err(),
            IndexLookupError::Unknown("by-volume".into())
        );
        let mut both = by_volume();
        both.insert(("by-volume".to_owned(), "spec.storageClassName".to_owned()));
        store.set_named_indexes(&both);
        assert!(matches!(
            store.by_index("by-volume", "pv-1"),
            Err(IndexLookupError::Ambiguous { paths, .. }) if paths.len() == 2
        ));
        store.set_named_indexes(&by_volume());
        assert_eq!(
            names(store.by_index("by-volume", "pv-1").unwrap()),
            ["a/data"]
        );
        store.set_named_indexes(&BTreeSet::new());
        assert!(store.by_index("by-volume", "pv-1").is_err());
        assert_eq!(store.keys(), ["a/data"]);
    }
}
