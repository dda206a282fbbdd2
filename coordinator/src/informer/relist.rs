//! The events a relist implies: what vanished (deleted, final state unknown) and what is new or changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{CachedObject, InformerEvent};

/// Compares the cached objects with a complete relisted set and returns, in key order, a
/// `Deleted { final_state_unknown: true }` for every cached object the relist lacks, then an
/// `Applied` for every relisted object that is new or changed. Unchanged objects produce nothing.
///
/// An object counts as changed when its UID (deleted and recreated under the same name) or its
/// resourceVersion differs, or, for objects without a numeric resourceVersion, its JSON does, or when
/// a whole object replaces its metadata-only form (an informer upgraded to whole objects).
pub(crate) fn relist_diff(
    current: &BTreeMap<String, Arc<CachedObject>>,
    relisted: Vec<Arc<CachedObject>>,
) -> Vec<InformerEvent> {
    let relisted: BTreeMap<String, Arc<CachedObject>> =
        relisted.into_iter().map(|o| (o.key(), o)).collect();
    let deleted = current
        .iter()
        .filter(|(key, _)| !relisted.contains_key(*key))
        .map(|(_, old)| InformerEvent::Deleted {
            old: old.clone(),
            final_state_unknown: true,
        })
        .collect::<Vec<_>>();
    let applied = relisted.into_iter().filter_map(|(key, new)| {
        let old = current.get(&key);
        let changed = old.is_none_or(|old| {
            old.uid != new.uid
                || old.resource_version != new.resource_version
                || old.partial != new.partial
                || (new.resource_version == 0 && old.json != new.json)
        });
        changed.then(|| InformerEvent::Applied {
            old: old.cloned(),
            new,
        })
    });
    deleted.into_iter().chain(applied).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_common::ResourceKind;
    use serde_json::json;

    use super::*;

    fn obj(name: &str, uid: &str, rv: &str, label: &str) -> Arc<CachedObject> {
        let kind = ResourceKind::new("", "v1", "ConfigMap", "configmaps", true);
        let value = json!({"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv,
            "labels": {"l": label}}});
        Arc::new(CachedObject::from_value(&kind, value).unwrap())
    }

    fn store(objects: &[Arc<CachedObject>]) -> BTreeMap<String, Arc<CachedObject>> {
        objects.iter().map(|o| (o.key(), o.clone())).collect()
    }

    fn describe(events: &[InformerEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                InformerEvent::Applied { old, new } => {
                    format!(
                        "applied {} old={:?}",
                        new.key(),
                        old.as_ref().map(|o| o.resource_version)
                    )
                }
                InformerEvent::Deleted {
                    old,
                    final_state_unknown,
                } => {
                    format!("deleted {} unknown={final_state_unknown}", old.key())
                }
                InformerEvent::Synced { kind } => format!("synced {kind}"),
            })
            .collect()
    }

    #[test]
    fn objects_missing_from_a_relist_are_deleted_with_final_state_unknown() {
        let current = store(&[obj("a", "ua", "1", "x"), obj("b", "ub", "2", "x")]);
        let events = relist_diff(&current, vec![obj("b", "ub", "2", "x")]);
        assert_eq!(describe(&events), ["deleted ns/a unknown=true"]);
    }

    #[test]
    fn new_and_changed_objects_are_applied_and_unchanged_ones_are_silent() {
        let current = store(&[obj("same", "u1", "1", "x"), obj("changed", "u2", "2", "x")]);
        let events = relist_diff(
            &current,
            vec![
                obj("same", "u1", "1", "x"),
                obj("changed", "u2", "7", "y"),
                obj("new", "u3", "8", "x"),
            ],
        );
        assert_eq!(
            describe(&events),
            ["applied ns/changed old=Some(2)", "applied ns/new old=None"]
        );
    }

    #[test]
    fn an_object_recreated_under_the_same_name_is_applied_even_with_an_equal_resource_version() {
        let current = store(&[obj("a", "old-uid", "5", "x")]);
        let events = relist_diff(&current, vec![obj("a", "new-uid", "5", "x")]);
        assert_eq!(describe(&events), ["applied ns/a old=Some(5)"]);
    }

    #[test]
    fn objects_without_a_numeric_resource_version_are_compared_by_content() {
        let current = store(&[obj("a", "u", "x", "one"), obj("b", "u2", "x", "one")]);
        let events = relist_diff(
            &current,
            vec![obj("a", "u", "x", "two"), obj("b", "u2", "x", "one")],
        );
        assert_eq!(describe(&events), ["applied ns/a old=Some(0)"]);
    }

    #[test]
    fn deletes_come_before_applies() {
        let current = store(&[obj("z", "uz", "1", "x")]);
        let events = relist_diff(&current, vec![obj("a", "ua", "2", "x")]);
        assert_eq!(
            describe(&events),
            ["deleted ns/z unknown=true", "applied ns/a old=None"]
        );
    }
}
