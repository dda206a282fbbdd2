//! One sync of a ReplicaSet or ReplicationController (upstream `syncReplicaSet`): claim the matching
//! pods, create or delete the difference, write the status. No expectations: the fleet holds the key
//! until the cache has seen this sync's creates and deletes.

use std::time::Duration;

use flotilla_sdk::EventType;
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube::ResourceExt;
use flotilla_sdk::kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use super::super::claim::{candidates, claim};
use super::super::controller_ref::{ClaimError, adopt, controller_ref, recheck_owner, release};
use super::super::events::publish;
use super::owner::ReplicaOwner;
use super::ranking::pods_to_delete;
use super::slow_start::{BURST_REPLICAS, slow_start};
use super::status::{self, Failure, Observed};
use flotilla_sdk::kube;
use flotilla_sdk::{Action, Context, ContextError, Request};

/// Errors of one sync.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The owner from the cache lacks a uid or namespace, so no owner reference can point at it.
    #[error("{0} lacks a uid or namespace")]
    Incomplete(String),
    /// The owned pods shipped with the item are unreadable.
    #[error("cannot read prefetched pods")]
    Prefetched(#[source] ContextError),
    /// The owner does not serialize (it always should).
    #[error("cannot serialize the owner")]
    Serialize(#[source] serde_json::Error),
    /// Adopting or releasing a pod failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// Creating or deleting pods failed; the status carries a `ReplicaFailure` condition.
    #[error("{reason}: {message}")]
    Manage {
        /// `FailedCreate` or `FailedDelete`.
        reason: String,
        /// The API's error.
        message: String,
    },
    /// Writing the status failed.
    #[error("cannot update the status")]
    Status(#[source] kube::Error),
}

/// Syncs one owner of kind `K`.
///
/// # Errors
/// [`Error`] when reading, claiming, managing pods or writing the status fails; the key is retried.
pub async fn reconcile<K: ReplicaOwner>(
    request: Request<K>,
    ctx: Context,
) -> Result<Action, Error> {
    let Some(owner) = request.object() else {
        // Its pods go with it through their owner references (garbage collection).
        return Ok(Action::await_change());
    };
    let incomplete = || Error::Incomplete(request.key().to_owned());
    let namespace = owner.namespace().ok_or_else(incomplete)?;
    let uid = owner.uid().ok_or_else(incomplete)?;
    let selector = match owner.selector() {
        Ok(selector) => selector,
        Err(err) => {
            // Retrying cannot fix the spec; the next edit of the object re-triggers it (as upstream).
            tracing::warn!(error = %err, key = request.key(), "invalid selector");
            return Ok(Action::await_change());
        }
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client(), &namespace);
    let deleting = owner.meta().deletion_timestamp.is_some();

    let matching: Vec<Pod> = candidates(&ctx, &namespace, &selector, deleting).await;
    let owned = ctx.prefetched::<Pod>().map_err(Error::Prefetched)?;
    let claims = claim(owned, matching, &selector, deleting);
    for pod in &claims.release {
        release(&pods, pod, &uid).await?;
    }
    let mut mine = claims.keep;
    if !claims.adopt.is_empty() {
        let owners: Api<K> = Api::namespaced(ctx.client(), &namespace);
        recheck_owner(&owners, owner.as_ref()).await?;
    }
    for pod in claims.adopt {
        mine.extend(adopt(&pods, pod, owner.as_ref()).await?);
    }
    let active: Vec<Pod> = mine.into_iter().filter(super::pods::is_active).collect();

    let failure = if deleting {
        None
    } else {
        manage(&ctx, &pods, owner.as_ref(), &active).await
    };

    let now = Timestamp::now();
    let owner_json = serde_json::to_value(owner.as_ref()).map_err(Error::Serialize)?;
    let previous = status::current(&owner_json);
    let template_labels = owner
        .template()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let computed = status::compute(&Observed {
        pods: &active,
        template_labels: &template_labels,
        min_ready_seconds: owner.min_ready_seconds(),
        generation: owner.meta().generation,
        failure: failure.clone(),
        previous_failure: previous.failure.clone(),
        now,
    });
    if computed != previous {
        let owners: Api<K> = Api::namespaced(ctx.client(), &namespace);
        owners
            .patch_status(
                request.name(),
                &PatchParams::default(),
                &Patch::Merge(status::patch(&owner_json, &computed, now)),
            )
            .await
            .map_err(Error::Status)?;
    }
    if let Some(Failure { reason, message }) = failure {
        return Err(Error::Manage { reason, message });
    }
    // Nothing announces that a ready pod became available; look again when it should have.
    let min_ready = owner.min_ready_seconds();
    if min_ready > 0
        && computed.ready_replicas == owner.replicas()
        && computed.available_replicas != owner.replicas()
    {
        let secs = u64::try_from(min_ready).unwrap_or(0);
        return Ok(Action::requeue(Duration::from_secs(secs)));
    }
    Ok(Action::await_change())
}

/// Creates or deletes pods toward `spec.replicas`; the failure, if any, for the status.
async fn manage<K: ReplicaOwner>(
    ctx: &Context,
    pods: &Api<Pod>,
    owner: &K,
    active: &[Pod],
) -> Option<Failure> {
    let want = usize::try_from(owner.replicas()).unwrap_or(0);
    if active.len() < want {
        let missing = (want - active.len()).min(BURST_REPLICAS);
        let pod = match new_pod(owner) {
            Some(pod) => pod,
            None => {
                return Some(Failure {
                    reason: "FailedCreate".into(),
                    message: "the owner has no pod template or no uid".into(),
                });
            }
        };
        let (_, err) = slow_start(missing, || async {
            let created = pods.create(&PostParams::default(), &pod).await?;
            let note = format!("Created pod: {}", created.name_any());
            publish(ctx, owner, EventType::Normal, "SuccessfulCreate", note);
            Ok::<(), kube::Error>(())
        })
        .await;
        let err = err?;
        let note = format!("Error creating: {err}");
        publish(ctx, owner, EventType::Warning, "FailedCreate", note);
        return Some(Failure {
            reason: "FailedCreate".into(),
            message: err.to_string(),
        });
    }
    let surplus = (active.len() - want).min(BURST_REPLICAS);
    let doomed = pods_to_delete(active, surplus, Timestamp::now());
    let results = futures::future::join_all(doomed.into_iter().map(|pod| async move {
        let name = pod.name_any();
        match pods.delete(&name, &DeleteParams::default()).await {
            // Already gone: the goal holds.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(err),
            Ok(_) => {
                let note = format!("Deleted pod: {name}");
                publish(ctx, owner, EventType::Normal, "SuccessfulDelete", note);
                Ok(())
            }
        }
    }))
    .await;
    let err = results.into_iter().find_map(Result::err)?;
    let note = format!("Error deleting: {err}");
    publish(ctx, owner, EventType::Warning, "FailedDelete", note);
    Some(Failure {
        reason: "FailedDelete".into(),
        message: err.to_string(),
    })
}

/// The pod `owner`'s template makes: generateName `<owner>-`, the template's labels, annotations and
/// finalizers, and a blocking controller reference. `None` without a template or uid.
pub fn new_pod<K: ReplicaOwner>(owner: &K) -> Option<Pod> {
    let template = owner.template()?;
    let meta = template.metadata.clone().unwrap_or_default();
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", owner.name_any())),
            namespace: owner.namespace(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_ref(owner)?]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        ..Pod::default()
    })
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
    use flotilla_sdk::k8s_openapi::api::core::v1::PodTemplateSpec;
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;

    #[test]
    fn a_new_pod_carries_the_template_labels_and_a_blocking_controller_reference() {
        let labels = std::collections::BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        let mut rs = ReplicaSet {
            spec: Some(ReplicaSetSpec {
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..LabelSelector::default()
                },
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels.clone()),
                        ..ObjectMeta::default()
                    }),
                    spec: None,
                }),
                ..ReplicaSetSpec::default()
            }),
            ..ReplicaSet::default()
        };
        rs.metadata.name = Some("web".into());
        rs.metadata.namespace = Some("team-a".into());
        assert!(new_pod(&rs).is_none(), "no uid, no owner reference");
        rs.metadata.uid = Some("u-1".into());
        let pod = new_pod(&rs).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(pod.metadata.labels, Some(labels));
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ReplicaSet", "u-1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }
}
