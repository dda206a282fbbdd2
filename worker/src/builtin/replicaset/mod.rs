//! The `replicaset` and `replicationcontroller` controllers: one implementation keeping
//! `spec.replicas` pods from the template (upstream `pkg/controller/replicaset`).

mod owner;
mod pods;
mod ranking;
mod reconcile;
mod slow_start;
mod status;

use k8s_openapi::api::core::v1::Pod;

pub use owner::ReplicaOwner;

use crate::sdk::Controller;

/// kube-controller-manager's default of `--concurrent-replicaset-syncs` and `--concurrent-rc-syncs`.
pub const DEFAULT_CONCURRENCY: u32 = 5;

/// The controller of owner kind `K` as the worker runs it: owned pods are shipped with each item, and
/// events of pods matching an owner's selector (orphans to adopt) enqueue it too.
pub fn controller<K: ReplicaOwner>() -> Controller<K> {
    Controller::<K>::new(K::CONTROLLER)
        .owns::<Pod>()
        .prefetch_owned::<Pod>()
        .watches_selector::<Pod>("spec.selector")
        .reads::<Pod>()
        .concurrency(DEFAULT_CONCURRENCY)
        .reconcile(reconcile::reconcile::<K>)
}
