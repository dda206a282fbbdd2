//! placeholder

mod queue;

pub use queue::{
    BucketConfig, BucketRateLimiter, ControllerRateLimiterConfig, ExponentialBackoffConfig,
    ItemExponentialFailureRateLimiter, MaxOfRateLimiter, QueueMetrics, QueueMetricsFamilies,
    RateLimiter, RateLimiterConfigError, WorkQueue, default_controller_rate_limiter,
};
