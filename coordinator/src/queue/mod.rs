//! The fleet workqueue: one client-go-compatible queue per controller, its rate limiters and its metrics.

mod bucket;
mod delaying;
mod exponential;
mod max_of;
mod metrics;
mod rate_limiter;
mod traces;
mod work_queue;

pub use bucket::{BucketConfig, BucketRateLimiter};
pub use exponential::{ExponentialBackoffConfig, ItemExponentialFailureRateLimiter};
pub use max_of::MaxOfRateLimiter;
pub use metrics::{QueueMetrics, QueueMetricsFamilies};
pub use rate_limiter::{
    ControllerRateLimiterConfig, RateLimiter, RateLimiterConfigError,
    default_controller_rate_limiter,
};
pub use traces::{QueueWait, TraceLinks};
pub use work_queue::WorkQueue;
