//! placeholder

mod queue;

pub use queue::{
    BucketConfig, BucketRateLimiter, ControllerRateLimiterConfig, ExponentialBackoffConfig,
    ItemExponentialFailureRateLimiter, MaxOfRateLimiter, QueueMetrics, QueueMetricsFamilies,
    RateLimiter, RateLimiterConfigError, WorkQueue, default_controller_rate_limiter,
};
mod shard;

pub use shard::{
    ShardCount, ShardError, WorkerId, WorkerWeight, assign, moved, shard_of, stable_hash,
};
mod cache_service;
mod informer;

pub use cache_service::{CacheService, cache_service};
pub use informer::{CachedObject, InformerError, InformerEvent, Informers, OwnerRef, Store};
