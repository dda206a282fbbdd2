//! The one receiver of informer events: the current leader's dispatcher.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::InformerEvent;

/// Informer events wait for the dispatcher in a channel of this capacity (the dispatcher takes up to
/// 4096 at a time). Back-pressure: an informer task whose event does not fit waits — after its store
/// applied the change, so the Cache service and the dispatcher's reads already see it — and its watch
/// waits with it. No event is dropped for lack of room: a dropped event could lose a key. This cannot
/// deadlock: the dispatcher never waits on an informer task (it reads stores, whose locks are never
/// held across an await, and starts and stops informers without waiting for them).
pub(crate) const EVENT_CAPACITY: usize = 4096;

/// The slot of the current subscriber, shared by every informer task.
#[derive(Debug, Clone, Default)]
pub(crate) struct Subscriber {
    tx: Arc<Mutex<Option<mpsc::Sender<InformerEvent>>>>,
}

impl Subscriber {
    /// A new receiver that takes the place of the previous one (whose channel closes once the senders
    /// waiting on it give up).
    pub(crate) fn replace(&self) -> mpsc::Receiver<InformerEvent> {
        let (tx, rx) = mpsc::channel(EVENT_CAPACITY);
        *self.tx.lock() = Some(tx);
        rx
    }

    /// Sends to the current subscriber, waiting while its channel is full. With no subscriber the event
    /// is dropped (the stores hold the state; a new subscriber reads them); a subscriber that dropped
    /// its receiver is forgotten.
    ///
    /// # Cancel safety
    /// Cancelled while waiting, the event is not sent.
    pub(crate) async fn send(&self, event: InformerEvent) {
        let Some(tx) = self.tx.lock().clone() else {
            return;
        };
        if tx.send(event).await.is_err() {
            let mut slot = self.tx.lock();
            if slot
                .as_ref()
                .is_some_and(|current| current.same_channel(&tx))
            {
                *slot = None;
            }
        }
    }
}
