//! The `nodeipam` controller (upstream `pkg/controller/nodeipam`, `RangeAllocator` only): with
//! `--allocate-node-cidrs`, gives every Node without `spec.podCIDRs` one range of
//! `--node-cidr-mask-size[-ipv4|-ipv6]` from each `--cluster-cidr` (one per family when dual-stack),
//! never one a Node already has nor one overlapping `--service-cluster-ip-range`, and writes it as
//! `spec.podCIDR` (the first) and `spec.podCIDRs`. A Node deleted frees its range: the next Node
//! may get it. Events as upstream, reported as `cidrAllocator`: `CIDRNotAvailable` when a cluster
//! CIDR is full, `CIDRAssignmentFailed` when a Node's write keeps failing (both Normal, "Node <name>
//! status is now: <reason>"). The `NetworkUnavailable` condition and the `CloudAllocator` belong to
//! cloud providers and are not implemented; without `--allocate-node-cidrs` the controller does
//! nothing, as kube-controller-manager does not start it.
//!
//! # Why two Nodes never get one range
//!
//! Upstream keeps a bitmap of used ranges in the one kube-controller-manager process that leads. A
//! fleet has many workers reconciling at once and any of them may run the next reconcile, so a
//! bitmap per worker would hand one range to two Nodes. Instead:
//!
//! 1. **One allocator at a time, fleet-wide.** Every allocation happens in one pass over all Nodes
//!    waiting for ranges, run by one key: Namespace `kube-system`'s, which always exists (as the pod
//!    GC's). The fleet processes a key on at most one worker at a time, through failures (a key held
//!    by a lost worker is re-dispatched only after its lease has expired, and a worker stops
//!    reconciling before its lease can run out), so no two passes overlap; the default concurrency
//!    is 1 because more would never be used.
//! 2. **No memory between passes.** Each pass rebuilds the used set from every Node's `podCIDRs` and
//!    the service ranges, and hands out the lowest free ranges ([`allocation`], a pure function). A
//!    Node deleted simply no longer occupies its range; a worker or coordinator failing over loses
//!    nothing.
//! 3. **Read what the previous pass wrote.** The pass decides from a quorum LIST of Nodes from the
//!    API server, not from the cache: within one leader's term read-your-writes already holds the key
//!    until the cache shows its Node writes, but after a failover the new leader's informer may
//!    still miss a `podCIDR` written a moment before, and a conditional write of the *other* Node
//!    would not catch that. The cache only tells whether any Node waits (the common pass reads no
//!    more); the previous pass's writes were acknowledged before it ended, so the live list shows
//!    them.
//! 4. **Write only what was planned from.** Each Node's patch carries the resourceVersion the plan
//!    read, so a Node changed meanwhile (given ranges by someone else, deleted and created again)
//!    gets a 409 and is planned again by the next pass.
//!
//! The fleet has no rule mapping every Node event to one fixed key, so the pass polls: every second
//! per thousand Nodes (1 s to 10 s, [`reconcile::next_pass`]), listing Nodes from the cache; a new
//! Node waits that long for its range where upstream reacts to its informer event at once.

mod allocation;
mod cidr;
mod config;
mod reconcile;

use std::sync::Arc;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::core::v1::{Namespace, Node};

pub use config::{CidrList, ConfigError, NodeIpamConfig, RANGE_ALLOCATOR};

/// The controller, named `name` (the registry's `nodeipam`), allocating as `config` says (nothing
/// when allocation is off or the flags are refused by [`NodeIpamConfig::validate`], which the worker
/// runs at start-up): keyed by Namespace (see the module doc), reading every Node from the cache.
pub fn controller(name: &str, config: &NodeIpamConfig) -> Controller<Namespace> {
    let pools = if config.allocate_node_cidrs {
        config.pools().unwrap_or_else(|err| {
            tracing::warn!(error = %err, "node CIDR allocation is off: bad flags");
            Vec::new()
        })
    } else {
        Vec::new()
    };
    let allocator = Arc::new(reconcile::Allocator {
        pools,
        service_ranges: config.service_cluster_ip_range.iter().collect(),
    });
    Controller::<Namespace>::new(name)
        .reads::<Node>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, Arc::clone(&allocator)))
}
