//! The writes of a claim (upstream `ControllerRefManager`'s adopt and release): adding an owner's
//! controller reference to an orphan, removing it from an object that stopped matching. Each patch carries
//! the resourceVersion the decision saw, so it fails if the object changed meanwhile (someone else may
//! have adopted it); an object already gone needs nothing.

use std::fmt::Debug;

use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, Patch, PatchParams};
use flotilla_sdk::kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Errors of adopting or releasing an object.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The API refused the write.
    #[error("cannot {action} {kind} {name}")]
    Write {
        /// `adopt` or `release`.
        action: &'static str,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A fresh read shows the owner being deleted, gone, or replaced by another of the same name: it
    /// must adopt nothing.
    #[error("{kind} {name} is being deleted or was replaced; it adopts nothing")]
    OwnerGone {
        /// The owner's kind.
        kind: String,
        /// The owner's name.
        name: String,
    },
    /// The fresh read of the owner failed.
    #[error("cannot read {kind} {name} before adopting")]
    Recheck {
        /// The owner's kind.
        kind: String,
        /// The owner's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// Upstream's `RecheckDeletionTimestamp`: before the first adoption, a fresh read of `owner` (not the
/// cache the decision was made on) must show it still there, with the same uid, and not being deleted.
/// Otherwise an owner whose orphaning deletion just released its objects would adopt them again from a
/// stale view, and the garbage collector would then delete them with it.
///
/// # Errors
/// [`ClaimError::OwnerGone`] when it must not adopt, [`ClaimError::Recheck`] when the read fails.
pub async fn recheck_owner<O>(api: &Api<O>, owner: &O) -> Result<(), ClaimError>
where
    O: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let kind = O::kind(&()).to_lowercase();
    let name = owner.name_any();
    let fresh = api
        .get_opt(&name)
        .await
        .map_err(|source| ClaimError::Recheck {
            kind: kind.clone(),
            name: name.clone(),
            source,
        })?;
    match fresh {
        Some(fresh) if fresh.uid() == owner.uid() && fresh.meta().deletion_timestamp.is_none() => {
            Ok(())
        }
        _ => Err(ClaimError::OwnerGone { kind, name }),
    }
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
    ClaimError::Write {
        action,
        kind: T::kind(&()).to_lowercase(),
        name: object.name_any(),
        source,
    }
}
