//! Per-key exponential backoff: each failure of a key doubles its delay, up to a cap (client-go's
//! `ItemExponentialFailureRateLimiter`).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::rate_limiter::{RateLimiter, RateLimiterConfigError};

/// Delays of [`ItemExponentialFailureRateLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExponentialBackoffConfig {
    /// Delay after the first failure; default 5 ms (client-go), short enough that a conflict on update retries
    /// before anyone notices.
    pub base_delay: Duration,
    /// Cap on the delay; default 1000 s (client-go), so a key that keeps failing is still retried about every
    /// 17 minutes instead of never.
    pub max_delay: Duration,
}

impl Default for ExponentialBackoffConfig {
    fn default() -> Self {
        Self {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
        }
    }
}

impl ExponentialBackoffConfig {
    /// Checks that `base_delay <= max_delay`.
    ///
    /// # Errors
    /// [`RateLimiterConfigError::BaseAboveMax`].
    pub fn validate(&self) -> Result<(), RateLimiterConfigError> {
        if self.base_delay > self.max_delay {
            return Err(RateLimiterConfigError::BaseAboveMax {
                base: self.base_delay,
                max: self.max_delay,
            });
        }
        Ok(())
    }
}

/// After the n-th consecutive failure of a key (n from 0) it waits `base_delay * 2^n`, never more than
/// `max_delay`. [`RateLimiter::forget`] starts the key over.
pub struct ItemExponentialFailureRateLimiter<K> {
    config: ExponentialBackoffConfig,
    /// Failures counted per key since its last `forget`; a key is absent when its count is 0.
    failures: HashMap<K, u32>,
}

impl<K> Default for ItemExponentialFailureRateLimiter<K> {
    fn default() -> Self {
        Self {
            config: ExponentialBackoffConfig::default(),
            failures: HashMap::new(),
        }
    }
}

impl<K> ItemExponentialFailureRateLimiter<K> {
    /// A limiter with the given delays.
    ///
    /// # Errors
    /// As [`ExponentialBackoffConfig::validate`].
    pub fn new(config: ExponentialBackoffConfig) -> Result<Self, RateLimiterConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            failures: HashMap::new(),
        })
    }

    /// `base * 2^exp` capped at `max`, computed so that no shift or multiplication can overflow.
    fn delay(&self, exp: u32) -> Duration {
        let max = self.config.max_delay;
        let base = self.config.base_delay.as_nanos();
        // Any Duration (< 2^94 ns) times 2^100 saturates a u128, so past that the cap is reached whatever base is.
        if exp >= 100 {
            return max;
        }
        let nanos = base.saturating_mul(1u128 << exp);
        if nanos >= max.as_nanos() {
            return max;
        }
        // nanos < max.as_nanos(), which came from a Duration, so the split below cannot overflow.
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        let sub = u32::try_from(nanos % 1_000_000_000).unwrap_or(0);
        Duration::new(secs, sub)
    }
}

impl<K: Clone + Eq + Hash + Send> RateLimiter<K> for ItemExponentialFailureRateLimiter<K> {
    fn when(&mut self, key: &K, _now: Instant) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let exp = *failures;
        *failures = failures.saturating_add(1);
        self.delay(exp)
    }

    fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn delays_double_from_five_milliseconds_and_stop_at_a_thousand_seconds() {
        let mut limiter = ItemExponentialFailureRateLimiter::default();
        let now = Instant::now();
        let first: Vec<Duration> = (0..5).map(|_| limiter.when(&"a", now)).collect();
        assert_eq!(first, vec![ms(5), ms(10), ms(20), ms(40), ms(80)]);
        for _ in 0..100 {
            limiter.when(&"a", now);
        }
        assert_eq!(limiter.when(&"a", now), Duration::from_secs(1000));
        assert_eq!(limiter.num_requeues(&"a"), 106);
    }

    #[test]
    fn keys_back_off_independently() {
        let mut limiter = ItemExponentialFailureRateLimiter::default();
        let now = Instant::now();
        limiter.when(&"a", now);
        limiter.when(&"a", now);
        assert_eq!(limiter.when(&"b", now), ms(5));
        assert_eq!(limiter.num_requeues(&"a"), 2);
        assert_eq!(limiter.num_requeues(&"b"), 1);
    }

    #[test]
    fn forget_starts_a_key_over_at_the_base_delay() {
        let mut limiter = ItemExponentialFailureRateLimiter::default();
        let now = Instant::now();
        limiter.when(&"a", now);
        limiter.when(&"a", now);
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.when(&"a", now), ms(5));
    }

    #[test]
    fn a_huge_base_delay_does_not_overflow() {
        let config = ExponentialBackoffConfig {
            base_delay: Duration::MAX,
            max_delay: Duration::MAX,
        };
        let mut limiter = ItemExponentialFailureRateLimiter::new(config).unwrap();
        let now = Instant::now();
        for _ in 0..200 {
            assert_eq!(limiter.when(&"a", now), Duration::MAX);
        }
    }

    #[test]
    fn a_base_delay_above_the_max_is_rejected() {
        let config = ExponentialBackoffConfig {
            base_delay: ms(10),
            max_delay: ms(5),
        };
        let err = ItemExponentialFailureRateLimiter::<&str>::new(config).err();
        assert_eq!(
            err,
            Some(RateLimiterConfigError::BaseAboveMax {
                base: ms(10),
                max: ms(5)
            })
        );
    }

    proptest! {
        #[test]
        fn delays_are_monotone_and_capped(
            base_ns in 1u64..1_000_000_000,
            max_ns in 1u64..10_000_000_000_000,
            calls in 1usize..300,
        ) {
            prop_assume!(base_ns <= max_ns);
            let config = ExponentialBackoffConfig {
                base_delay: Duration::from_nanos(base_ns),
                max_delay: Duration::from_nanos(max_ns),
            };
            let mut limiter = ItemExponentialFailureRateLimiter::new(config).unwrap();
            let now = Instant::now();
            let mut previous = Duration::ZERO;
            for n in 0..calls {
                let delay = limiter.when(&0u8, now);
                prop_assert!(delay >= previous, "delay went down at failure {n}");
                prop_assert!(delay <= config.max_delay);
                if n < 40 {
                    let exact = u128::from(base_ns) << n;
                    prop_assert_eq!(delay.as_nanos(), exact.min(u128::from(max_ns)));
                }
                previous = delay;
            }
        }
    }
}
