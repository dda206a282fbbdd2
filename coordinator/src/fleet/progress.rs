//! Whether the leader's dispatching makes progress, for `/readyz`. A leader whose informers are synced
//! can still be stuck: every worker's stream breaking, every shard unclaimable, no live worker at all.
//! Its threads are busy and its health would say 200 while the cluster stops converging. The rule: a
//! leader is stalled when keys have waited to be dispatched (ready in a synced controller's queue,
//! parked on a shard without an owner, or in a worker's backlog) and no item has finished for longer
//! than `--dispatch-stall-timeout`. An idle fleet is never stalled: the clock starts when keys wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// The leader's verdict, shared with the readiness check; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct DispatchProgress {
    stalled: Arc<AtomicBool>,
}

impl DispatchProgress {
    /// Whether the dispatcher of this term says it is stalled.
    pub fn is_stalled(&self) -> bool {
        self.stalled.load(Ordering::Relaxed)
    }

    pub(crate) fn set_stalled(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::Relaxed);
    }
}

/// The dispatcher's side: when it last made progress. Invariant: `since` is the last time an item
/// finished or nothing waited.
#[derive(Debug)]
pub(crate) struct StallClock {
    since: Instant,
    bound: Duration,
}

impl StallClock {
    pub(crate) fn new(bound: Duration, now: Instant) -> Self {
        Self { since: now, bound }
    }

    /// An item finished at `now`.
    pub(crate) fn progressed(&mut self, now: Instant) {
        self.since = now;
    }

    /// With `waiting` keys waiting at `now`: whether dispatching is stalled.
    pub(crate) fn stalled(&mut self, waiting: usize, now: Instant) -> bool {
        if waiting == 0 {
            self.since = now;
            return false;
        }
        now.duration_since(self.since) > self.bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn keys_waiting_with_nothing_finishing_past_the_bound_is_a_stall() {
        let mut clock = StallClock::new(BOUND, Instant::now());
        assert!(!clock.stalled(5, Instant::now()));
        tokio::time::advance(BOUND + Duration::from_secs(1)).await;
        assert!(clock.stalled(5, Instant::now()));
        clock.progressed(Instant::now());
        assert!(!clock.stalled(5, Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_fleet_is_never_stalled_and_the_clock_starts_when_keys_wait() {
        let mut clock = StallClock::new(BOUND, Instant::now());
        tokio::time::advance(BOUND * 10).await;
        assert!(!clock.stalled(0, Instant::now()));
        tokio::time::advance(BOUND / 2).await;
        assert!(!clock.stalled(3, Instant::now()));
        tokio::time::advance(BOUND).await;
        assert!(clock.stalled(3, Instant::now()));
    }
}
