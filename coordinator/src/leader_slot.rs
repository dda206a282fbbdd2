//! Which dispatcher (if any) the gRPC services talk to: set while this coordinator leads, empty otherwise.

use std::sync::Arc;

use flotilla_common::Leadership;
use parking_lot::RwLock;

use crate::fleet::{CacheAccess, DispatcherHandle};

/// Shared between the leadership loop (which sets it) and the services (which read it).
#[derive(Clone, Default)]
pub struct LeaderSlot {
    inner: Arc<RwLock<SlotState>>,
}

#[derive(Default)]
struct SlotState {
    dispatcher: Option<DispatcherHandle>,
    /// Who may read the cache, as the current term publishes it.
    access: Option<CacheAccess>,
    /// The leader as last observed, for "not the leader, try X" answers.
    known_leader: Option<Leadership>,
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
        self.inner.write().known_leader = leader;
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
