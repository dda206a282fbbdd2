//! The Flotilla coordinator: the elected process that holds the shared informers and the fleet-wide
//! workqueue, and shards the queue's keys over gRPC streams to workers.
//!
//! - [`Coordinator`] — the process: gRPC services, ops endpoints, the leadership loop (`coordinator`).
//! - `fleet` — the leader's dispatcher: queues, shard table, worker streams, read-your-writes.
//! - `queue` — client-go's workqueue, rate limiters and metrics; `shard` — hashing and assignment.
//! - `informer` — shared informers and the cache; `api_link` — whether the Kubernetes API answers
//!   (a coordinator it has not answered for `--kube-api-unreachable-timeout` neither leads nor
//!   campaigns); `cache_service`, `dispatch_service`, `admin_service` — the gRPC edge.

mod admin_service;
mod api_link;
mod cache_service;
mod config;
mod coordinator;
mod dispatch_service;
mod fleet;
mod informer;
mod leader_slot;
mod metrics;
mod queue;
mod shard;

pub use cache_service::{
    AccessSource, CacheListLimits, CacheService, HoldUntilSent, cache_service,
};
pub use config::{ConfigError, CoordinatorConfig, default_identity};
pub use coordinator::{Coordinator, CoordinatorError};
pub use fleet::{AccessDenied, CacheAccess, WorkerReads};
pub use informer::{
    CachedObject, InformerError, InformerEvent, InformerStatus, Informers, NamespaceScope,
    OwnerRef, ScopeError, Store,
};
pub use metrics::FleetMetrics;
pub use queue::{
    BucketConfig, BucketRateLimiter, ControllerRateLimiterConfig, ExponentialBackoffConfig,
    ItemExponentialFailureRateLimiter, MaxOfRateLimiter, QueueMetrics, QueueMetricsFamilies,
    RateLimiter, RateLimiterConfigError, WorkQueue, default_controller_rate_limiter,
};
pub use shard::{
    ShardCount, ShardError, WorkerId, WorkerWeight, assign, moved, shard_of, stable_hash,
};
