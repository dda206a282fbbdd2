//! The `nodelifecycle` controller (upstream `pkg/controller/nodelifecycle`, v1.32, the taint-based
//! path; the pods themselves are evicted by the `taint-eviction` controller): it marks a node whose
//! kubelet went quiet Unknown, keeps the NoSchedule taints that mirror a node's conditions, marks the
//! pods of a node it marked Unknown not ready, and taints a not-ready node `not-ready` /
//! `unreachable` NoExecute at a rate limited per zone. It records upstream's Events as
//! `node-controller`: `RegisteredNode` and `RemovingNode` on nodes it starts or stops knowing,
//! `NodeNotReady` on a node it marks Unknown and on each pod it marks not ready (no `NodeReady`: the
//! kubelet records that one). It does not reconcile the beta OS and arch labels upstream still copies.
//!
//! # Keys and timing
//!
//! Keys are Nodes; a node's Lease in `kube-node-lease` (same name) queues its node, so a renewal is
//! seen as it happens. Upstream polls every node every `--node-monitor-period`; here a node is looked
//! at on its events and requeued for exactly the time left of its grace period, so a quiet node is
//! marked Unknown when its grace runs out and a healthy one costs one look per heartbeat. The grace
//! counts from when this worker *saw* a heartbeat change ([`observation`]), never from the kubelet's
//! timestamps. Only a node held back by its zone's state (rate zero, master disruption) is looked at
//! again every `--node-monitor-period`, as upstream's pass would.
//!
//! # The rate limit without a single loop
//!
//! Upstream keeps one token bucket per zone in one process. The fleet has no such process, so the
//! limiter reads its state from the cluster ([`limiter`]): a zone's next node may be tainted
//! `1 / rate` after the newest `timeAdded` of a `not-ready` / `unreachable` NoExecute taint among the
//! zone's nodes, and a worker also waits for the taints it added itself. Zone states are computed
//! over every node of the cluster ([`zones`]) from a view listed from the cache, at most once per
//! `--node-monitor-period` per worker.
//!
//! **Burst.** Workers see each other's taints only once the coordinator's cache does. So when
//! several workers each hold a not-ready node of one zone and decide within one cache-propagation
//! delay of each other, each may add one taint: at most one taint per worker holding such a node,
//! instead of upstream's one. It is bounded: a worker never adds two within `1 / rate` (its own
//! reservations), and once the cache shows the first of those taints (milliseconds, the watch's
//! delay) every worker waits `1 / rate` after the newest. With W workers a zone of N nodes going
//! down one by one sees at most W taints at once, then the zone's rate.
//!
//! # Leadership, failover and stale caches
//!
//! No failover or stale cache can get a whole zone evicted at once:
//!
//! - *The observation clock restarts on a new observer.* The grace period counts from when this
//!   worker saw a heartbeat change; a node whose key moves (a worker killed, a rebalance, a new
//!   leader assigning shards elsewhere) is watched for a whole grace period by its new worker before
//!   it can be marked Unknown — later than a single observer, never earlier. A NoExecute taint is
//!   decided only after the node was seen not ready for `--node-monitor-period` by the same worker.
//!   What a pod's eviction counts from — the taint's `timeAdded`, its toleration — lives in the
//!   cluster, so a failover neither restarts nor shortens it, and a taint already there is not added
//!   twice.
//! - *A stale cache cannot make a node look dark.* Before marking a node Unknown, its Lease is read
//!   live; a renewal the cache missed (a stalled watch, a leader still listing) counts as a
//!   heartbeat. The status and taint writes carry the resourceVersion they were decided on, so a
//!   kubelet's newer report makes them fail (409) and be decided again, never overwritten.
//! - *Full disruption freezes tainting.* When every zone is fully disrupted (upstream's "master
//!   disruption mode": more likely the control plane is cut off than every node dead), no node is
//!   tainted and the existing `not-ready` / `unreachable` NoExecute taints are removed, whoever added
//!   them. A zone's NoExecute decisions wait one `--node-monitor-period` after its node was seen not
//!   ready and use a zone view taken after that wait, so nodes that went dark together are seen
//!   together: a zone (or a cluster) going dark at once is not tainted node by node before its state
//!   is known. A partially disrupted small zone taints none; a larger one the secondary rate.
//! - A fully disrupted zone while others are healthy is tainted at `--node-eviction-rate`, as
//!   upstream (and its documentation) does: that zone is most likely really down.

mod config;
mod limiter;
mod observation;
mod pods;
mod reconcile;
mod status;
mod taints;
mod zones;

use std::sync::Arc;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::coordination::v1::Lease;
use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Pod};

pub use config::{Config, ConfigError};
use reconcile::NodeLifecycle;

/// The controller, named `name` (the registry's `nodelifecycle`), configured by `config`: keyed by
/// Node, its Lease mapped to it by name, reading Leases and the pods on a node from the cache (the
/// built-in `node-name` index).
pub fn controller(name: &str, config: Config) -> Controller<Node> {
    let nl = Arc::new(NodeLifecycle::new(config));
    Controller::<Node>::new(name)
        .watches_field::<Lease>("metadata.name")
        .reads::<Lease>()
        .reads::<Pod>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, Arc::clone(&nl)))
}
