//! The `garbagecollector` controller (upstream `pkg/controller/garbagecollector`): deletes objects whose
//! owners are all gone, deletes the dependents of owners deleted in the foreground before letting the
//! owner go, and orphans the dependents of owners deleted with the `orphan` policy.
//!
//! The ownerReference graph lives in the coordinator, over informers of every deletable resource it
//! discovers (CRDs included): it sends this controller only the objects that may need action, each with
//! its dependents. Every decision to delete is checked against the API first: an owner counts as absent
//! only when a live GET finds no object of that name with that uid, as upstream's `isDangling` does.

mod dependents;
mod owners;
mod reconcile;
mod resolver;

use flotilla_sdk::kube::api::DynamicObject;

use flotilla_sdk::Controller;

/// The controller, named `name` (the registry's `garbagecollector`), as the worker runs it.
pub fn controller(name: &str) -> Controller<DynamicObject> {
    let resolver = resolver::Resolver::default();
    Controller::owner_graph(name)
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, resolver.clone()))
}
