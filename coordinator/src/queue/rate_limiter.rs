//! The rate-limiter contract of the workqueue, its config errors, and client-go's default controller limiter.

use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::bucket::{BucketConfig, BucketRateLimiter};
use super::exponential::{ExponentialBackoffConfig, ItemExponentialFailureRateLimiter};
use super::max_of::MaxOfRateLimiter;

/// Decides how long a key waits before it is retried (client-go's `RateLimiter`).
///
/// Implementations are plain state machines: they read no clock, the caller passes `now`, so the same calls
/// give the same answers (paused-time tests, replays).
pub trait RateLimiter<K>: Send {
    /// Records one more failure of `key` at `now` and returns how long it must wait before it runs again.
    fn when(&mut self, key: &K, now: Instant) -> Duration;
    /// Stops tracking `key`: its failure count goes back to zero. Limiters with no per-key state ignore it.
    fn forget(&mut self, key: &K);
    /// How many failures of `key` are being counted (0 for limiters that keep no per-key state).
    fn num_requeues(&self, key: &K) -> u32;
}

/// A rate-limiter config that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateLimiterConfigError {
    /// The token bucket needs a positive, finite refill rate.
    #[error("rate limiter qps must be a positive finite number, got {0}")]
    InvalidQps(f64),
    /// A bucket that holds no token would never let anything through.
    #[error("rate limiter burst must be at least 1, got {0}")]
    InvalidBurst(u32),
    /// The per-key backoff starts above its own cap.
    #[error("backoff base delay {base:?} is larger than its max delay {max:?}")]
    BaseAboveMax {
        /// The configured base delay.
        base: Duration,
        /// The configured max delay.
        max: Duration,
    },
}

/// The limiter of a controller: per-key exponential backoff combined with an overall token bucket, the larger
/// delay winning (client-go's `DefaultControllerRateLimiter`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ControllerRateLimiterConfig {
    /// Per-key backoff; default 5 ms doubling up to 1000 s, so a transient error retries almost at once while a
    /// key that keeps failing settles at one try every ~17 minutes.
    pub backoff: ExponentialBackoffConfig,
    /// Overall retry budget of the controller; default 10 qps with a burst of 100, so a mass failure (e.g. the
    /// API server down) cannot turn into a retry storm.
    pub bucket: BucketConfig,
}

impl ControllerRateLimiterConfig {
    /// Checks both parts.
    ///
    /// # Errors
    /// The first invalid field, see [`RateLimiterConfigError`].
    pub fn validate(&self) -> Result<(), RateLimiterConfigError> {
        self.backoff.validate()?;
        self.bucket.validate()
    }

    /// Builds the combined limiter.
    ///
    /// # Errors
    /// As [`ControllerRateLimiterConfig::validate`].
    pub fn build<K>(&self) -> Result<MaxOfRateLimiter<K>, RateLimiterConfigError>
    where
        K: Clone + Eq + Hash + Send + 'static,
    {
        Ok(MaxOfRateLimiter::new(vec![
            Box::new(ItemExponentialFailureRateLimiter::new(self.backoff)?),
            Box::new(BucketRateLimiter::new(self.bucket)?),
        ]))
    }
}

/// client-go's default controller limiter: max of (per-key exponential 5 ms … 1000 s, token bucket 10 qps / 100).
pub fn default_controller_rate_limiter<K>() -> MaxOfRateLimiter<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::default()),
        Box::new(BucketRateLimiter::default()),
    ])
}
