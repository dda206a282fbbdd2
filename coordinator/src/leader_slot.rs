//! Which dispatcher (if any) the gRPC services talk to: set while this coordinator leads, empty otherwise.

use std::sync::Arc;

use flotilla_common::Leadership;
use parking_lot::RwLock;
use tokio::time::{Duration, Instant};

use crate::fleet::{CacheAccess, DispatcherHandle};

/// Shared between the leadership loop (which sets it) and the services (which read it).
#[derive(Clone)]
pub struct LeaderSlot {
    inner: Arc<RwLock<SlotState>>,
}

impl Default for LeaderSlot {
    fn default() -> Self {
        Self {
            inner: Arc::new(RwLock::new(SlotState {
                dispatcher: None,
                access: None,
                known_leader: None,
                leaderless_since: Some(Instant::now()),
            })),
        }
    }
}

struct SlotState {
    dispatcher: Option<DispatcherHandle>,
    /// Who may read the cache, as the current term publishes it.
    access: Option<CacheAccess>,
    /// The leader as last observed, for "not the leader, try X" answers.
    known_leader: Option<Leadership>,
    /// Since when no leader has been observed; `None` while one is.
    leaderless_since: Option<Instant>,
}

impl LeaderSlot {
    /// The current term's dispatcher, while this process leads.
    pub fn dispatcher(&self) -> Option<DispatcherHandle> {
        self.inner.read().dispatcher.clone()
    }

    /// The current term's cache access view, while this process leads.
    pub fn cache_access(&self) -> Option<CacheAccess> {
        self.inner.read().access.clone()
    }

    /// Installs (or clears) the term's dispatcher and cache access view.
    pub fn set_term(&self, term: Option<(DispatcherHandle, CacheAccess)>) {
        let mut state = self.inner.write();
        match term {
            Some((dispatcher, access)) => {
                state.dispatcher = Some(dispatcher);
                state.access = Some(access);
            }
            None => {
                state.dispatcher = None;
                state.access = None;
            }
        }
    }

    /// Records the leader as observed in etcd.
    pub fn set_known_leader(&self, leader: Option<Leadership>) {
        let mut state = self.inner.write();
        state.leaderless_since = match (&leader, state.leaderless_since) {
            (Some(_), _) => None,
            (None, Some(since)) => Some(since),
            (None, None) => Some(Instant::now()),
        };
        state.known_leader = leader;
    }

    /// How long no leader has been observed; `None` while one is.
    pub fn leaderless_for(&self) -> Option<Duration> {
        self.inner.read().leaderless_since.map(|t| t.elapsed())
    }

    /// A refusal for peers that reached a coordinator which does not lead.
    pub fn not_leader(&self) -> tonic::Status {
        match &self.inner.read().known_leader {
            Some(l) => tonic::Status::unavailable(format!(
                "not the leader; the leader is {} at {} (term {})",
                l.info.id, l.info.address, l.term
            )),
            None => tonic::Status::unavailable("not the leader; no leader is elected"),
        }
    }
}
