//! The `podgc` controller (upstream `pkg/controller/podgc/gc_controller.go`): removes terminated pods
//! beyond `--terminated-pod-gc-threshold` (evicted, then oldest, first), pods bound to nodes that no
//! longer exist (after a 40 s quarantine and a live re-check of the node), terminating pods never
//! scheduled, and terminating pods on a not-Ready node tainted `node.kubernetes.io/out-of-service`.
//! A pod not yet terminal is marked Failed first (with a `DisruptionTarget` condition when its node
//! is gone), then deleted with grace period 0. Like upstream it writes no Events.
//!
//! # Why one cluster-wide key
//!
//! Upstream runs one loop over every pod every 20 s. The threshold is a property of the whole
//! cluster (the oldest terminated pods anywhere go first), so some key must see every terminated pod
//! at once: per-pod keys cannot tell which pods are the oldest without each listing them all, and
//! per-node keys (which would make the orphan and out-of-service checks event-driven) see neither
//! the other nodes' terminated pods nor unscheduled pods, which have no node. A second, per-node
//! mechanism would only move work the cluster-wide pass does anyway, and the orphan check waits out
//! a 40 s quarantine whatever wakes it. So the pass stays one key, requeued with requeue-after
//! every 20 s (sooner when a quarantine ends first): the same polling as upstream and no more, on
//! one worker at a time, its lists served by the coordinator's cache.
//!
//! The fleet keys controllers by objects, so the pass hangs on one that always exists: the key of
//! Namespace `kube-system`, which kube-apiserver refuses to delete ([`anchor`]). Other Namespace keys
//! return at once; Namespace events are rare. A fleet scoped to some namespaces, which does not see
//! `kube-system`, runs the pass on the first of its namespaces by name, over its own pods only.

mod anchor;
mod choice;
mod quarantine;
mod reconcile;
mod removal;

use std::sync::Arc;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::core::v1::{Namespace, Node, Pod};

use reconcile::PodGc;

/// kube-controller-manager's default `--terminated-pod-gc-threshold`.
pub const DEFAULT_TERMINATED_POD_GC_THRESHOLD: i32 = 12500;

/// The controller, named `name` (the registry's `podgc`), keeping at most `threshold` terminated
/// pods (0 or less: any number), as the worker runs it: keyed by Namespace (see the module doc),
/// reading every Pod and Node from the cache.
pub fn controller(name: &str, threshold: i32) -> Controller<Namespace> {
    let gc = Arc::new(PodGc::new(threshold));
    Controller::<Namespace>::new(name)
        .reads::<Pod>()
        .reads::<Node>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, Arc::clone(&gc)))
}
