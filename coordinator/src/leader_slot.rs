//! Which dispatcher (if any) the gRPC services talk to: set while this coordinator leads, empty otherwise.

use std::sync::Arc;

use flotilla_common::Leadership;
use parking_lot::RwLock;

use crate::fleet::DispatcherHandle;

/// Shared between the leadership loop (which sets it) and the services (which read it).
#[derive(Clone, Default)]
pub struct LeaderSlot {
    inner: Arc<RwLock<SlotState>>,
}

#[derive(Default)]
struct SlotState {
    dispatcher: Option<DispatcherHandle>,
    /// The leader as last observed, for "not the leader, try X" answers.
    known_leader: Option<Leadership>,
}

impl LeaderSlot {
    /// The current term's dispatcher, while this process leads.
    pub fn dispatcher(&self) -> Option<DispatcherHandle> {
        self.inner.read().dispatcher.clone()
    }

    /// Installs (or clears) the dispatcher.
    pub fn set_dispatcher(&self, dispatcher: Option<DispatcherHandle>) {
        self.inner.write().dispatcher = dispatcher;
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
