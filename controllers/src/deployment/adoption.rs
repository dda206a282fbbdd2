//! Claiming ReplicaSets (upstream `ClaimReplicaSets`): the Deployment's own that still match stay,
//! those that stopped matching are released, matching orphans are adopted. The decision is the one the
//! replica controllers make for pods ([`claim`]); this file makes the writes.

use flotilla_sdk::apimachinery::LabelSelector;
use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use flotilla_sdk::kube::api::Api;
use flotilla_sdk::kube::{Resource, ResourceExt};

use super::super::claim::claim;
use super::super::controller_ref::{ClaimError, adopt, recheck_owner, release};

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
    if !claims.adopt.is_empty() {
        let deployments: Api<Deployment> = Api::namespaced(
            api.clone().into_client(),
            d.namespace().as_deref().unwrap_or_default(),
        );
        recheck_owner(&deployments, d).await?;
    }
    for rs in claims.adopt {
        mine.extend(adopt(api, rs, d).await?);
    }
    Ok(mine)
}
