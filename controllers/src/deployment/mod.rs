//! The `deployment` controller (upstream `pkg/controller/deployment`): one ReplicaSet per pod
//! template, rolled out by RollingUpdate or Recreate, scaled proportionally mid-rollout, with revision
//! history, pause, progress deadline and the Deployment's status.

mod adoption;
mod annotations;
mod cleanup;
mod conditions;
mod error;
mod fenceposts;
mod hash;
mod progress;
mod reconcile;
mod replica_sets;
mod rolling;
mod rollout;
mod scale;
mod spec;
mod status;
mod sync;
mod template;

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;

pub use error::Error;

use flotilla_sdk::Controller;

/// The controller, named `name` (the registry's `deployment`), as the worker runs it. Owned ReplicaSets are shipped with each item and their events
/// (a status change after pods come and go included) enqueue the Deployment; events of ReplicaSets
/// matching its selector (orphans to adopt) enqueue it too. Pods are read from the cache only by
/// Recreate, to see whether old pods still run.
pub fn controller(name: &str) -> Controller<Deployment> {
    Controller::<Deployment>::new(name)
        .owns::<ReplicaSet>()
        .prefetch_owned::<ReplicaSet>()
        .watches_selector::<ReplicaSet>("spec.selector")
        .reads::<ReplicaSet>()
        .reads::<Pod>()
        .reconcile(reconcile::reconcile)
}
