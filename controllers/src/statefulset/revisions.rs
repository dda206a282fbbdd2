//! A StatefulSet's ControllerRevisions (upstream `getPatch`, `ApplyRevision`, `truncateHistory`): a
//! revision stores the pod template as a strategic merge patch `{"spec": {"template": {..., "$patch":
//! "replace"}}}`, so restoring one is replacing the template; history beyond
//! `revisionHistoryLimit` that no pod and neither status revision uses is deleted, oldest first.

use std::collections::BTreeSet;

use flotilla_sdk::k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use flotilla_sdk::k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::{Map, Value, json};

/// Errors of reading or writing a revision's data.
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    /// The set's template does not serialize (it always should).
    #[error("cannot serialize the pod template")]
    Serialize(#[source] serde_json::Error),
    /// A revision's data holds no template, or one that does not decode.
    #[error("revision {0} holds no valid pod template")]
    NoTemplate(String),
}

/// The data of the revision `set`'s template makes (upstream `getPatch`): `{"spec": {"template":
/// <template>, "$patch": "replace"}}`, with Go's always-present `metadata.creationTimestamp: null` so
/// the bytes — and so the hash and name — are those kube-controller-manager computes.
///
/// # Errors
/// [`RevisionError::Serialize`] when the template does not serialize.
pub fn revision_data(set: &StatefulSet) -> Result<Value, RevisionError> {
    let template = set.spec.as_ref().map(|s| &s.template);
    let mut template = match template {
        Some(t) => serde_json::to_value(t).map_err(RevisionError::Serialize)?,
        None => json!({}),
    };
    if let Value::Object(map) = &mut template {
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.entry("creationTimestamp").or_insert(Value::Null);
        }
        map.insert("$patch".into(), json!("replace"));
    }
    Ok(json!({"spec": {"template": template}}))
}

/// The pod template revision `revision` restores (upstream `ApplyRevision`, whose patch replaces the
/// template whole).
///
/// # Errors
/// [`RevisionError::NoTemplate`] when the data holds no template.
pub fn template_of(revision: &ControllerRevision) -> Result<PodTemplateSpec, RevisionError> {
    let name = || RevisionError::NoTemplate(revision.metadata.name.clone().unwrap_or_default());
    let mut template = revision
        .data
        .as_ref()
        .and_then(|d| d.0.get("spec"))
        .and_then(|s| s.get("template"))
        .cloned()
        .ok_or_else(name)?;
    if let Value::Object(map) = &mut template {
        map.remove("$patch");
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.remove("creationTimestamp");
        }
    }
    serde_json::from_value(template).map_err(|_| name())
}

/// The names of the revisions to delete so that at most `limit` revisions beyond the `live` ones remain
/// (upstream `truncateHistory`); `sorted` is oldest first, a negative `limit` keeps everything.
pub fn to_truncate<'a>(
    sorted: &'a [ControllerRevision],
    live: &BTreeSet<&str>,
    limit: i32,
) -> Vec<&'a str> {
    let Ok(limit) = usize::try_from(limit) else {
        return Vec::new();
    };
    let history: Vec<&str> = sorted
        .iter()
        .filter_map(|r| r.metadata.name.as_deref())
        .filter(|name| !live.contains(name))
        .collect();
    let excess = history.len().saturating_sub(limit);
    history.into_iter().take(excess).collect()
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::runtime::RawExtension;

    use super::*;

    fn set() -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}
            }
        }))
        .unwrap()
    }

    fn revision(name: &str, n: i64) -> ControllerRevision {
        let mut r = ControllerRevision {
            revision: n,
            ..ControllerRevision::default()
        };
        r.metadata.name = Some(name.into());
        r
    }

    #[test]
    fn the_revision_data_replaces_the_template_and_restores_it() {
        let set = set();
        let data = revision_data(&set).unwrap();
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            data["spec"]["template"]["metadata"]["creationTimestamp"],
            Value::Null
        );
        let mut rev = revision("web-1", 1);
        rev.data = Some(RawExtension(data));
        assert_eq!(template_of(&rev).unwrap(), set.spec.unwrap().template);
        assert!(template_of(&revision("empty", 2)).is_err());
    }

    #[test]
    fn the_fixture_sets_first_revision_hashes_to_the_name_kube_controller_manager_gave_it() {
        // kcm-v1.32/statefulset/02-create-statefulset.json, as the API server returned the template.
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "registry.k8s.io/nginx-slim:0.27",
                    "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}], "resources": {},
                    "volumeMounts": [{"name": "data", "mountPath": "/usr/share/nginx/html"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst", "securityContext": {},
                    "schedulerName": "default-scheduler"}}}
        }))
        .unwrap();
        let data = revision_data(&set).unwrap();
        assert_eq!(
            super::super::super::history::hash_revision(&data, Some(0)),
            "874579dc5"
        );
    }

    #[test]
    fn history_beyond_the_limit_goes_oldest_first_sparing_live_revisions() {
        let revs: Vec<_> = (1..=5).map(|n| revision(&format!("r{n}"), n)).collect();
        let live = BTreeSet::from(["r1", "r5"]);
        assert_eq!(to_truncate(&revs, &live, 1), ["r2", "r3"]);
        assert!(to_truncate(&revs, &live, 3).is_empty());
        assert_eq!(to_truncate(&revs, &live, 0), ["r2", "r3", "r4"]);
        assert!(to_truncate(&revs, &live, -1).is_empty());
    }
}
