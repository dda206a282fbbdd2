//! The writes of a claim (upstream `ControllerRefManager`'s adopt and release): adding an owner's
//! controller reference to an orphan, removing it from an object that stopped matching. Each patch carries
//! the resourceVersion the decision saw, so it fails if the object changed meanwhile (someone else may
//! have adopted it); an object already gone needs nothing.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Errors of adopting or releasing an object.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {kind} {name}")]
pub struct ClaimError {
    /// `adopt` or `release`.
    pub action: &'static str,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// Why.
    #[source]
    pub source: kube::Error,
}

/// The controller reference `owner` puts on what it controls, blocking the owner's foreground deletion.
/// `None` when the owner lacks a name or uid.
pub fn controller_ref<O: Resource<DynamicType = ()>>(owner: &O) -> Option<OwnerReference> {
    let mut reference = owner.controller_owner_ref(&())?;
    reference.block_owner_deletion = Some(true);
    Some(reference)
}

/// Adds `owner`'s controller reference to the orphan `object`; the adopted object, or `None` when it is
/// gone.
///
/// # Errors
/// [`ClaimError`] when the API refuses, e.g. 409 because the object changed since it was read.
pub async fn adopt<T, O>(api: &Api<T>, object: T, owner: &O) -> Result<Option<T>, ClaimError>
where
    T: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    O: Resource<DynamicType = ()>,
{
    let mut references = object.owner_references().to_vec();
    references.extend(controller_ref(owner));
    let patch = json!({
        "metadata": {"ownerReferences": references, "resourceVersion": object.resource_version()}
    });
    match write(api, &object, &patch).await {
        Ok(adopted) => Ok(adopted),
        Err(source) => Err(error("adopt", &object, source)),
    }
}

/// Removes the controller reference of the owner with `owner_uid` from `object`.
///
/// # Errors
/// [`ClaimError`] when the API refuses, e.g. 409 because the object changed since it was read.
pub async fn release<T>(api: &Api<T>, object: &T, owner_uid: &str) -> Result<(), ClaimError>
where
    T: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let references: Vec<&OwnerReference> = object
        .owner_references()
        .iter()
        .filter(|o| o.uid != owner_uid)
        .collect();
    let patch = json!({
        "metadata": {
            "ownerReferences": if references.is_empty() { Value::Null } else { json!(references) },
            "resourceVersion": object.resource_version(),
        }
    });
    match write(api, object, &patch).await {
        Ok(_) => Ok(()),
        Err(source) => Err(error("release", object, source)),
    }
}

/// The merge patch; `Ok(None)` when the object is gone.
async fn write<T>(api: &Api<T>, object: &T, patch: &Value) -> Result<Option<T>, kube::Error>
where
    T: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    match api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(written) => Ok(Some(written)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(err) => Err(err),
    }
}

fn error<T: Resource<DynamicType = ()>>(
    action: &'static str,
    object: &T,
    source: kube::Error,
) -> ClaimError {
    ClaimError {
        action,
        kind: T::kind(&()).to_lowercase(),
        name: object.name_any(),
        source,
    }
}
