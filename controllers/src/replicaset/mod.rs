//! The `replicaset` and `replicationcontroller` controllers: one implementation keeping
//! `spec.replicas` pods from the template (upstream `pkg/controller/replicaset`).

mod owner;
mod pods;
mod ranking;
mod reconcile;
mod slow_start;
mod status;

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;

pub use owner::ReplicaOwner;

use flotilla_sdk::Controller;

/// The controller of owner kind `K`, named `name` (the registry's `replicaset` or
/// `replicationcontroller`), as the worker runs it: owned pods are shipped with each item, and
/// events of pods matching an owner's selector (orphans to adopt) enqueue it too.
pub fn controller<K: ReplicaOwner>(name: &str) -> Controller<K> {
    Controller::<K>::new(name)
        .owns::<Pod>()
        .prefetch_owned::<Pod>()
        .watches_selector::<Pod>("spec.selector")
        .reads::<Pod>()
        .reconcile(reconcile::reconcile::<K>)
}
