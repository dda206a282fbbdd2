//! The one receiver of informer events: the current leader's dispatcher.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::InformerEvent;

/// The slot of the current subscriber, shared by every informer task.
#[derive(Debug, Clone, Default)]
pub(crate) struct Subscriber {
    tx: Arc<Mutex<Option<mpsc::UnboundedSender<InformerEvent>>>>,
}

impl Subscriber {
    /// A new receiver that takes the place of the previous one (whose channel closes).
    pub(crate) fn replace(&self) -> mpsc::UnboundedReceiver<InformerEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.tx.lock() = Some(tx);
        rx
    }

    /// Sends to the current subscriber, if any; a subscriber that dropped its receiver is forgotten.
    pub(crate) fn send(&self, event: InformerEvent) {
        let mut slot = self.tx.lock();
        if let Some(tx) = slot.as_ref()
            && tx.send(event).is_err()
        {
            *slot = None;
        }
    }
}
