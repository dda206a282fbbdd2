//! What the one replica controller needs from its owner kind, implemented by ReplicaSet and
//! ReplicationController (upstream shares one controller between them the same way).

use std::fmt::Debug;

use flotilla_sdk::apimachinery::{LabelSelector, SelectorError};
use flotilla_sdk::k8s_openapi::NamespaceResourceScope;
use flotilla_sdk::k8s_openapi::api::apps::v1::ReplicaSet;
use flotilla_sdk::k8s_openapi::api::core::v1::{PodTemplateSpec, ReplicationController};
use flotilla_sdk::kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A kind that keeps `spec.replicas` pods matching `spec.selector` from `spec.template`.
pub trait ReplicaOwner:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + DeserializeOwned
    + Serialize
    + Clone
    + Debug
    + Send
    + Sync
    + 'static
{
    /// `spec.replicas`, 1 when unset (the API's default).
    fn replicas(&self) -> i32;

    /// `spec.minReadySeconds`.
    fn min_ready_seconds(&self) -> i32;

    /// `spec.selector`.
    ///
    /// # Errors
    /// [`SelectorError`] when the selector is malformed.
    fn selector(&self) -> Result<LabelSelector, SelectorError>;

    /// `spec.template`.
    fn template(&self) -> Option<&PodTemplateSpec>;
}

impl ReplicaOwner for ReplicaSet {
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    fn selector(&self) -> Result<LabelSelector, SelectorError> {
        match &self.spec {
            Some(spec) => LabelSelector::from_label_selector(&spec.selector),
            // No spec: nothing to select, rather than everything in the namespace.
            None => Ok(LabelSelector::nothing()),
        }
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.as_ref())
    }
}

impl ReplicaOwner for ReplicationController {
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    fn selector(&self) -> Result<LabelSelector, SelectorError> {
        // The API defaults an empty selector to the template's labels; do the same for objects that
        // did not go through defaulting.
        let spec = self.spec.as_ref();
        let selector = spec
            .and_then(|s| s.selector.as_ref())
            .filter(|s| !s.is_empty())
            .or_else(|| {
                self.template()
                    .and_then(|t| t.metadata.as_ref())
                    .and_then(|m| m.labels.as_ref())
            });
        Ok(selector.map_or_else(LabelSelector::nothing, LabelSelector::from_map))
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.as_ref())
    }
}
