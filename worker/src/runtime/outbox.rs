//! Outgoing Done and Credit messages, batched: a worker finishing tens of thousands of items a second
//! must not send one message per item, so finished items collect here and go out at most every
//! [`FLUSH_INTERVAL`] or every [`MAX_BATCH`] items, whichever comes first.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_proto as proto;

/// The longest a finished item waits before its Done is sent.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(1);

/// The most Dones in one message; a full batch is sent at once.
pub(crate) const MAX_BATCH: usize = 256;

/// Pending Dones and credits.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    dones: Vec<proto::Done>,
    credits: BTreeMap<String, u32>,
}

impl Outbox {
    pub(crate) fn done(&mut self, done: proto::Done) {
        self.dones.push(done);
    }

    pub(crate) fn credit(&mut self, controller: &str, n: u32) {
        if n > 0 {
            let credit = self.credits.entry(controller.to_owned()).or_default();
            *credit = credit.saturating_add(n);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.dones.is_empty() && self.credits.is_empty()
    }

    /// Whether a batch is full and should go now.
    pub(crate) fn is_full(&self) -> bool {
        self.dones.len() >= MAX_BATCH
    }

    /// The messages to send, Dones first so the coordinator frees keys before it spends the credits
    /// they return; leaves the outbox empty.
    pub(crate) fn take(&mut self) -> Vec<proto::WorkerMessage> {
        let mut messages = Vec::with_capacity(1 + self.credits.len());
        if !self.dones.is_empty() {
            let items = std::mem::take(&mut self.dones);
            messages.push(proto::WorkerMessage {
                msg: Some(proto::worker_message::Msg::Done(proto::DoneBatch { items })),
            });
        }
        for (controller, n) in std::mem::take(&mut self.credits) {
            messages.push(proto::WorkerMessage {
                msg: Some(proto::worker_message::Msg::Credit(proto::Credit {
                    controller,
                    n,
                })),
            });
        }
        messages
    }

    /// Forgets the pending credits (a draining worker wants no more items) but keeps the Dones.
    pub(crate) fn drop_credits(&mut self) {
        self.credits.clear();
    }

    /// Forgets everything pending (the stream it was meant for is gone).
    pub(crate) fn clear(&mut self) {
        self.dones.clear();
        self.credits.clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn done(id: u64) -> proto::Done {
        proto::Done {
            item_id: id,
            ..Default::default()
        }
    }

    #[test]
    fn credits_of_one_controller_add_up_into_one_message() {
        let mut outbox = Outbox::default();
        outbox.credit("journal", 1);
        outbox.credit("journal", 1);
        outbox.credit("one-child", 2);
        outbox.credit("journal", 0);
        let messages = outbox.take();
        let credits: Vec<_> = messages
            .iter()
            .filter_map(|m| match &m.msg {
                Some(proto::worker_message::Msg::Credit(c)) => Some((c.controller.as_str(), c.n)),
                _ => None,
            })
            .collect();
        assert_eq!(credits, [("journal", 2), ("one-child", 2)]);
        assert!(outbox.is_empty());
    }

    #[test]
    fn dones_go_out_in_one_batch_before_the_credits() {
        let mut outbox = Outbox::default();
        outbox.credit("journal", 2);
        outbox.done(done(1));
        outbox.done(done(2));
        let messages = outbox.take();
        assert_eq!(messages.len(), 2);
        match &messages[0].msg {
            Some(proto::worker_message::Msg::Done(batch)) => assert_eq!(batch.items.len(), 2),
            other => panic!("expected the Done batch first, got {other:?}"),
        }
    }

    #[test]
    fn dropping_credits_keeps_the_dones() {
        let mut outbox = Outbox::default();
        outbox.credit("journal", 3);
        outbox.done(done(1));
        outbox.drop_credits();
        let messages = outbox.take();
        assert_eq!(messages.len(), 1);
        assert!(matches!(
            &messages[0].msg,
            Some(proto::worker_message::Msg::Done(_))
        ));
    }

    #[test]
    fn a_batch_is_full_at_the_limit() {
        let mut outbox = Outbox::default();
        for id in 0..MAX_BATCH as u64 - 1 {
            outbox.done(done(id));
        }
        assert!(!outbox.is_full());
        outbox.done(done(9999));
        assert!(outbox.is_full());
    }
}
