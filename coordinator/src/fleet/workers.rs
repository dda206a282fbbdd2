//! What the leader knows about one worker: its registration (lease), its stream, its credits per
//! controller and the keys routed to it but not yet sent.

use std::collections::{HashMap, HashSet, VecDeque};

use flotilla_proto as proto;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Sender half of a worker's outgoing stream. Unbounded on purpose: the sender is the dispatcher, which
/// must never wait on one worker's network (the whole fleet would wait with it, and a worker's stream
/// task in turn waits on the dispatcher). Bounded in practice: the leader sends an item only against a
/// credit, so Assigns waiting here are at most the worker's advertised concurrency (plus its Welcome
/// and Revokes, at most one per rebalance).
pub type Outbound = mpsc::UnboundedSender<proto::CoordinatorMessage>;

/// A live stream of a worker.
#[derive(Debug)]
pub struct Connection {
    /// Distinguishes this stream from the worker's earlier ones; messages of older streams are ignored.
    pub id: u64,
    pub tx: Outbound,
}

/// One worker.
#[derive(Debug)]
pub struct WorkerState {
    pub id: String,
    /// Its etcd lease, from its registration key; `None` once the registration is gone.
    pub lease_id: Option<i64>,
    /// Weight in shard assignment: total advertised concurrency.
    pub capacity: u32,
    pub conn: Option<Connection>,
    /// Whether it has said Hello to this leader, so its held items are known.
    pub handshaken: bool,
    /// When it was last seen connected (or when this term started); drives the reconnect grace.
    pub disconnected_since: Option<Instant>,
    /// Controller → concurrency it advertised.
    pub concurrency: HashMap<String, u32>,
    /// Controller → items the leader may still send (credits granted minus items sent).
    pub credits: HashMap<String, u32>,
    /// Controller → items of it the worker holds.
    pub in_flight: HashMap<String, u32>,
    /// Items it holds: (term, item id).
    pub items: HashSet<(u64, u64)>,
    /// Controller → keys routed to it (its shards) and not yet sent, with their shard.
    pub backlog: HashMap<String, VecDeque<(String, u32)>>,
    /// Set when the leader revoked its lease: its items are free only after this instant.
    pub fenced_until: Option<Instant>,
}

impl WorkerState {
    /// A registered worker that has not said Hello yet.
    pub fn registered(id: &str, lease_id: i64, capacity: u32, now: Instant) -> Self {
        Self {
            id: id.to_owned(),
            lease_id: Some(lease_id),
            capacity: capacity.max(1),
            conn: None,
            handshaken: false,
            disconnected_since: Some(now),
            concurrency: HashMap::new(),
            credits: HashMap::new(),
            in_flight: HashMap::new(),
            items: HashSet::new(),
            backlog: HashMap::new(),
            fenced_until: None,
        }
    }

    /// Connected and handshaken: it can take items.
    pub fn is_dispatchable(&self) -> bool {
        self.conn.is_some()
            && self.handshaken
            && self.lease_id.is_some()
            && self.fenced_until.is_none()
    }

    /// Credits left for `controller`.
    pub fn credits(&self, controller: &str) -> u32 {
        self.credits.get(controller).copied().unwrap_or(0)
    }

    /// Adds `n` credits for `controller`, never beyond its advertised concurrency minus what it holds:
    /// a worker cannot talk the leader into more in flight than it said it could run.
    pub fn grant(&mut self, controller: &str, n: u32) -> bool {
        let Some(&limit) = self.concurrency.get(controller) else {
            return false;
        };
        let held = self.in_flight.get(controller).copied().unwrap_or(0);
        let credits = self.credits.entry(controller.to_owned()).or_default();
        *credits = credits.saturating_add(n).min(limit.saturating_sub(held));
        true
    }

    /// Sends a message on the current stream; false if there is none or it broke.
    pub fn send(&self, msg: proto::coordinator_message::Msg) -> bool {
        match &self.conn {
            Some(conn) => conn
                .tx
                .send(proto::CoordinatorMessage { msg: Some(msg) })
                .is_ok(),
            None => false,
        }
    }

    /// Total keys routed to it and not yet sent.
    pub fn backlog_len(&self) -> usize {
        self.backlog.values().map(VecDeque::len).sum()
    }

    /// Total items it holds.
    pub fn in_flight_total(&self) -> u32 {
        self.in_flight.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever credits a worker grants, in whatever order, the leader never has more of a
        /// controller in flight and in credit than the concurrency the worker advertised.
        #[test]
        fn credits_never_exceed_the_advertised_concurrency_minus_what_it_holds(
            limit in 1u32..10_000,
            held in 0u32..12_000,
            grants in proptest::collection::vec(any::<u32>(), 1..10),
        ) {
            let mut w = WorkerState::registered("w0", 1, 1, Instant::now());
            w.concurrency.insert("c".into(), limit);
            w.in_flight.insert("c".into(), held);
            for n in grants {
                prop_assert!(w.grant("c", n));
                prop_assert!(w.credits("c") <= limit.saturating_sub(held));
            }
            prop_assert!(!w.grant("unknown", 1));
        }
    }
}
