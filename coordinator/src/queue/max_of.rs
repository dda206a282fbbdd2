//! Combines rate limiters: the longest delay wins (client-go's `MaxOfRateLimiter`).

use std::time::Duration;

use tokio::time::Instant;

use super::rate_limiter::RateLimiter;

/// Asks every limiter (so each records the failure) and waits for the longest answer.
pub struct MaxOfRateLimiter<K> {
    limiters: Vec<Box<dyn RateLimiter<K> + Send>>,
}

impl<K> MaxOfRateLimiter<K> {
    /// Combines `limiters`; with none, every delay is zero.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K> + Send>>) -> Self {
        Self { limiters }
    }
}

impl<K> RateLimiter<K> for MaxOfRateLimiter<K> {
    fn when(&mut self, key: &K, now: Instant) -> Duration {
        // No short-circuit: every limiter must see every failure to keep its own count right.
        self.limiters
            .iter_mut()
            .map(|limiter| limiter.when(key, now))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&mut self, key: &K) {
        for limiter in &mut self.limiters {
            limiter.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.limiters
            .iter()
            .map(|limiter| limiter.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::bucket::{BucketConfig, BucketRateLimiter};
    use super::super::exponential::{ExponentialBackoffConfig, ItemExponentialFailureRateLimiter};
    use super::super::rate_limiter::default_controller_rate_limiter;
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_longest_delay_of_the_combined_limiters_wins() {
        let backoff = ExponentialBackoffConfig {
            base_delay: ms(1),
            max_delay: ms(1000),
        };
        let mut limiter = MaxOfRateLimiter::new(vec![
            Box::new(ItemExponentialFailureRateLimiter::new(backoff).unwrap()),
            Box::new(BucketRateLimiter::new(BucketConfig { qps: 1.0, burst: 2 }).unwrap()),
        ]);
        let now = Instant::now();
        // Bucket still has tokens: the backoff decides.
        assert_eq!(limiter.when(&"a", now), ms(1));
        assert_eq!(limiter.when(&"a", now), ms(2));
        // Bucket empty: its one-second wait beats the 4 ms backoff.
        assert_eq!(limiter.when(&"a", now), ms(1000));
        assert_eq!(limiter.num_requeues(&"a"), 3);
    }

    #[test]
    fn forget_reaches_every_combined_limiter() {
        let mut limiter = default_controller_rate_limiter();
        let now = Instant::now();
        limiter.when(&"a", now);
        limiter.when(&"a", now);
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.when(&"a", now), ms(5));
    }

    #[test]
    fn the_default_controller_limiter_backs_off_per_key_and_caps_overall_retries() {
        let mut limiter = default_controller_rate_limiter();
        let now = Instant::now();
        assert_eq!(limiter.when(&0u32, now), ms(5));
        assert_eq!(limiter.when(&0u32, now), ms(10));
        for key in 1..99u32 {
            assert_eq!(limiter.when(&key, now), ms(5));
        }
        // 100 tokens spent: the 101st retry of a fresh key waits for the bucket, not 5 ms.
        let delay = limiter.when(&1000u32, now);
        assert!(
            delay.abs_diff(ms(100)) <= Duration::from_micros(1),
            "{delay:?}"
        );
    }

    #[test]
    fn an_empty_combination_never_delays() {
        let mut limiter = MaxOfRateLimiter::<u8>::new(Vec::new());
        assert_eq!(limiter.when(&1, Instant::now()), Duration::ZERO);
        assert_eq!(limiter.num_requeues(&1), 0);
    }
}
