//! A DaemonSet's ControllerRevisions (upstream `constructHistory`, `snapshot`, `dedupCurHistories`,
//! `cleanupHistory`): one revision per template the DaemonSet has had, the current one found by its
//! data (the template as a strategic-merge `$patch: replace`), created when missing, renumbered to
//! follow the old ones, and old ones beyond `revisionHistoryLimit` deleted unless a pod still runs
//! them.
//!
//! The name and the `controller-revision-hash` label come from [`history::hash_revision`] of that data
//! and `status.collisionCount`. Upstream hashes Go's in-memory template (`controller.ComputeHash`),
//! which no other implementation can reproduce byte for byte; the hash only has to be stable and
//! change with the template, and a DaemonSet handed over from kube-controller-manager keeps its
//! revisions, found by their data, not their names.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_sdk::k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use flotilla_sdk::kube;
use flotilla_sdk::kube::ResourceExt;
use flotilla_sdk::kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::super::controller_ref::controller_ref;
use super::super::history::{self, DAEMONSET_HASH_LABEL};

/// How many names a sync tries for a new revision before it gives up (each taken name raises
/// `status.collisionCount`).
const MAX_COLLISIONS: i32 = 16;

/// Errors of keeping the history.
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    /// The DaemonSet lacks a uid or name (from the cache, it always has them).
    #[error("the daemonset lacks a uid or name")]
    Incomplete,
    /// A request about revision `name` failed.
    #[error("cannot {action} controller revision {name}")]
    Api {
        /// What was tried.
        action: &'static str,
        /// The revision.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Relabelling a pod to the surviving duplicate revision failed.
    #[error("cannot relabel pod {name}")]
    Relabel {
        /// The pod.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Every name tried was taken by a revision of another template.
    #[error("{0} controller revision names were taken by other revisions")]
    Collisions(i32),
}

/// Upstream `getPatch`: the template as the strategic-merge patch a rollback would apply, with the
/// `creationTimestamp: null` Go writes for the template's empty metadata.
pub fn template_patch(ds: &DaemonSet) -> Value {
    let mut template = ds
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_value(&s.template).ok())
        .unwrap_or_else(|| json!({}));
    if let Some(object) = template.as_object_mut() {
        object.insert("$patch".into(), json!("replace"));
        let metadata = object.entry("metadata").or_insert_with(|| json!({}));
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.entry("creationTimestamp").or_insert(Value::Null);
        }
    }
    json!({"spec": {"template": template}})
}

/// Upstream `Match`: the revision holds `patch`. Compared as canonical JSON without nulls, so a
/// revision kube-controller-manager wrote matches the same template read through another client.
pub fn matches(patch: &Value, revision: &ControllerRevision) -> bool {
    revision
        .data
        .as_ref()
        .is_some_and(|d| canonical(&d.0) == canonical(patch))
}

fn canonical(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    history::write_go_json(&without_nulls(value), &mut out);
    out
}

fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Upstream `snapshot`'s revision: named `{ds}-{hash}`, labelled with the template's labels and
/// the hash, annotated like the DaemonSet, controlled by it. `None` without a uid.
pub fn snapshot(
    ds: &DaemonSet,
    patch: &Value,
    revision: i64,
    hash: &str,
) -> Option<ControllerRevision> {
    let mut labels = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(DAEMONSET_HASH_LABEL.to_owned(), hash.to_owned());
    let annotations = ds.metadata.annotations.clone().filter(|a| !a.is_empty());
    Some(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(history::revision_name(&ds.name_any(), hash)),
            namespace: ds.namespace(),
            labels: Some(labels),
            annotations,
            owner_references: Some(vec![controller_ref(ds)?]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(patch.clone())),
        revision,
    })
}

/// The hash a revision carries (its label, or its name where an old one lacks the label).
pub fn hash_of(revision: &ControllerRevision) -> String {
    revision
        .labels()
        .get(DAEMONSET_HASH_LABEL)
        .cloned()
        .unwrap_or_else(|| revision.name_any())
}

/// Upstream `cleanupHistory`'s choice: the old revisions beyond `limit`, oldest first, skipping those
/// whose hash a pod in `pods` still carries.
pub fn to_clean_up(
    old: &[ControllerRevision],
    limit: usize,
    pods: &BTreeMap<String, Vec<Pod>>,
) -> Vec<String> {
    let mut excess = old.len().saturating_sub(limit);
    if excess == 0 {
        return Vec::new();
    }
    let live: BTreeSet<&String> = pods
        .values()
        .flatten()
        .filter_map(|p| p.labels().get(DAEMONSET_HASH_LABEL))
        .collect();
    let mut sorted = old.to_vec();
    history::sort_revisions(&mut sorted);
    let mut doomed = Vec::new();
    for revision in sorted {
        if excess == 0 {
            break;
        }
        if live.contains(&hash_of(&revision)) {
            continue;
        }
        doomed.push(revision.name_any());
        excess -= 1;
    }
    doomed
}

/// The current revision and the old ones after [`construct`].
#[derive(Debug)]
pub struct History {
    /// The revision of the DaemonSet's template.
    pub current: ControllerRevision,
    /// The others.
    pub old: Vec<ControllerRevision>,
    /// `status.collisionCount` to store, when names were taken.
    pub raised_collision_count: Option<i32>,
}

/// Upstream `constructHistory` over the DaemonSet's own revisions `owned`: labels old revisions that
/// lack the hash label, finds the current one (creating it, or keeping the highest-numbered of
/// duplicates and moving pods to it), and numbers it after every old one.
///
/// # Errors
/// [`RevisionError`] when a request fails; the sync is retried.
pub async fn construct(
    revisions: &Api<ControllerRevision>,
    pods_api: &Api<Pod>,
    ds: &DaemonSet,
    owned: Vec<ControllerRevision>,
    pods: &[Pod],
) -> Result<History, RevisionError> {
    let patch = template_patch(ds);
    let mut current = Vec::new();
    let mut old = Vec::new();
    for mut revision in owned {
        if !revision.labels().contains_key(DAEMONSET_HASH_LABEL) {
            let name = revision.name_any();
            let body = json!({"metadata": {"labels": {DAEMONSET_HASH_LABEL: name}}});
            revision = revisions
                .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .map_err(api_error("label", &name))?;
        }
        if matches(&patch, &revision) {
            current.push(revision);
        } else {
            old.push(revision);
        }
    }
    let number = history::next_revision(&old);
    let mut raised_collision_count = None;
    let current = if current.is_empty() {
        let (created, count) = create(revisions, ds, &patch, number).await?;
        raised_collision_count = count;
        created
    } else {
        let keep = dedup(revisions, pods_api, current, pods).await?;
        if keep.revision < number {
            let name = keep.name_any();
            revisions
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"revision": number})),
                )
                .await
                .map_err(api_error("renumber", &name))?
        } else {
            keep
        }
    };
    Ok(History {
        current,
        old,
        raised_collision_count,
    })
}

/// Creates the revision of `patch` at `number`; a name taken by another template's revision raises
/// the collision count and tries the next name. The revision and the raised count, if any.
async fn create(
    revisions: &Api<ControllerRevision>,
    ds: &DaemonSet,
    patch: &Value,
    number: i64,
) -> Result<(ControllerRevision, Option<i32>), RevisionError> {
    let start = ds.status.as_ref().and_then(|s| s.collision_count);
    let mut count = start;
    for _ in 0..MAX_COLLISIONS {
        let hash = history::hash_revision(patch, count);
        let revision = snapshot(ds, patch, number, &hash).ok_or(RevisionError::Incomplete)?;
        let name = revision.name_any();
        match revisions.create(&PostParams::default(), &revision).await {
            Ok(created) => return Ok((created, (count != start).then_some(count.unwrap_or(0)))),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let existing = revisions
                    .get(&name)
                    .await
                    .map_err(api_error("get", &name))?;
                if matches(patch, &existing) {
                    return Ok((existing, (count != start).then_some(count.unwrap_or(0))));
                }
                tracing::info!(revision = %name, "revision name taken by another template; raising collisionCount");
                count = Some(count.unwrap_or(0).saturating_add(1));
            }
            Err(err) => return Err(api_error("create", &name)(err)),
        }
    }
    Err(RevisionError::Collisions(MAX_COLLISIONS))
}

/// Upstream `dedupCurHistories`: of several revisions of the current template, the highest-numbered
/// stays; pods labelled with another's hash are relabelled to it, then the others are deleted.
async fn dedup(
    revisions: &Api<ControllerRevision>,
    pods_api: &Api<Pod>,
    mut current: Vec<ControllerRevision>,
    pods: &[Pod],
) -> Result<ControllerRevision, RevisionError> {
    // The last of the highest number wins, as upstream's `>=` scan.
    let keep_index = current
        .iter()
        .enumerate()
        .max_by(|(ia, a), (ib, b)| a.revision.cmp(&b.revision).then(ia.cmp(ib)))
        .map_or(0, |(i, _)| i);
    let keep = current.swap_remove(keep_index);
    if current.is_empty() {
        return Ok(keep);
    }
    let hash = hash_of(&keep);
    for pod in pods {
        if pod.labels().get(DAEMONSET_HASH_LABEL) != Some(&hash) {
            let name = pod.name_any();
            let body = json!({"metadata": {"labels": {DAEMONSET_HASH_LABEL: hash}}});
            pods_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .map_err(|source| RevisionError::Relabel { name, source })?;
        }
    }
    for duplicate in current {
        delete(revisions, &duplicate.name_any()).await?;
    }
    Ok(keep)
}

/// Deletes revision `name`; one already gone is fine.
///
/// # Errors
/// [`RevisionError::Api`] when the API refuses.
pub async fn delete(revisions: &Api<ControllerRevision>, name: &str) -> Result<(), RevisionError> {
    match revisions.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(api_error("delete", name)(err)),
    }
}

fn api_error(action: &'static str, name: &str) -> impl FnOnce(kube::Error) -> RevisionError {
    let name = name.to_owned();
    move |source| RevisionError::Api {
        action,
        name,
        source,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use flotilla_sdk::k8s_openapi::jiff::Timestamp;

    use super::super::pods::tests::pod;
    use super::*;

    fn ds(image: &str) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "daemonset", "uid": "u-1",
                "annotations": {"deprecated.daemonset.template.generation": "1"}},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "agent", "image": image,
                        "imagePullPolicy": "IfNotPresent", "resources": {},
                        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
                        "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                        "securityContext": {}, "terminationGracePeriodSeconds": 30},
                },
            },
        }))
        .unwrap()
    }

    /// The data of kube-controller-manager's revision 1 (`kcm-v1.32/daemonset/08`).
    fn kcm_revision() -> ControllerRevision {
        serde_json::from_value(json!({
            "metadata": {"name": "agent-5568f98bbc", "labels": {"app": "agent", "controller-revision-hash": "5568f98bbc"}},
            "data": {"spec": {"template": {"$patch": "replace",
                "metadata": {"creationTimestamp": null, "labels": {"app": "agent"}},
                "spec": {"containers": [{"image": "registry.k8s.io/pause:3.9", "imagePullPolicy": "IfNotPresent",
                    "name": "agent", "resources": {}, "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"}],
                    "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                    "securityContext": {}, "terminationGracePeriodSeconds": 30}}}},
            "revision": 1,
        }))
        .unwrap()
    }

    #[test]
    fn the_template_patch_matches_kube_controller_managers_revision_of_the_same_template() {
        let patch = template_patch(&ds("registry.k8s.io/pause:3.9"));
        assert!(matches(&patch, &kcm_revision()));
        assert!(!matches(
            &template_patch(&ds("registry.k8s.io/pause:3.10")),
            &kcm_revision()
        ));
        let mut data = Vec::new();
        history::write_go_json(&patch, &mut data);
        let mut kcm = Vec::new();
        history::write_go_json(&kcm_revision().data.unwrap().0, &mut kcm);
        assert_eq!(
            String::from_utf8(data).unwrap(),
            String::from_utf8(kcm).unwrap(),
            "byte for byte"
        );
    }

    #[test]
    fn a_snapshot_is_labelled_annotated_and_owned_like_upstreams() {
        let ds = ds("i");
        let patch = template_patch(&ds);
        let hash = history::hash_revision(&patch, None);
        assert_ne!(hash, history::hash_revision(&patch, Some(1)));
        let r = snapshot(&ds, &patch, 2, &hash).unwrap();
        assert_eq!(r.metadata.name.unwrap(), format!("agent-{hash}"));
        assert_eq!(r.metadata.labels.unwrap()[DAEMONSET_HASH_LABEL], hash);
        assert_eq!(
            r.metadata.annotations.unwrap()["deprecated.daemonset.template.generation"],
            "1"
        );
        assert_eq!(r.revision, 2);
        assert_eq!(
            r.metadata.owner_references.unwrap()[0].controller,
            Some(true)
        );
    }

    #[test]
    fn cleanup_removes_the_oldest_revisions_beyond_the_limit_unless_pods_run_them() {
        let rev = |name: &str, n: i64| ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([(DAEMONSET_HASH_LABEL.to_owned(), name.to_owned())].into()),
                creation_timestamp: Some(Time(Timestamp::from_second(n).unwrap())),
                ..ObjectMeta::default()
            },
            data: None,
            revision: n,
        };
        let old = vec![rev("r3", 3), rev("r1", 1), rev("r2", 2)];
        let pods = super::super::pods::by_node(&[pod("p", "a", true, "r1", 0, None)], true);
        assert_eq!(to_clean_up(&old, 1, &pods), ["r2", "r3"], "r1 still runs");
        assert!(to_clean_up(&old, 3, &pods).is_empty());
        assert_eq!(to_clean_up(&old, 2, &BTreeMap::new()), ["r1"]);
    }
}
