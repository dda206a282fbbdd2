//! The `disruption` controller: keeps each PodDisruptionBudget's status (how many of its pods are
//! healthy, how many must be, how many may be disrupted now) for the eviction API to check against
//! (upstream `pkg/controller/disruption`).
//!
//! Keys are PDBs; a pod event enqueues every PDB of its namespace whose selector matches the pod
//! (the spec's selector mapping). One sync:
//! * counts the matching pods that are Ready, neither being deleted nor recently evicted
//!   (`status.disruptedPods`, entries younger than [`Timeouts::deletion`]);
//! * works out the expected pod count and the desired healthy count: an integer `minAvailable` is
//!   taken as is over the number of matching pods; a percentage `minAvailable` or any
//!   `maxUnavailable` is scaled over the sum of the replica counts of the pods' controllers, read
//!   from each controller's `/scale` subresource (a Deployment's when the pod's ReplicaSet belongs
//!   to one), so custom resources with a scale subresource work too;
//! * writes the status (with the `DisruptionAllowed` condition, reasons `SufficientPods` /
//!   `InsufficientPods`) only when it changed; a failed sync writes `disruptionsAllowed: 0` with
//!   reason `SyncFailed` (upstream's fail-safe) and retries with the fleet's rate limiter;
//! * resets a matching pod's stale `DisruptionTarget=True` condition (set by an eviction or
//!   preemption whose delete never came) after [`Timeouts::stale_pod_disruption`].
//!
//! Expiries are awaited with a requeue for exactly the time left, never polled. Events (source
//! `controllermanager`, as upstream's recorder): `NoPods`, `CalculateExpectedPodCountFailed`,
//! `UnmanagedPods` on the PDB and `NotDeleted` on a pod whose eviction never completed.
//!
//! Differences from upstream: the stale `DisruptionTarget` cleanup covers the pods some PDB selects
//! (upstream runs a separate pod queue over every pod); pods no PDB selects are deleted by the
//! eviction API without budget checks, so their condition is only stale when the delete itself
//! fails.

mod budget;
mod conditions;
mod reconcile;
mod scale;
mod stale;

use std::sync::Arc;
use std::time::Duration;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::api::policy::v1::PodDisruptionBudget;

/// The waits of the controller, injectable so tests need not wait minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long a pod in `status.disruptedPods` is expected to take to get its deletionTimestamp
    /// before it counts again (upstream's `DeletionTimeout`, 2 minutes: an eviction's delete that
    /// never came must not hold the budget forever).
    pub deletion: Duration,
    /// How long a pod may carry `DisruptionTarget=True` without being deleted before the condition
    /// is reset (upstream's `stalePodDisruptionTimeout`, 2 minutes).
    pub stale_pod_disruption: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            deletion: Duration::from_secs(120),
            stale_pod_disruption: Duration::from_secs(120),
        }
    }
}

/// The controller, named `name` (the registry's `disruption`), at upstream's timeouts.
pub fn controller(name: &str) -> Controller<PodDisruptionBudget> {
    controller_with(name, Timeouts::default())
}

/// The controller with the given `timeouts`.
pub fn controller_with(name: &str, timeouts: Timeouts) -> Controller<PodDisruptionBudget> {
    let timeouts = Arc::new(timeouts);
    Controller::<PodDisruptionBudget>::new(name)
        .watches_selector::<Pod>("spec.selector")
        .reads::<Pod>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, Arc::clone(&timeouts)))
}
