//! The `endpointslice` controller (upstream `pkg/controller/endpointslice` with the reconciler of
//! `k8s.io/endpointslice`): keeps the EndpointSlices of every Service with a selector, one set per
//! address family, each slice holding at most `--max-endpoints-per-slice` endpoints of pods with the
//! same resolved ports, and changes as few slices as it can when pods come, go or change readiness.
//!
//! Keys are Services. Events of pods matching a Service's selector and of its slices (their
//! controller reference) enqueue it; pods, slices and Nodes (for zones and hints) are read from the
//! cache. Slices carry kube-controller-manager's labels, owner reference, generated names,
//! conditions, zones, hints and the `endpoints.kubernetes.io/last-change-trigger-time` annotation.
//!
//! `--endpointslice-updates-batch-period` is accepted and validated but not applied: the fleet's
//! queue already coalesces the events that arrive while a Service waits or syncs, and read-your-writes
//! holds it back until the cache has the last writes; a further delay would need the coordinator to
//! delay pod events per controller.

mod endpoint;
mod hints;
mod plan;
mod reconcile;
mod slice_meta;
mod trigger_time;

use std::sync::Arc;
use std::time::Duration;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Pod, Service};
use flotilla_sdk::k8s_openapi::api::discovery::v1::EndpointSlice;

use reconcile::Shared;
use trigger_time::Tracker;

/// kube-controller-manager's default `--max-endpoints-per-slice`.
pub const DEFAULT_MAX_ENDPOINTS_PER_SLICE: i32 = 100;
/// The largest `--max-endpoints-per-slice` kube-controller-manager accepts (the API's limit of
/// endpoints in one slice).
pub const MAX_MAX_ENDPOINTS_PER_SLICE: i32 = 1000;
/// kube-controller-manager's default `--endpointslice-updates-batch-period`: none.
pub const DEFAULT_UPDATES_BATCH_PERIOD: Duration = Duration::ZERO;

/// The controller named `name` (the registry's `endpointslice`) writing at most
/// `max_endpoints_per_slice` endpoints per slice (clamped to 1 ..= 1000; the worker refuses other
/// values at start-up).
pub fn controller(name: &str, max_endpoints_per_slice: i32) -> Controller<Service> {
    let max = max_endpoints_per_slice.clamp(1, MAX_MAX_ENDPOINTS_PER_SLICE);
    let shared = Arc::new(Shared {
        max_endpoints_per_slice: usize::try_from(max).unwrap_or(1),
        tracker: Tracker::default(),
    });
    Controller::<Service>::new(name)
        .watches_selector::<Pod>("spec.selector")
        .owns::<EndpointSlice>()
        .reads::<Pod>()
        .reads::<EndpointSlice>()
        .reads::<Node>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, shared.clone()))
}
