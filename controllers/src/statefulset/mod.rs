//! The `statefulset` controller (upstream `pkg/controller/statefulset`): keeps a StatefulSet's pods
//! at stable ordinal identities `<set>-<ordinal>` (from `spec.ordinals.start`), each with its
//! hostname, subdomain and PersistentVolumeClaims `<template>-<set>-<ordinal>` created before it.
//!
//! Under `OrderedReady` pods are created in ordinal order, each once its predecessors are Running,
//! Ready and available, and deleted in reverse order one at a time; under `Parallel` all at once.
//! Template changes are recorded as ControllerRevisions and rolled out highest ordinal first down to
//! `rollingUpdate.partition` (`maxUnavailable` at a time when set), or left to pod deletions under
//! `OnDelete`. Claims get the owner references `persistentVolumeClaimRetentionPolicy` asks for, so
//! the garbage collector deletes them with the set or with a scaled-away pod.

mod claims;
mod identity;
mod names;
mod ordinals;
mod plan;
mod pod_control;
mod pods;
mod reconcile;
mod revision_control;
mod revisions;
mod status;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use flotilla_sdk::k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

/// The controller named `name` (the registry's `statefulset`), as the worker runs it: a set's pods
/// are shipped with each item, events of pods matching a set's selector (orphans to adopt) enqueue it
/// too, and its revisions and claims are read from the cache (upstream watches neither: a sync that
/// writes them is held back by the fleet until the cache has seen the writes).
pub fn controller(name: &str) -> Controller<StatefulSet> {
    Controller::<StatefulSet>::new(name)
        .owns::<Pod>()
        .prefetch_owned::<Pod>()
        .watches_selector::<Pod>("spec.selector")
        .reads::<Pod>()
        .reads::<ControllerRevision>()
        .reads::<PersistentVolumeClaim>()
        .reconcile(reconcile::reconcile)
}
