//! The `daemonset` controller (upstream `pkg/controller/daemon`): one pod per eligible node, pinned
//! to it by required node affinity and bound by the scheduler; RollingUpdate (maxUnavailable,
//! maxSurge) and OnDelete; ControllerRevisions as history; failed pods replaced with back-off; the
//! DaemonSet's status and Events as kube-controller-manager writes them.

mod backoff;
mod manage;
mod nodes;
mod pods;
mod reconcile;
mod revisions;
mod rolling;
mod status;
pub(crate) mod tolerations;

use std::sync::Arc;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Pod};

/// The controller, named `name` (the registry's `daemonset`), as the worker runs it. Owned pods and
/// revisions ship with each item and their events enqueue the DaemonSet; orphans matching its
/// selector enqueue it too (to be adopted). Every Node event enqueues every DaemonSet (the SDK's
/// fan-out): a node added, relabelled, tainted or removed changes where pods belong, and the queue
/// coalesces the keys a burst of node updates queues. No periodic resync: minReadySeconds and the
/// failed-pod back-off requeue for their own times.
pub fn controller(name: &str) -> Controller<DaemonSet> {
    let backoff = Arc::new(backoff::FailedPodBackoff::default());
    Controller::<DaemonSet>::new(name)
        .owns::<Pod>()
        .owns::<ControllerRevision>()
        .prefetch_owned::<Pod>()
        .prefetch_owned::<ControllerRevision>()
        .watches_selector::<Pod>("spec.selector")
        .watches_selector::<ControllerRevision>("spec.selector")
        .watches_all::<Node>()
        .reads::<Pod>()
        .reads::<ControllerRevision>()
        .reads::<Node>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, backoff.clone()))
}
