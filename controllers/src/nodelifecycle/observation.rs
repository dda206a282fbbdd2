//! This worker's own clock of each node's health signals (upstream's `nodeHealthMap` and its
//! `probeTimestamp`): when this worker last *saw* the Ready condition's heartbeat or the Lease's
//! renewal change. Remote timestamps are compared for change only, never against the local clock, so
//! clock skew between kubelets and the fleet cannot make a node look dark.
//!
//! The state is the worker's: a node first seen here starts its grace period from that moment. A key
//! that moves to another worker (a failover, a rebalance) therefore restarts the grace period there —
//! a node is marked Unknown later than a single observer would, never earlier.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use flotilla_sdk::k8s_openapi::jiff::Timestamp;

/// The signals of one node as read now: what is compared with what was read before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signals {
    /// The Node's uid: a node recreated under the same name is a new node.
    pub uid: Option<String>,
    /// Whether the node has a Ready condition at all.
    pub has_ready: bool,
    /// The Ready condition's `lastHeartbeatTime`.
    pub heartbeat: Option<Timestamp>,
    /// The node Lease's `spec.renewTime`, when there is a Lease.
    pub lease_renewed: Option<Timestamp>,
}

/// What the signals say about a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// A signal changed within the grace period; it runs out after `left` unless one changes again.
    Fresh {
        /// The time left of the grace period.
        left: Duration,
    },
    /// No signal was seen to change for the whole grace period.
    Stale,
}

/// One node as this worker saw it.
#[derive(Debug, Clone)]
struct Seen {
    signals: Signals,
    /// When a signal was last seen to change (or the node first seen here).
    probe: Instant,
    /// Since when this worker sees the node not ready; `None` while it is ready.
    not_ready_since: Option<Instant>,
    /// When the node was last looked at, for pruning.
    touched: Instant,
}

/// The nodes this worker has looked at. Invariant: every entry's `probe` and `not_ready_since` are
/// instants of this process's monotonic clock, never derived from a remote timestamp.
#[derive(Debug, Default)]
pub struct Observations {
    nodes: HashMap<String, Seen>,
}

impl Observations {
    /// Records the node's `signals` read at `now` and says whether the `grace` period has run out;
    /// the flag is true when this worker had not seen the node (or this uid of it) before.
    pub fn observe(
        &mut self,
        name: &str,
        signals: Signals,
        grace: Duration,
        now: Instant,
    ) -> (Health, bool) {
        let mut first = false;
        let seen = self
            .nodes
            .entry(name.to_owned())
            .and_modify(|seen| {
                if seen.signals.uid != signals.uid {
                    *seen = Seen::new(signals.clone(), now);
                    first = true;
                    return;
                }
                let heartbeat = seen.signals.has_ready != signals.has_ready
                    || seen.signals.heartbeat != signals.heartbeat;
                let renewed = signals.lease_renewed.is_some()
                    && seen.signals.lease_renewed != signals.lease_renewed;
                if heartbeat || renewed {
                    seen.probe = now;
                }
                seen.signals = signals.clone();
                seen.touched = now;
            })
            .or_insert_with(|| {
                first = true;
                Seen::new(signals.clone(), now)
            });
        let deadline = seen.probe + grace;
        let health = if now >= deadline {
            Health::Stale
        } else {
            Health::Fresh {
                left: deadline - now,
            }
        };
        (health, first)
    }

    /// The Lease read live shows a renewal the cache had not: the node is fresh from `now`.
    pub fn renewed(&mut self, name: &str, renewed: Option<Timestamp>, now: Instant) {
        if let Some(seen) = self.nodes.get_mut(name)
            && renewed.is_some()
            && seen.signals.lease_renewed != renewed
        {
            seen.signals.lease_renewed = renewed;
            seen.probe = now;
        }
    }

    /// Since when this worker sees the node not ready (from `now` if it was ready until now).
    pub fn not_ready_since(&mut self, name: &str, now: Instant) -> Instant {
        match self.nodes.get_mut(name) {
            Some(seen) => *seen.not_ready_since.get_or_insert(now),
            None => now,
        }
    }

    /// The node is ready: a later not-ready spell starts its own wait.
    pub fn ready(&mut self, name: &str) {
        if let Some(seen) = self.nodes.get_mut(name) {
            seen.not_ready_since = None;
        }
    }

    /// Forgets a deleted node; its uid, if this worker knew it.
    pub fn forget(&mut self, name: &str) -> Option<Option<String>> {
        self.nodes.remove(name).map(|seen| seen.signals.uid)
    }

    /// Forgets nodes not looked at for `idle` (keys that moved away, nodes deleted elsewhere): should
    /// such a key come back, its grace period starts again, which is the safe direction.
    pub fn prune(&mut self, now: Instant, idle: Duration) {
        self.nodes
            .retain(|_, seen| now.saturating_duration_since(seen.touched) < idle);
    }
}

impl Seen {
    fn new(signals: Signals, now: Instant) -> Self {
        Self {
            signals,
            probe: now,
            not_ready_since: None,
            touched: now,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(40);

    fn signals(heartbeat: i64, lease: i64) -> Signals {
        Signals {
            uid: Some("u".into()),
            has_ready: true,
            heartbeat: Some(Timestamp::from_second(heartbeat).unwrap()),
            lease_renewed: Some(Timestamp::from_second(lease).unwrap()),
        }
    }

    #[test]
    fn a_node_first_seen_gets_the_whole_grace_period_whatever_its_timestamps_say() {
        let mut o = Observations::default();
        let t0 = Instant::now();
        let (health, first) = o.observe("n", signals(0, 0), GRACE, t0);
        assert!(first);
        assert_eq!(health, Health::Fresh { left: GRACE });
    }

    #[test]
    fn only_a_change_of_a_signal_restarts_the_grace_period() {
        let mut o = Observations::default();
        let t0 = Instant::now();
        o.observe("n", signals(0, 0), GRACE, t0);
        let later = t0 + Duration::from_secs(30);
        let (health, first) = o.observe("n", signals(0, 0), GRACE, later);
        assert!(!first);
        assert_eq!(
            health,
            Health::Fresh {
                left: Duration::from_secs(10)
            }
        );
        let (health, _) = o.observe("n", signals(0, 5), GRACE, later);
        assert_eq!(
            health,
            Health::Fresh { left: GRACE },
            "the lease was renewed"
        );
        let (health, _) = o.observe("n", signals(0, 5), GRACE, later + GRACE);
        assert_eq!(health, Health::Stale);
        let (health, _) = o.observe("n", signals(9, 5), GRACE, later + GRACE);
        assert_eq!(health, Health::Fresh { left: GRACE }, "a heartbeat");
    }

    #[test]
    fn a_recreated_node_and_a_pruned_one_start_again() {
        let mut o = Observations::default();
        let t0 = Instant::now();
        o.observe("n", signals(0, 0), GRACE, t0);
        let mut other = signals(0, 0);
        other.uid = Some("v".into());
        let (health, first) = o.observe("n", other.clone(), GRACE, t0 + GRACE);
        assert!(first);
        assert_eq!(health, Health::Fresh { left: GRACE });
        o.prune(t0 + GRACE * 3, GRACE);
        let (_, first) = o.observe("n", other, GRACE, t0 + GRACE * 3);
        assert!(first, "pruned");
    }

    #[test]
    fn a_live_renewal_freshens_and_not_ready_since_holds_until_ready() {
        let mut o = Observations::default();
        let t0 = Instant::now();
        o.observe("n", signals(0, 0), GRACE, t0);
        o.renewed("n", Some(Timestamp::from_second(7).unwrap()), t0 + GRACE);
        let (health, _) = o.observe("n", signals(0, 7), GRACE, t0 + GRACE);
        assert_eq!(health, Health::Fresh { left: GRACE });
        let since = o.not_ready_since("n", t0);
        assert_eq!(o.not_ready_since("n", t0 + GRACE), since);
        o.ready("n");
        assert_eq!(o.not_ready_since("n", t0 + GRACE), t0 + GRACE);
        assert_eq!(o.forget("n"), Some(Some("u".into())));
    }
}
