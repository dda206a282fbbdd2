//! Whether the worker's stream to the leader is healthy enough to call the worker ready. A stream that
//! breaks and reopens in a loop (a leader sending what the worker cannot take, a proxy cutting it) is
//! welcomed again after every break, so "ready while welcomed" would answer 200 most of the time while
//! nothing gets reconciled. A worker whose stream broke [`FLAPPING_BREAKS`] times within [`WINDOW`]
//! is ready again only once a stream has stayed up for [`STABLE`].

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// How far back breaks count.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Breaks within [`WINDOW`] that make a stream flapping: a leader failover or two cost one break each.
pub(crate) const FLAPPING_BREAKS: usize = 3;
/// How long a flapping worker's stream must stay up before the worker is ready again.
pub(crate) const STABLE: Duration = Duration::from_secs(10);

/// Recent stream breaks. Invariant: `breaks` holds only times within [`WINDOW`] of the last call,
/// oldest first.
#[derive(Debug, Default)]
pub(crate) struct StreamHealth {
    breaks: VecDeque<Instant>,
}

impl StreamHealth {
    /// The stream broke at `now`.
    pub(crate) fn broke(&mut self, now: Instant) {
        self.forget_before(now);
        self.breaks.push_back(now);
    }

    /// A stream was welcomed at `now`: when the worker may say ready — `now`, or, for a flapping
    /// stream, once it has stayed up for [`STABLE`].
    pub(crate) fn ready_at(&mut self, now: Instant) -> Instant {
        self.forget_before(now);
        if self.breaks.len() >= FLAPPING_BREAKS {
            now + STABLE
        } else {
            now
        }
    }

    fn forget_before(&mut self, now: Instant) {
        while self
            .breaks
            .front()
            .is_some_and(|t| now.duration_since(*t) > WINDOW)
        {
            self.breaks.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_broke_once_or_twice_is_ready_when_welcomed() {
        let mut health = StreamHealth::default();
        health.broke(Instant::now());
        health.broke(Instant::now());
        let now = Instant::now();
        assert_eq!(health.ready_at(now), now);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_breaking_in_a_loop_must_stay_up_before_the_worker_is_ready() {
        let mut health = StreamHealth::default();
        for _ in 0..8 {
            health.broke(Instant::now());
            tokio::time::advance(Duration::from_millis(125)).await;
        }
        let now = Instant::now();
        assert_eq!(health.ready_at(now), now + STABLE);
    }

    #[tokio::test(start_paused = true)]
    async fn old_breaks_are_forgotten_after_the_window() {
        let mut health = StreamHealth::default();
        for _ in 0..5 {
            health.broke(Instant::now());
        }
        tokio::time::advance(WINDOW + Duration::from_secs(1)).await;
        let now = Instant::now();
        assert_eq!(health.ready_at(now), now);
    }
}
