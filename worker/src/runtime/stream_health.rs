//! Whether the worker's stream to the leader is healthy enough to call the worker ready. A stream that
//! breaks and reopens in a loop (a leader sending what the worker cannot take, a proxy cutting it) is
//! welcomed again after every break, so "ready while welcomed" would answer 200 most of the time while
//! nothing gets reconciled. A worker whose stream broke [`FLAPPING_BREAKS`] times within [`WINDOW`]
//! is ready again only once a stream has stayed up for [`STABLE`].

use std::time::Duration;

use flotilla_common::Flapping;
use tokio::time::Instant;

/// How far back breaks count.
const WINDOW: Duration = Duration::from_secs(60);
/// Breaks within [`WINDOW`] that make a stream flapping: a leader failover or two cost one break each.
const FLAPPING_BREAKS: usize = 3;
/// How long a flapping worker's stream must stay up before the worker is ready again.
pub(crate) const STABLE: Duration = Duration::from_secs(10);

/// Recent stream breaks.
#[derive(Debug)]
pub(crate) struct StreamHealth {
    breaks: Flapping,
}

impl Default for StreamHealth {
    fn default() -> Self {
        Self {
            breaks: Flapping::new(WINDOW, FLAPPING_BREAKS),
        }
    }
}

impl StreamHealth {
    /// The stream broke at `now`.
    pub(crate) fn broke(&mut self, now: Instant) {
        self.breaks.failed(now);
    }

    /// A stream was welcomed at `now`: when the worker may say ready — `now`, or, for a flapping
    /// stream, once it has stayed up for [`STABLE`].
    pub(crate) fn ready_at(&mut self, now: Instant) -> Instant {
        if self.breaks.is_flapping(now) {
            now + STABLE
        } else {
            now
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
