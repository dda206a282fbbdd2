//! The `taint-eviction` controller (upstream `pkg/controller/tainteviction`): deletes the pods of a
//! node tainted `NoExecute` that do not tolerate the taints — at once when some taint is not
//! tolerated, after the smallest `tolerationSeconds` of the tolerations used when each is tolerated
//! for a while, never when they are tolerated forever. Before deleting a pod it adds the
//! `DisruptionTarget` condition (reason `DeletionByTaintManager`) through `pods/status` and records
//! `TaintManagerEviction` "Marking for deletion Pod ns/name"; a timed eviction called off (the taint
//! went, the pod now tolerates it forever, the pod went) records "Cancelling deletion of Pod ns/name",
//! as upstream.
//!
//! # Why the key is the Node
//!
//! Upstream hashes its node and pod updates to workers by node name and keeps each pending eviction
//! in a timed queue in memory. Here one key is one node: the reconcile reads the Node (shipped with
//! the item) and, only when it carries a `NoExecute` taint, its pods through the cache's `node-name`
//! index, decides each pod, deletes those due and requeues the key for exactly the next deadline —
//! never a poll. Pods map to their node's key through `spec.nodeName`, so a pod bound to a tainted
//! node, or one whose tolerations change, is decided again. (A Pod key could not see its node's taint
//! changes: the SDK maps a Node to no pods.)
//!
//! # Deadlines survive key moves
//!
//! A deadline is computed from the API's objects, not from memory: the taint's `timeAdded` (which
//! the node-lifecycle controller writes on every `NoExecute` taint) plus the smallest
//! `tolerationSeconds`, counted from the pod's creation instead when the pod came after the taint
//! (upstream counts from when it first saw the pod on the tainted node). So a shard moving to another
//! worker, or a new coordinator, keeps every deadline. Two things live in the worker's memory: when a
//! taint without `timeAdded` (e.g. from `kubectl taint`) was first seen, which times it as upstream
//! does — a move restarts that clock, as a kube-controller-manager restart does — and which pods
//! have a timed eviction pending, only to record the cancelling Event; after a move that Event may
//! be missing, never an eviction.
//!
//! Every pod and node event of a node queues its key (the SDK has no filter on what changed, where
//! upstream looks only at tolerations and taints); a key whose node has no `NoExecute` taint returns
//! without listing anything.

mod eviction;
mod memory;
mod reconcile;
mod tolerations;
mod verdict;

use std::sync::Arc;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Pod};

use memory::Memory;

/// The controller named `name` (the registry's `taint-eviction`), as the worker runs it: keyed by
/// Node, pods mapped to their node's key by `spec.nodeName` and read through the `node-name` index.
pub fn controller(name: &str) -> Controller<Node> {
    let memory = Arc::new(Memory::default());
    Controller::<Node>::new(name)
        .watches_field::<Pod>("spec.nodeName")
        .reads::<Pod>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, Arc::clone(&memory)))
}
