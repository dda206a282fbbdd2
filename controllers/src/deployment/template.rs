//! The ReplicaSet of a template: finding the one whose template is the Deployment's (upstream
//! `EqualIgnoreHash`, `FindNewReplicaSet`) and building a new one named `<deployment>-<hash>`.

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use flotilla_sdk::k8s_openapi::api::core::v1::PodTemplateSpec;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::kube::ResourceExt;
use serde_json::Value;

use super::super::controller_ref::controller_ref;
use super::hash::POD_TEMPLATE_HASH;
use super::replica_sets::by_creation;
use super::spec;

/// Whether two templates are equal once the `pod-template-hash` label is ignored; a field unset in one
/// and empty in the other counts as equal (as upstream's semantic equality).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    normalized(a) == normalized(b)
}

fn normalized(template: &PodTemplateSpec) -> Value {
    let mut value = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Some(labels) = value
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH);
    }
    prune_empty(&mut value);
    value
}

/// Removes nulls, empty arrays and empty objects, bottom-up.
fn prune_empty(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for member in map.values_mut() {
                prune_empty(member);
            }
            map.retain(|_, v| !is_empty(v));
        }
        Value::Array(items) => items.iter_mut().for_each(prune_empty),
        _ => {}
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// The ReplicaSet running the Deployment's current template: the oldest of those whose template
/// matches (there is normally one; upstream picks the oldest too).
pub fn find_new<'a>(d: &Deployment, rss: &'a [ReplicaSet]) -> Option<&'a ReplicaSet> {
    let template = spec::template(d)?;
    let mut matching: Vec<&ReplicaSet> = rss
        .iter()
        .filter(|rs| {
            rs.spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .is_some_and(|t| equal_ignore_hash(t, template))
        })
        .collect();
    matching.sort_by(|a, b| by_creation(a, b));
    matching.first().copied()
}

/// The ReplicaSet `d` needs for its template with `hash`: `<deployment>-<hash>`, the hash label added to
/// its labels, selector and template, a blocking controller reference, size 0 (the caller sizes it).
/// `None` when the Deployment lacks a uid or spec.
pub fn new_replica_set(d: &Deployment, hash: &str) -> Option<ReplicaSet> {
    let d_spec = d.spec.as_ref()?;
    let mut template = d_spec.template.clone();
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(POD_TEMPLATE_HASH.into(), hash.into());
    template
        .metadata
        .get_or_insert_with(ObjectMeta::default)
        .labels = Some(labels.clone());
    let mut selector = d_spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(Default::default)
        .insert(POD_TEMPLATE_HASH.into(), hash.into());
    let owner = controller_ref(d)?;
    Some(ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{}-{hash}", d.name_any())),
            namespace: d.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(0),
            min_ready_seconds: Some(spec::min_ready_seconds(d)),
            selector,
            template: Some(template),
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::spec::tests::rolling;
    use super::*;

    fn with_image(mut d: Deployment, image: &str) -> Deployment {
        if let Some(c) = d
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
            .map(|s| &mut s.containers[0])
        {
            c.image = Some(image.into());
        }
        d
    }

    #[test]
    fn a_new_replicaset_carries_the_hash_everywhere_and_a_blocking_controller_reference() {
        let d = rolling(3, json!(1), json!(0));
        let rs = new_replica_set(&d, "abc").unwrap();
        assert_eq!(rs.name_any(), "web-abc");
        assert_eq!(rs.labels()[POD_TEMPLATE_HASH], "abc");
        assert_eq!(rs.labels()["app"], "web");
        let spec = rs.spec.as_ref().unwrap();
        assert_eq!(
            spec.selector.match_labels.as_ref().unwrap()[POD_TEMPLATE_HASH],
            "abc"
        );
        let template_labels = spec
            .template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(template_labels[POD_TEMPLATE_HASH], "abc");
        let owner = &rs.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Deployment", "d-uid")
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        // The hash label must not leak into the deployment's own template.
        assert!(
            !d.spec
                .unwrap()
                .template
                .metadata
                .unwrap()
                .labels
                .unwrap()
                .contains_key(POD_TEMPLATE_HASH)
        );
    }

    #[test]
    fn the_new_replicaset_is_the_one_whose_template_matches_ignoring_the_hash() {
        let d1 = rolling(3, json!(1), json!(0));
        let d2 = with_image(d1.clone(), "nginx:2");
        let mut old = new_replica_set(&d1, "h1").unwrap();
        old.metadata.creation_timestamp = None;
        let new = new_replica_set(&d2, "h2").unwrap();
        let rss = [old, new];
        assert_eq!(find_new(&d2, &rss).unwrap().name_any(), "web-h2");
        assert_eq!(find_new(&d1, &rss).unwrap().name_any(), "web-h1");
        let d3 = with_image(d1, "nginx:3");
        assert!(find_new(&d3, &rss).is_none());
    }

    #[test]
    fn unset_and_empty_fields_compare_equal() {
        let a: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "x", POD_TEMPLATE_HASH: "h"}, "annotations": {}},
            "spec": {"containers": [{"name": "c", "env": []}]}
        }))
        .unwrap();
        let b: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c"}]}
        }))
        .unwrap();
        assert!(equal_ignore_hash(&a, &b));
    }
}
