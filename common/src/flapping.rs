//! Counting recent failures of something that recovers on its own (a stream that reopens, a term that
//! starts again), so health can tell "failed once" from "fails in a loop": a process whose stream or
//! term breaks and comes back every second looks healthy at most instants while it gets nothing done.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Failures within a sliding window. Invariant: `failures` holds only times within `window` of the last
/// call, oldest first, and at most `threshold` of them.
#[derive(Debug)]
pub struct Flapping {
    failures: VecDeque<Instant>,
    window: Duration,
    threshold: usize,
}

impl Flapping {
    /// Flapping once `threshold` (at least 1) failures fall within `window`.
    pub fn new(window: Duration, threshold: usize) -> Self {
        Self {
            failures: VecDeque::new(),
            window,
            threshold: threshold.max(1),
        }
    }

    /// A failure at `now`.
    pub fn failed(&mut self, now: Instant) {
        self.forget_before(now);
        if self.failures.len() == self.threshold {
            self.failures.pop_front();
        }
        self.failures.push_back(now);
    }

    /// Whether at least the threshold of failures fell within the window before `now`.
    pub fn is_flapping(&mut self, now: Instant) -> bool {
        self.forget_before(now);
        self.failures.len() >= self.threshold
    }

    /// Failures within the window before `now`, up to the threshold.
    pub fn recent(&mut self, now: Instant) -> usize {
        self.forget_before(now);
        self.failures.len()
    }

    fn forget_before(&mut self, now: Instant) {
        while self
            .failures
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.window)
        {
            self.failures.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn failures_below_the_threshold_are_not_flapping() {
        let mut f = Flapping::new(WINDOW, 3);
        f.failed(Instant::now());
        f.failed(Instant::now());
        assert!(!f.is_flapping(Instant::now()));
        f.failed(Instant::now());
        assert!(f.is_flapping(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_older_than_the_window_are_forgotten() {
        let mut f = Flapping::new(WINDOW, 3);
        for _ in 0..10 {
            f.failed(Instant::now());
            tokio::time::advance(Duration::from_millis(125)).await;
        }
        assert!(f.is_flapping(Instant::now()));
        assert_eq!(f.recent(Instant::now()), 3, "memory stays bounded");
        tokio::time::advance(WINDOW + Duration::from_secs(1)).await;
        assert!(!f.is_flapping(Instant::now()));
    }
}
