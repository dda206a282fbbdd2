//! The owner's side of a deletion with a propagation finalizer (upstream `processDeletingDependentsItem`
//! and `orphanDependents`): which dependents still block a foreground deletion, and the reference lists
//! that orphaning leaves behind.

use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use flotilla_sdk::kube::api::DynamicObject;

/// The dependents (of the prefetched ones) that still block the foreground deletion of the owner with
/// `owner_uid`: they reference it with `blockOwnerDeletion: true`.
pub fn blocking<'a>(
    dependents: &'a [DynamicObject],
    owner_uid: &'a str,
) -> impl Iterator<Item = &'a DynamicObject> + 'a {
    dependents.iter().filter(move |d| {
        references(d)
            .iter()
            .any(|r| r.uid == owner_uid && r.block_owner_deletion == Some(true))
    })
}

/// A dependent's ownerReferences without those to `owner_uid`; `None` when it has none to `owner_uid`
/// (nothing to orphan).
pub fn without_owner(dependent: &DynamicObject, owner_uid: &str) -> Option<Vec<OwnerReference>> {
    let refs = references(dependent);
    if !refs.iter().any(|r| r.uid == owner_uid) {
        return None;
    }
    Some(
        refs.iter()
            .filter(|r| r.uid != owner_uid)
            .cloned()
            .collect(),
    )
}

/// `finalizers` without `finalizer`.
pub fn without_finalizer(finalizers: &[String], finalizer: &str) -> Vec<String> {
    finalizers
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect()
}

fn references(object: &DynamicObject) -> &[OwnerReference] {
    object
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::kube::api::ObjectMeta;

    use super::*;

    fn dependent(name: &str, refs: &[(&str, Option<bool>)]) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                owner_references: Some(
                    refs.iter()
                        .map(|(uid, block)| OwnerReference {
                            uid: (*uid).into(),
                            block_owner_deletion: *block,
                            ..OwnerReference::default()
                        })
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            data: serde_json::Value::Null,
        }
    }

    #[test]
    fn only_references_that_block_owner_deletion_block() {
        let deps = [
            dependent("blocks", &[("owner", Some(true))]),
            dependent("does-not", &[("owner", Some(false))]),
            dependent("unset", &[("owner", None)]),
            dependent("other-owner", &[("x", Some(true))]),
        ];
        let names: Vec<_> = blocking(&deps, "owner")
            .map(|d| d.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["blocks"]);
    }

    #[test]
    fn orphaning_drops_only_the_owners_reference() {
        let d = dependent("d", &[("owner", Some(true)), ("other", None)]);
        let left = without_owner(&d, "owner").unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].uid, "other");
        assert!(without_owner(&d, "stranger").is_none());
    }

    #[test]
    fn removing_a_finalizer_keeps_the_others() {
        let f = vec!["orphan".to_owned(), "example.com/keep".to_owned()];
        assert_eq!(without_finalizer(&f, "orphan"), ["example.com/keep"]);
    }
}
