//! The `ttl` controller (upstream `pkg/controller/ttl`): keeps the `node.alpha.kubernetes.io/ttl`
//! annotation of every Node at the number of seconds kubelets may cache Secrets and ConfigMaps, by
//! cluster size ([`boundaries`]: 0 s up to 100 nodes, then 15, 30, 60 and 300 s, with hysteresis).
//! Keys are Nodes; a Node whose annotation differs from the cluster's TTL is patched (a strategic
//! merge patch of that one annotation, as upstream). Like upstream it writes no Events, and a change
//! of TTL reaches the other Nodes at their next event (kubelets update their Node regularly), not by
//! a fan-out.
//!
//! # The cluster's TTL without a counter
//!
//! Upstream counts Nodes in its informer handlers and moves one step of the table when the count
//! leaves the step's range, so the step depends on history. A fleet worker keeps no such counter (a
//! key may run on any worker, after any failover), so the step is derived from the cluster itself:
//! the TTL most Nodes carry now names the step the cluster is in, and the Node count read from the
//! cache moves it as upstream's would ([`boundaries::desired_ttl`]). A worker reuses that answer for
//! [`census::REFRESH`] rather than list every Node at every Node event.

mod boundaries;
mod census;
mod reconcile;

use std::sync::Arc;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::core::v1::Node;

/// The controller, named `name` (the registry's `ttl`), as the worker runs it: every Node event
/// reconciles that Node, reading the others from the cache.
pub fn controller(name: &str) -> Controller<Node> {
    let census = Arc::new(census::Census::default());
    Controller::<Node>::new(name)
        .reads::<Node>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, Arc::clone(&census)))
}
