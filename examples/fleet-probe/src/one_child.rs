//! The `one-child` probe: every ConfigMap labelled `flotilla.dev/probe=parent` gets exactly one child
//! ConfigMap (`generateName: <parent>-child-`, controlled by the parent). The child's creation wakes
//! the parent again (it owns ConfigMaps); only read-your-writes stops a second child then.

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::core::v1::ConfigMap;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, PostParams};
use flotilla_sdk::kube::{Resource, ResourceExt};
use flotilla_sdk::{Action, CacheQuery, Context, Controller, Request};

use crate::PROBE_LABEL;

/// Errors of the one-child probe.
#[derive(Debug, thiserror::Error)]
pub enum OneChildError {
    /// The parent from the cache lacks a uid or namespace.
    #[error("parent {0} lacks a uid or namespace")]
    Incomplete(String),
    /// The coordinator's cache could not be read.
    #[error("cannot list the children")]
    Cache(#[from] flotilla_sdk::CacheError),
    /// The child could not be created.
    #[error("cannot create the child")]
    Kube(#[from] kube::Error),
}

/// Whether a ConfigMap is a parent of the probe.
pub fn is_parent(configmap: &ConfigMap) -> bool {
    configmap
        .labels()
        .get(PROBE_LABEL)
        .is_some_and(|v| v == "parent")
}

/// The child a parent gets.
///
/// # Errors
/// [`OneChildError::Incomplete`] when the parent has no uid or namespace.
pub fn child_of(parent: &ConfigMap) -> Result<ConfigMap, OneChildError> {
    let incomplete = || OneChildError::Incomplete(parent.name_any());
    let mut owner = parent.controller_owner_ref(&()).ok_or_else(incomplete)?;
    owner.block_owner_deletion = Some(true);
    Ok(ConfigMap {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-child-", parent.name_any())),
            namespace: Some(parent.namespace().ok_or_else(incomplete)?),
            labels: Some(BTreeMap::from([(
                PROBE_LABEL.to_owned(),
                "child".to_owned(),
            )])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("parent".to_owned(), parent.name_any())])),
        ..ConfigMap::default()
    })
}

/// The one-child controller.
pub fn controller() -> Controller<ConfigMap> {
    Controller::<ConfigMap>::new("one-child")
        .owns::<ConfigMap>()
        .reads::<ConfigMap>()
        .reconcile(reconcile)
}

async fn reconcile(request: Request<ConfigMap>, ctx: Context) -> Result<Action, OneChildError> {
    let Some(parent) = request.object().filter(|p| is_parent(p)) else {
        return Ok(Action::await_change());
    };
    let child = child_of(parent)?;
    let namespace = child.metadata.namespace.clone().unwrap_or_default();
    let uid = parent.uid().unwrap_or_default();
    let children: Vec<ConfigMap> = ctx
        .cache()
        .list(&CacheQuery::all().namespace(&namespace).owned_by(&uid))
        .await?;
    if children.is_empty() {
        let created = Api::<ConfigMap>::namespaced(ctx.client(), &namespace)
            .create(&PostParams::default(), &child)
            .await?;
        tracing::info!(child = %created.name_any(), "created the child");
    }
    Ok(Action::await_change())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_child_is_generated_from_the_parent_name_and_controlled_by_it() {
        let mut parent = ConfigMap::default();
        parent.metadata.name = Some("p".into());
        parent.metadata.namespace = Some("ns".into());
        parent.metadata.uid = Some("u-9".into());
        parent
            .labels_mut()
            .insert(PROBE_LABEL.into(), "parent".into());
        assert!(is_parent(&parent));
        let child = child_of(&parent).unwrap();
        assert_eq!(child.metadata.generate_name.as_deref(), Some("p-child-"));
        assert_eq!(child.metadata.name, None);
        assert!(!is_parent(&child), "a child must not become a parent");
        let owner = &child.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("u-9", Some(true)));
    }

    #[test]
    fn a_parent_without_a_uid_is_an_error_not_a_panic() {
        let mut parent = ConfigMap::default();
        parent.metadata.name = Some("p".into());
        parent.metadata.namespace = Some("ns".into());
        assert!(matches!(
            child_of(&parent),
            Err(OneChildError::Incomplete(_))
        ));
    }
}
