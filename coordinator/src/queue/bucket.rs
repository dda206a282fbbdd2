//! An overall token bucket over all keys (client-go's `BucketRateLimiter`, i.e. golang.org/x/time/rate's
//! `Reserve`): each retry takes a token, and when none is left it waits for the next one.

use std::time::Duration;

use tokio::time::Instant;

use super::rate_limiter::{RateLimiter, RateLimiterConfigError};

/// Refill rate and size of a [`BucketRateLimiter`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketConfig {
    /// Tokens added per second; default 10 (client-go), the steady retry budget of one controller.
    pub qps: f64,
    /// Tokens the bucket holds (and starts with); default 100 (client-go), so a short burst of failures is
    /// retried without delay.
    pub burst: u32,
}

impl Default for BucketConfig {
    fn default() -> Self {
        Self {
            qps: 10.0,
            burst: 100,
        }
    }
}

impl BucketConfig {
    /// Checks that `qps` is positive and finite and `burst >= 1`.
    ///
    /// # Errors
    /// [`RateLimiterConfigError::InvalidQps`] or [`RateLimiterConfigError::InvalidBurst`].
    pub fn validate(&self) -> Result<(), RateLimiterConfigError> {
        if !(self.qps.is_finite() && self.qps > 0.0) {
            return Err(RateLimiterConfigError::InvalidQps(self.qps));
        }
        if self.burst == 0 {
            return Err(RateLimiterConfigError::InvalidBurst(self.burst));
        }
        Ok(())
    }
}

/// A token bucket shared by every key. Each [`RateLimiter::when`] reserves one token, possibly one not yet
/// earned: the bucket goes negative and the call returns how long until that token exists. So within any
/// window of length `t`, at most `burst + qps * t` reservations come due.
#[derive(Debug, Clone)]
pub struct BucketRateLimiter {
    qps: f64,
    burst: f64,
    /// Tokens at `last`; at most `burst`, negative when reservations are outstanding.
    tokens: f64,
    /// When `tokens` was last brought up to date; `None` before the first call (the bucket starts full).
    last: Option<Instant>,
}

impl Default for BucketRateLimiter {
    fn default() -> Self {
        let config = BucketConfig::default();
        Self {
            qps: config.qps,
            burst: f64::from(config.burst),
            tokens: f64::from(config.burst),
            last: None,
        }
    }
}

impl BucketRateLimiter {
    /// A full bucket with the given rate and size.
    ///
    /// # Errors
    /// As [`BucketConfig::validate`].
    pub fn new(config: BucketConfig) -> Result<Self, RateLimiterConfigError> {
        config.validate()?;
        Ok(Self {
            qps: config.qps,
            burst: f64::from(config.burst),
            tokens: f64::from(config.burst),
            last: None,
        })
    }
}

impl<K> RateLimiter<K> for BucketRateLimiter {
    fn when(&mut self, _key: &K, now: Instant) -> Duration {
        // Like x/time/rate, a clock that went backwards earns nothing rather than taking tokens away.
        let elapsed = self
            .last
            .map_or(Duration::ZERO, |last| now.saturating_duration_since(last));
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.qps).min(self.burst);
        self.tokens -= 1.0;
        self.last = Some(now);
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64(-self.tokens / self.qps).unwrap_or(Duration::MAX)
    }

    fn forget(&mut self, _key: &K) {}

    fn num_requeues(&self, _key: &K) -> u32 {
        0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) <= Duration::from_micros(1)
    }

    #[test]
    fn a_full_bucket_lets_a_burst_of_a_hundred_through_then_spaces_retries_by_a_hundred_milliseconds()
     {
        let mut limiter = BucketRateLimiter::default();
        let now = Instant::now();
        for i in 0..100 {
            assert_eq!(
                RateLimiter::<u32>::when(&mut limiter, &i, now),
                Duration::ZERO,
                "call {i}"
            );
        }
        for k in 1..=5u32 {
            let delay = RateLimiter::<u32>::when(&mut limiter, &k, now);
            assert!(
                close(delay, Duration::from_millis(100) * k),
                "extra call {k} waits {delay:?}"
            );
        }
    }

    #[test]
    fn the_bucket_refills_at_qps_up_to_burst() {
        let mut limiter = BucketRateLimiter::new(BucketConfig {
            qps: 10.0,
            burst: 2,
        })
        .unwrap();
        let start = Instant::now();
        assert_eq!(
            RateLimiter::<u8>::when(&mut limiter, &0, start),
            Duration::ZERO
        );
        assert_eq!(
            RateLimiter::<u8>::when(&mut limiter, &0, start),
            Duration::ZERO
        );
        // One token back after 100 ms.
        let later = start + Duration::from_millis(100);
        assert!(close(
            RateLimiter::<u8>::when(&mut limiter, &0, later),
            Duration::ZERO
        ));
        // A long pause fills the bucket only up to its burst.
        let much_later = later + Duration::from_secs(60);
        assert_eq!(
            RateLimiter::<u8>::when(&mut limiter, &0, much_later),
            Duration::ZERO
        );
        assert_eq!(
            RateLimiter::<u8>::when(&mut limiter, &0, much_later),
            Duration::ZERO
        );
        assert!(close(
            RateLimiter::<u8>::when(&mut limiter, &0, much_later),
            Duration::from_millis(100)
        ));
    }

    #[test]
    fn bad_bucket_configs_are_rejected() {
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = BucketRateLimiter::new(BucketConfig { qps, burst: 1 }).err();
            assert!(
                matches!(err, Some(RateLimiterConfigError::InvalidQps(_))),
                "qps {qps}"
            );
        }
        let err = BucketRateLimiter::new(BucketConfig { qps: 1.0, burst: 0 }).err();
        assert_eq!(err, Some(RateLimiterConfigError::InvalidBurst(0)));
    }

    proptest! {
        #[test]
        fn no_window_lets_more_than_burst_plus_qps_times_its_length_through(
            qps in 0.5f64..50.0,
            burst in 1u32..20,
            gaps_ms in proptest::collection::vec(0u64..400, 1..200),
        ) {
            let mut limiter = BucketRateLimiter::new(BucketConfig { qps, burst }).unwrap();
            let mut now = Instant::now();
            let mut releases = Vec::new();
            for gap in gaps_ms {
                now += Duration::from_millis(gap);
                releases.push(now + RateLimiter::<u8>::when(&mut limiter, &0, now));
            }
            releases.sort();
            for i in 0..releases.len() {
                for j in i..releases.len() {
                    let window = (releases[j] - releases[i]).as_secs_f64();
                    let through = (j - i + 1) as f64;
                    prop_assert!(
                        through <= f64::from(burst) + qps * window + 1e-6,
                        "{through} releases within {window}s"
                    );
                }
            }
        }
    }
}
