//! The `endpoint` controller (upstream `pkg/controller/endpoint`): keeps the Endpoints of every
//! Service with a selector equal to the pods it selects. Each pod with an IP is listed under
//! `addresses` when Ready (or when the Service publishes not-ready addresses) and under
//! `notReadyAddresses` otherwise, per Service port resolved on that pod (a named `targetPort` may
//! differ between pods); the subsets are repacked into upstream's canonical layout, truncated at
//! 1000 addresses, labelled like the Service (plus `service.kubernetes.io/headless` when it has no
//! cluster IP) and stamped with `endpoints.kubernetes.io/last-change-trigger-time`.
//!
//! Services without a selector and ExternalName Services are left alone; the Endpoints of a deleted
//! Service are deleted (a leader-election record excepted). Like upstream, an Endpoints written while
//! no Service of its name exists is not deleted on its own events; upstream's start-up sweep of such
//! leftovers (`checkLeftoverEndpoints`) is not done. Events only on a failed write, as upstream.
//!
//! `endpoints.kubernetes.io/last-change-trigger-time` follows upstream's trigger-time tracker, which
//! lives in each worker's memory (see `trigger_time`).
//!
//! `--endpoint-updates-batch-period` (default 0): with a period, a sync caused by a pod event is
//! put off by that period (the key is requeued), so pod changes within it land in one write, as
//! upstream's delayed enqueue of pod events; Service and Endpoints events sync at once.

mod capacity;
mod md5;
mod pods;
mod reconcile;
mod repack;
mod spew;
mod trigger_time;

use std::sync::Arc;
use std::time::Duration;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::core::v1::{Endpoints, Pod, Service};

pub(crate) use repack::repack_subsets;

/// The controller named `name` (the registry's `endpoint`), as the worker runs it: pods matching a
/// Service's selector and the Endpoints of the same name enqueue the Service; the reconcile reads
/// both from the cache. `batch_period` is `--endpoint-updates-batch-period`.
pub fn controller(name: &str, batch_period: Duration) -> Controller<Service> {
    let shared = Arc::new(reconcile::Shared::new(batch_period));
    Controller::<Service>::new(name)
        .watches_selector::<Pod>("spec.selector")
        .watches_field::<Endpoints>("metadata.name")
        .reads::<Pod>()
        .reads::<Endpoints>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, shared.clone()))
}
