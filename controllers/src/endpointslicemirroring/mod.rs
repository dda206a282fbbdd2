//! The `endpointslicemirroring` controller (upstream `pkg/controller/endpointslicemirroring`): for
//! a Service without a selector whose Endpoints someone else writes, mirrors each subset of those
//! Endpoints into an EndpointSlice per address family (at most
//! `--mirroring-max-endpoints-per-subset` addresses of a subset), labelled
//! `endpointslice.kubernetes.io/managed-by: endpointslicemirroring-controller.k8s.io` and
//! `kubernetes.io/service-name`, with the Endpoints' own labels and annotations, and controlled by the
//! Endpoints (not the Service). Mirrored slices are deleted when the Endpoints goes, is labelled
//! `endpointslice.kubernetes.io/skip-mirror: "true"`, holds a leader-election record, or when the
//! Service goes or gets a selector (its Endpoints are then the endpoints controller's).
//!
//! Keys are Endpoints (`namespace/name`, the Service's key too, as upstream's): its own events, the
//! Service of the same name and the slices it controls enqueue it.
//! `--mirroring-endpointslice-updates-batch-period` (default 0) puts off a sync caused by a slice
//! change by that period, as upstream delays those.

mod desired;
mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::core::v1::{Endpoints, Service};
use flotilla_sdk::k8s_openapi::api::discovery::v1::EndpointSlice;

/// The controller named `name` (the registry's `endpointslicemirroring`), as the worker runs it:
/// `max_per_subset` is `--mirroring-max-endpoints-per-subset`, `batch_period`
/// `--mirroring-endpointslice-updates-batch-period`.
pub fn controller(
    name: &str,
    max_per_subset: i32,
    batch_period: Duration,
) -> Controller<Endpoints> {
    let shared = Arc::new(reconcile::Shared {
        max_per_subset: usize::try_from(max_per_subset).unwrap_or(1).max(1),
        batch_period,
    });
    Controller::<Endpoints>::new(name)
        .owns::<EndpointSlice>()
        .watches_field::<Service>("metadata.name")
        .reads::<Service>()
        .reads::<EndpointSlice>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, shared.clone()))
}
