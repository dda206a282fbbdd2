//! When the leader may claim a shard again after etcd refused the claim (its key still held on a lease
//! no live worker's registration names). Without a wait, every turn claimed again: one such key per
//! shard made about 2,000 refused transactions a second. A refused shard waits until the holding lease
//! can have ended (its remaining TTL, as etcd reported it), and at least an exponential backoff of its
//! own; a change in the worker registry (a worker registering its lease again, say) clears every wait,
//! since it may make a held key current.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// The first wait after a refusal; it doubles with each refusal in a row.
const INITIAL: Duration = Duration::from_millis(250);
/// The longest backoff of its own.
const MAX_BACKOFF: Duration = Duration::from_secs(4);
/// The longest wait whatever the holding lease says: a lease may be renewed (or a TTL misreported), so
/// the shard is looked at again at least this often.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// Per-shard waits after refused claims. Invariant: a shard in the map was refused since its last
/// successful write or the last registry change.
#[derive(Debug, Default)]
pub struct ClaimRetry {
    /// Shard → (when it may be claimed again, the backoff to use after the next refusal).
    waits: HashMap<u32, (Instant, Duration)>,
}

impl ClaimRetry {
    /// A claim of `shard` was refused at `now`; the key's lease has `holder_ttl` left, if known.
    pub fn refused(&mut self, shard: u32, now: Instant, holder_ttl: Option<Duration>) {
        let backoff = self.waits.get(&shard).map_or(INITIAL, |(_, b)| *b);
        let wait = backoff.max(holder_ttl.unwrap_or_default()).min(MAX_WAIT);
        self.waits
            .insert(shard, (now + wait, (backoff * 2).min(MAX_BACKOFF)));
    }

    /// Whether `shard` may be claimed at `now`.
    pub fn may_claim(&self, shard: u32, now: Instant) -> bool {
        self.waits.get(&shard).is_none_or(|(at, _)| *at <= now)
    }

    /// `shard` was written: it starts over.
    pub fn written(&mut self, shard: u32) {
        self.waits.remove(&shard);
    }

    /// The worker registry changed: every shard may be claimed again at once.
    pub fn clear(&mut self) {
        self.waits.clear();
    }

    /// The earliest time a waiting shard may be claimed again.
    #[cfg(test)]
    pub fn next_due(&self) -> Option<Instant> {
        self.waits.values().map(|(at, _)| *at).min()
    }

    /// Shards waiting after a refusal.
    pub fn len(&self) -> usize {
        self.waits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[tokio::test(start_paused = true)]
    async fn a_refused_claim_backs_off_exponentially_up_to_a_bound() {
        let mut retry = ClaimRetry::default();
        let mut waits = Vec::new();
        for _ in 0..8 {
            let now = Instant::now();
            retry.refused(7, now, None);
            let due = retry.next_due().unwrap();
            waits.push(due - now);
            assert!(!retry.may_claim(7, now));
            tokio::time::advance(due - now).await;
            assert!(retry.may_claim(7, Instant::now()));
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [250, 500, 1000, 2000, 4000, 4000, 4000, 4000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_waits_for_the_holding_lease_to_run_out_but_never_past_the_bound() {
        let mut retry = ClaimRetry::default();
        let now = Instant::now();
        retry.refused(1, now, Some(Duration::from_secs(9)));
        assert_eq!(retry.next_due(), Some(now + Duration::from_secs(9)));
        retry.refused(2, now, Some(Duration::from_secs(3600)));
        assert!(retry.may_claim(2, now + MAX_WAIT));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_or_a_registry_change_ends_the_wait() {
        let mut retry = ClaimRetry::default();
        let now = Instant::now();
        retry.refused(1, now, None);
        retry.refused(2, now, None);
        retry.written(1);
        assert!(retry.may_claim(1, now));
        assert!(!retry.may_claim(2, now));
        retry.clear();
        assert!(retry.may_claim(2, now));
        assert_eq!(retry.len(), 0);
    }

    proptest! {
        /// Whatever the refusals and TTLs, a refused shard waits at least 250 ms and at most the bound,
        /// and at most one claim per shard goes to etcd per wait.
        #[test]
        fn every_wait_is_within_bounds(ttls in proptest::collection::vec(proptest::option::of(0u64..100_000), 1..30)) {
            let mut retry = ClaimRetry::default();
            let now = Instant::now();
            for ttl in ttls {
                retry.refused(3, now, ttl.map(Duration::from_millis));
                let wait = retry.next_due().unwrap() - now;
                prop_assert!(wait >= INITIAL);
                prop_assert!(wait <= MAX_WAIT);
                prop_assert!(!retry.may_claim(3, now));
            }
        }
    }
}
