//! The expected pod count of a budget scaled over its pods' controllers (upstream's
//! `getExpectedScale` and its finders): each pod's controller is found through its controller
//! ownerReference and its replica count read live. A ReplicaSet that a Deployment controls counts
//! as its Deployment (so a rollout's old and new ReplicaSets are not counted twice); every other
//! kind is read through its `/scale` subresource, which is how custom resources take part.

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use flotilla_sdk::kube::api::{Api, ApiResource, DynamicObject};
use flotilla_sdk::kube::core::GroupVersionKind;
use flotilla_sdk::kube::discovery::pinned_kind;
use flotilla_sdk::kube::{self, ResourceExt};

/// Why the expected count could not be found.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    /// A pod's controller does not exist (or is another object of the same name), or has no scale.
    #[error("found no controllers for pod {0:?}")]
    NoController(String),
    /// Reading a controller or its scale failed.
    #[error("cannot read the scale of {kind} {name}")]
    Read {
        /// The controller's kind.
        kind: String,
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// The sum of the replica counts of the controllers of `pods` (each controller once), and the names
/// of the pods that have no controller (they are left out, with a warning Event, as upstream).
///
/// # Errors
/// [`ScaleError`] when a controlled pod's controller cannot be found or read.
pub async fn expected_scale(
    client: &kube::Client,
    namespace: &str,
    pods: &[Pod],
) -> Result<(i32, Vec<String>), ScaleError> {
    let mut scales: BTreeMap<String, i32> = BTreeMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let Some(owner) = controller_of(pod.owner_references()) else {
            unmanaged.push(pod.name_any());
            continue;
        };
        if scales.contains_key(&owner.uid) {
            continue;
        }
        match scale_of(client, namespace, owner).await? {
            Some((uid, replicas)) => {
                scales.insert(uid, replicas);
            }
            None => return Err(ScaleError::NoController(pod.name_any())),
        }
    }
    let total = scales.values().fold(0i32, |sum, n| sum.saturating_add(*n));
    Ok((total, unmanaged))
}

fn controller_of(refs: &[OwnerReference]) -> Option<&OwnerReference> {
    refs.iter().find(|r| r.controller == Some(true))
}

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

fn read_error(owner: &OwnerReference, source: kube::Error) -> ScaleError {
    ScaleError::Read {
        kind: owner.kind.clone(),
        name: owner.name.clone(),
        source,
    }
}

/// A live read where 404 is "no such controller".
fn found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, kube::Error> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(err) => Err(err),
    }
}

/// (uid, replicas) of the controller `owner` stands for, None when it does not exist.
async fn scale_of(
    client: &kube::Client,
    namespace: &str,
    owner: &OwnerReference,
) -> Result<Option<(String, i32)>, ScaleError> {
    if owner.kind == "ReplicaSet" && group_of(&owner.api_version) == "apps" {
        return replica_set_scale(client, namespace, owner).await;
    }
    let resource = resource_of(client, owner).await?;
    let Some(resource) = resource else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let scale =
        found(api.get_subresource("scale", &owner.name).await).map_err(|e| read_error(owner, e))?;
    Ok(scale
        .filter(|s| s.metadata.uid.as_deref() == Some(owner.uid.as_str()))
        .map(|s| {
            let replicas = s.data["spec"]["replicas"].as_i64().unwrap_or(0);
            (
                owner.uid.clone(),
                i32::try_from(replicas).unwrap_or(i32::MAX),
            )
        }))
}

/// A ReplicaSet's replicas, or its Deployment's when one controls it.
async fn replica_set_scale(
    client: &kube::Client,
    namespace: &str,
    owner: &OwnerReference,
) -> Result<Option<(String, i32)>, ScaleError> {
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let Some(rs) = found(sets.get(&owner.name).await).map_err(|e| read_error(owner, e))? else {
        return Ok(None);
    };
    if rs.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
        return Ok(None);
    }
    if let Some(deployment) = controller_of(rs.owner_references())
        .filter(|r| r.kind == "Deployment" && group_of(&r.api_version) == "apps")
    {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        let d = found(deployments.get(&deployment.name).await)
            .map_err(|e| read_error(deployment, e))?;
        return Ok(d
            .filter(|d| d.metadata.uid.as_deref() == Some(deployment.uid.as_str()))
            .map(|d| {
                let replicas = d.spec.and_then(|s| s.replicas).unwrap_or(1);
                (deployment.uid.clone(), replicas)
            }));
    }
    let replicas = rs.spec.and_then(|s| s.replicas).unwrap_or(1);
    Ok(Some((owner.uid.clone(), replicas)))
}

/// The API resource of the owner's kind: the built-in scalable kinds directly, others by discovery
/// (None when the server does not serve the kind).
async fn resource_of(
    client: &kube::Client,
    owner: &OwnerReference,
) -> Result<Option<ApiResource>, ScaleError> {
    let known = match (group_of(&owner.api_version), owner.kind.as_str()) {
        ("apps", "Deployment") => Some(ApiResource::erase::<Deployment>(&())),
        ("apps", "StatefulSet") => Some(ApiResource::erase::<
            flotilla_sdk::k8s_openapi::api::apps::v1::StatefulSet,
        >(&())),
        ("", "ReplicationController") => Some(ApiResource::erase::<
            flotilla_sdk::k8s_openapi::api::core::v1::ReplicationController,
        >(&())),
        _ => None,
    };
    if known.is_some() {
        return Ok(known);
    }
    let (group, version) = match owner.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", owner.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &owner.kind);
    match pinned_kind(client, &gvk).await {
        Ok((resource, _)) => Ok(Some(resource)),
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(source) => Err(read_error(owner, source)),
    }
}
