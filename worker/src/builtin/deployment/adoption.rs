//! Claiming ReplicaSets (upstream `ClaimReplicaSets`): the Deployment's own that still match stay,
//! those that stopped matching are released, matching orphans are adopted. The decision is the one the
//! replica controllers make for pods ([`claim`]); this file makes the writes.

use flotilla_common::LabelSelector;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::super::replicaset::claim::claim;

/// Errors of adopting or releasing a ReplicaSet.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} replicaset {name}")]
pub struct ClaimError {
    /// `adopt` or `release`.
    pub action: &'static str,
    /// The ReplicaSet.
    pub name: String,
    /// Why.
    #[source]
    pub source: kube::Error,
}

/// The ReplicaSets `d` controls once the claim is made: `owned` (controlled by it) and `matching`
/// (selected by its selector, any owner) sorted, released and adopted.
///
/// # Errors
/// [`ClaimError`] when an adoption or release is refused (e.g. the ReplicaSet changed meanwhile); the
/// sync is retried.
pub async fn claim_replica_sets(
    api: &Api<ReplicaSet>,
    d: &Deployment,
    owned: Vec<ReplicaSet>,
    matching: Vec<ReplicaSet>,
    selector: &LabelSelector,
) -> Result<Vec<ReplicaSet>, ClaimError> {
    let uid = d.uid().unwrap_or_default();
    let claims = claim(
        owned,
        matching,
        selector,
        d.meta().deletion_timestamp.is_some(),
    );
    for rs in &claims.release {
        release(api, rs, &uid).await?;
    }
    let mut mine = claims.keep;
    for rs in claims.adopt {
        mine.extend(adopt(api, rs, d).await?);
    }
    Ok(mine)
}

/// Adds the controller reference; the resourceVersion makes the patch fail if the ReplicaSet changed
/// (someone else may have adopted it) since the cache copy. `None` when it is gone.
async fn adopt(
    api: &Api<ReplicaSet>,
    rs: ReplicaSet,
    d: &Deployment,
) -> Result<Option<ReplicaSet>, ClaimError> {
    let name = rs.name_any();
    let mut references = rs.owner_references().to_vec();
    if let Some(mut owner) = d.controller_owner_ref(&()) {
        owner.block_owner_deletion = Some(true);
        references.push(owner);
    }
    let patch = json!({
        "metadata": {"ownerReferences": references, "resourceVersion": rs.resource_version()}
    });
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(adopted) => Ok(Some(adopted)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(source) => Err(ClaimError {
            action: "adopt",
            name,
            source,
        }),
    }
}

/// Removes the Deployment's controller reference from a ReplicaSet that no longer matches.
async fn release(api: &Api<ReplicaSet>, rs: &ReplicaSet, uid: &str) -> Result<(), ClaimError> {
    let name = rs.name_any();
    let references: Vec<&OwnerReference> = rs
        .owner_references()
        .iter()
        .filter(|o| o.uid != uid)
        .collect();
    let patch = json!({
        "metadata": {
            "ownerReferences": if references.is_empty() { Value::Null } else { json!(references) },
            "resourceVersion": rs.resource_version(),
        }
    });
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        result => result.map(drop).map_err(|source| ClaimError {
            action: "release",
            name,
            source,
        }),
    }
}
