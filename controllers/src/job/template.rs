//! The pod a Job creates (upstream `manageJob`'s pod template handling): the template's labels,
//! annotations and spec, the tracking finalizer, a blocking controller reference, generateName
//! `<job>-`; for an Indexed Job also the completion index as annotation and label, the hostname
//! `<job>-<index>`, generateName `<job>-<index>-` and the `JOB_COMPLETION_INDEX` variable in every
//! container.

use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
use flotilla_sdk::k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod,
};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::kube::ResourceExt;

use super::super::controller_ref::controller_ref;
use super::names::{COMPLETION_INDEX, COMPLETION_INDEX_ENV, TRACKING_FINALIZER};
use super::per_index::{FAILURE_COUNT, IGNORED_FAILURE_COUNT};

/// The longest generateName prefix the API accepts with its 5 random characters (upstream
/// `names.MaxGeneratedNameLength`).
const MAX_GENERATED_NAME: usize = 58;

/// The pod `job` creates, for completion `index` when Indexed. `None` without a uid (no owner
/// reference can point at the Job).
pub fn new_pod(job: &Job, index: Option<i32>, counts: Option<(i32, i32)>) -> Option<Pod> {
    let template = job.spec.as_ref().map(|s| &s.template)?;
    let meta = template.metadata.clone().unwrap_or_default();
    let name = job.name_any();
    let mut finalizers = meta.finalizers.unwrap_or_default();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.to_owned());
    }
    let mut labels = meta.labels;
    let mut annotations = meta.annotations;
    let mut spec = template.spec.clone();
    let generate_name = match index {
        None => truncate(format!("{name}-"), ""),
        Some(ix) => {
            let ix = ix.to_string();
            annotations
                .get_or_insert_default()
                .insert(COMPLETION_INDEX.to_owned(), ix.clone());
            labels
                .get_or_insert_default()
                .insert(COMPLETION_INDEX.to_owned(), ix.clone());
            if let Some((counted, ignored)) = counts {
                let annotations = annotations.get_or_insert_default();
                annotations.insert(FAILURE_COUNT.to_owned(), counted.to_string());
                if ignored > 0 {
                    annotations.insert(IGNORED_FAILURE_COUNT.to_owned(), ignored.to_string());
                }
            }
            if let Some(spec) = spec.as_mut() {
                spec.hostname = Some(format!("{name}-{ix}"));
                for container in spec
                    .containers
                    .iter_mut()
                    .chain(spec.init_containers.iter_mut().flatten())
                {
                    add_index_env(container);
                }
            }
            truncate(name.clone(), &format!("-{ix}-"))
        }
    };
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.namespace(),
            labels,
            annotations,
            finalizers: Some(finalizers),
            owner_references: Some(vec![controller_ref(job)?]),
            ..ObjectMeta::default()
        },
        spec,
        ..Pod::default()
    })
}

/// `prefix` + `suffix`, the prefix cut so the whole fits [`MAX_GENERATED_NAME`].
fn truncate(mut prefix: String, suffix: &str) -> String {
    let room = MAX_GENERATED_NAME.saturating_sub(suffix.len());
    if prefix.len() > room {
        let mut cut = room;
        while !prefix.is_char_boundary(cut) {
            cut -= 1;
        }
        prefix.truncate(cut);
    }
    prefix + suffix
}

/// `JOB_COMPLETION_INDEX` from the pod's index label, unless the container sets it itself.
fn add_index_env(container: &mut Container) {
    let env = container.env.get_or_insert_default();
    if env.iter().any(|e| e.name == COMPLETION_INDEX_ENV) {
        return;
    }
    env.push(EnvVar {
        name: COMPLETION_INDEX_ENV.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".to_owned()),
                field_path: format!("metadata.labels['{COMPLETION_INDEX}']"),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job() -> Job {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "indexed", "namespace": "ns", "uid": "u-1"},
            "spec": {"template": {
                "metadata": {"labels": {"job-name": "indexed"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]},
            }},
        }))
        .unwrap()
    }

    #[test]
    fn a_non_indexed_pod_carries_the_finalizer_and_a_blocking_controller_reference() {
        let pod = new_pod(&job(), None, None).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("indexed-"));
        assert_eq!(pod.metadata.finalizers.unwrap(), [TRACKING_FINALIZER]);
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Job", "u-1"));
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert!(pod.metadata.annotations.is_none());
        assert_eq!(pod.spec.unwrap().hostname, None);
    }

    #[test]
    fn an_indexed_pod_carries_its_index_as_annotation_label_hostname_and_variable() {
        let pod = new_pod(&job(), Some(2), Some((1, 0))).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("indexed-2-"));
        let annotations = pod.metadata.annotations.unwrap();
        assert_eq!(annotations[COMPLETION_INDEX], "2");
        assert_eq!(annotations[FAILURE_COUNT], "1");
        assert!(!annotations.contains_key(IGNORED_FAILURE_COUNT));
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels[COMPLETION_INDEX], "2");
        assert_eq!(labels["job-name"], "indexed");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("indexed-2"));
        let env = &spec.containers[0].env.as_ref().unwrap()[0];
        assert_eq!(env.name, COMPLETION_INDEX_ENV);
        assert_eq!(
            env.value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "metadata.labels['batch.kubernetes.io/job-completion-index']"
        );
    }

    #[test]
    fn a_long_name_is_cut_to_fit_generate_name() {
        let long = "x".repeat(70);
        assert_eq!(truncate(format!("{long}-"), "").len(), MAX_GENERATED_NAME);
        let indexed = truncate(long, "-12-");
        assert_eq!(indexed.len(), MAX_GENERATED_NAME);
        assert!(indexed.ends_with("-12-"));
    }
}
