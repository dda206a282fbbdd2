//! The `service-cidr` controller (upstream `pkg/controller/servicecidrs`): puts the finalizer
//! `networking.k8s.io/service-cidr-finalizer` on every ServiceCIDR and its `Ready` condition `True`
//! ("Kubernetes Service CIDR is ready"); on deletion, removes the finalizer only once no IPAddress
//! allocated by kube-apiserver lies in the ServiceCIDR and in no other ([`orphans`]), and not before
//! 10 s after the deletion began (so kube-apiserver's allocators have stopped using it) — until then
//! `Ready` is `False` with reason `Terminating`. Keys are ServiceCIDRs; every IPAddress event and
//! every ServiceCIDR event re-evaluates every ServiceCIDR (upstream re-evaluates those containing the
//! IP, or overlapping the ServiceCIDR; a cluster has a handful of ServiceCIDRs, so the fan-out costs
//! little and needs no containment index). Conditions are written by server-side apply of the status
//! with the controller's name as field manager, as upstream, but only when they change (upstream
//! re-applies at every sync).
//!
//! It serves `networking.k8s.io/v1` (GA in Kubernetes v1.33, and what devcluster serves);
//! kube-controller-manager v1.32 reads `v1beta1` behind the `MultiCIDRServiceAllocator` gate.

mod orphans;
mod reconcile;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};

/// The controller, named `name` (the registry's `service-cidr`), as the worker runs it.
pub fn controller(name: &str) -> Controller<ServiceCIDR> {
    Controller::<ServiceCIDR>::new(name)
        .watches_all::<ServiceCIDR>()
        .watches_all::<IPAddress>()
        .reads::<IPAddress>()
        .reconcile(reconcile::reconcile)
}
