//! A StatefulSet pod's identity and storage (upstream `newStatefulSetPod`, `initIdentity`,
//! `updateIdentity`, `updateStorage`, `identityMatches`, `storageMatches`): the pod at an ordinal is
//! named `<set>-<ordinal>`, labelled with its name and ordinal, has hostname and subdomain (the
//! governing Service), and mounts one claim per volumeClaimTemplate.

use flotilla_sdk::k8s_openapi::api::apps::v1::StatefulSet;
use flotilla_sdk::k8s_openapi::api::core::v1::{
    PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::kube::ResourceExt;

use super::super::controller_ref::controller_ref;
use super::names::{POD_INDEX_LABEL, POD_NAME_LABEL, REVISION_LABEL};
use super::ordinals::{claim_name, member_ordinal, pod_name};

/// The names of the set's volumeClaimTemplates, in spec order.
pub fn claim_templates(set: &StatefulSet) -> Vec<&str> {
    set.spec
        .iter()
        .flat_map(|s| s.volume_claim_templates.iter().flatten())
        .filter_map(|t| t.metadata.name.as_deref())
        .collect()
}

/// The pod `set` has at `ordinal`, from `template` (the set's own, or one restored from a revision),
/// labelled with `revision`: upstream `newVersionedStatefulSetPod`'s pod. `None` when the set lacks a
/// name or uid (no controller reference can point at it).
pub fn new_pod(
    set: &StatefulSet,
    template: &PodTemplateSpec,
    ordinal: i32,
    revision: &str,
) -> Option<Pod> {
    let meta = template.metadata.clone().unwrap_or_default();
    let set_name = set.metadata.name.as_deref()?;
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(set_name, ordinal)),
            generate_name: Some(format!("{set_name}-")),
            namespace: set.namespace(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_ref(set)?]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        ..Pod::default()
    };
    update_identity(set, &mut pod, ordinal);
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.hostname = Some(pod_name(set_name, ordinal));
    spec.subdomain = set
        .spec
        .as_ref()
        .and_then(|s| s.service_name.clone())
        .filter(|s| !s.is_empty());
    update_storage(set, &mut pod, ordinal);
    pod.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(REVISION_LABEL.into(), revision.into());
    Some(pod)
}

/// Whether the pod carries the identity of the set's pod at its ordinal (upstream
/// `identityMatches`: name, namespace and pod-name label).
pub fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let set_name = set.name_any();
    let name = pod.name_any();
    member_ordinal(&set_name, &name).is_some()
        && pod.namespace() == set.namespace()
        && pod.labels().get(POD_NAME_LABEL) == Some(&name)
}

/// Whether the pod mounts, for each volumeClaimTemplate, a volume of the template's name on its own
/// claim (upstream `storageMatches`).
pub fn storage_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let set_name = set.name_any();
    let Some(ordinal) = member_ordinal(&set_name, &pod.name_any()) else {
        return false;
    };
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    claim_templates(set).into_iter().all(|template| {
        volumes.iter().any(|v| {
            v.name == template
                && v.persistent_volume_claim
                    .as_ref()
                    .map(|c| c.claim_name.as_str())
                    == Some(claim_name(template, &set_name, ordinal).as_str())
        })
    })
}

/// Sets the pod-name and pod-index labels (upstream `updateIdentity`; the name and namespace are the
/// pod's already).
pub fn update_identity(set: &StatefulSet, pod: &mut Pod, ordinal: i32) {
    let name = pod_name(&set.name_any(), ordinal);
    let labels = pod.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(POD_NAME_LABEL.into(), name);
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
}

/// Points one volume per volumeClaimTemplate at the pod's claim, replacing a template volume of the
/// same name, and keeps the other volumes after them (upstream `updateStorage`, in template order
/// rather than Go's map order).
pub fn update_storage(set: &StatefulSet, pod: &mut Pod, ordinal: i32) {
    let set_name = set.name_any();
    let templates = claim_templates(set);
    let spec = pod.spec.get_or_insert_with(Default::default);
    let current = spec.volumes.take().unwrap_or_default();
    let mut volumes: Vec<Volume> = templates
        .iter()
        .map(|template| Volume {
            name: (*template).to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(template, &set_name, ordinal),
                read_only: None,
            }),
            ..Volume::default()
        })
        .collect();
    volumes.extend(
        current
            .into_iter()
            .filter(|v| !templates.contains(&v.name.as_str())),
    );
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::apps::v1::StatefulSetSpec;
    use flotilla_sdk::k8s_openapi::api::core::v1::{
        Container, EmptyDirVolumeSource, PersistentVolumeClaim, PodSpec,
    };
    use serde_json::json;

    use super::*;

    pub(crate) fn web() -> StatefulSet {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid"},
            "spec": {
                "replicas": 3, "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx"}],
                             "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}]}
                },
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_new_pod_has_its_ordinal_identity_storage_and_revision() {
        let set = web();
        let template = set.spec.as_ref().unwrap().template.clone();
        let pod = new_pod(&set, &template, 1, "web-abc").unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels[POD_NAME_LABEL], "web-1");
        assert_eq!(labels[POD_INDEX_LABEL], "1");
        assert_eq!(labels[REVISION_LABEL], "web-abc");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-1"));
        assert_eq!(spec.subdomain.as_deref(), Some("web"));
        let volumes = spec.volumes.as_ref().unwrap();
        assert_eq!(volumes.len(), 2, "the template's data volume is replaced");
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "data-web-1"
        );
        assert_eq!(volumes[1].name, "cache");
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("StatefulSet", Some(true))
        );
        assert!(identity_matches(&set, &pod));
        assert!(storage_matches(&set, &pod));
    }

    #[test]
    fn a_pod_missing_its_label_or_claim_volume_does_not_match() {
        let set = web();
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container::default()],
                volumes: Some(vec![Volume {
                    name: "data".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Volume::default()
                }]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        assert!(!identity_matches(&set, &pod));
        assert!(!storage_matches(&set, &pod));
        update_identity(&set, &mut pod, 0);
        update_storage(&set, &mut pod, 0);
        assert!(identity_matches(&set, &pod));
        assert!(storage_matches(&set, &pod));
        let mut other = set.clone();
        other.spec = Some(StatefulSetSpec {
            volume_claim_templates: Some(vec![PersistentVolumeClaim::default()]),
            ..other.spec.unwrap()
        });
        assert!(
            storage_matches(&other, &pod),
            "a nameless template asks for nothing"
        );
    }
}
