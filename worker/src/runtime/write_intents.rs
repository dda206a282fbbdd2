//! The worker's write intents on their way to the leader: a traced reconcile's Kubernetes client says,
//! just before a mutating request on a named object, which object it is about to write and the
//! `traceparent` of that request's span ([`WriteIntents::send`]); the session loop drains them into
//! `WorkerMessage.intents` batches on the stream to the welcomed leader, which links the write's echo
//! (the watch event it causes) to that span.
//!
//! Intents bypass the session's state machine: they are advice the leader may drop, are never
//! retried, and carry no state the machine decides on. The queue is bounded: a writer never waits for
//! it and an intent that does not fit is dropped and counted
//! (`flotilla_worker_write_intents_dropped`): the echo of that write is then traced only if the sampler
//! keeps it, and unlinked.

use std::collections::VecDeque;
use std::sync::Arc;

use flotilla_common::{ApiObject, TraceContext};
use flotilla_proto as proto;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;

/// The most intents waiting to be sent: a leader that is slow to take them (or none connected) loses
/// the newest rather than the worker's memory growing. 4096 intents are about 0.5 MiB.
pub(crate) const CAPACITY: usize = 4096;

/// The most intents in one message.
pub(crate) const MAX_BATCH: usize = 256;

/// The sink of a worker's write intents; cheap to clone, one per worker, outliving its sessions.
#[derive(Clone, Debug)]
pub(crate) struct WriteIntents {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    queue: Mutex<VecDeque<proto::WriteIntent>>,
    ready: Notify,
    dropped: Counter,
}

impl WriteIntents {
    /// An empty sink counting the intents it drops in `dropped`.
    pub(crate) fn new(dropped: Counter) -> Self {
        Self {
            inner: Arc::new(Inner {
                queue: Mutex::new(VecDeque::new()),
                ready: Notify::new(),
                dropped,
            }),
        }
    }

    /// Queues the intent to write `object` in the span `request`; never waits. Dropped (and counted)
    /// when the queue is full.
    pub(crate) fn send(&self, object: ApiObject, request: &TraceContext) {
        let intent = proto::WriteIntent {
            group: object.group,
            version: object.version,
            resource: object.resource,
            namespace: object.namespace,
            name: object.name,
            traceparent: request.traceparent(),
        };
        {
            let mut queue = self.inner.queue.lock();
            if queue.len() >= CAPACITY {
                drop(queue);
                self.inner.dropped.inc();
                return;
            }
            queue.push_back(intent);
        }
        self.inner.ready.notify_one();
    }

    /// Resolves when intents may be waiting (at once if some were queued since the last
    /// [`WriteIntents::take`] that emptied the queue; spuriously at most once after it).
    ///
    /// # Cancel safety
    /// Cancel-safe: a wake-up not taken stays for the next call.
    pub(crate) async fn ready(&self) {
        self.inner.ready.notified().await;
    }

    /// The queued intents as messages of at most [`MAX_BATCH`] each, oldest first; leaves the queue
    /// empty.
    pub(crate) fn take(&self) -> Vec<proto::WorkerMessage> {
        let items: Vec<proto::WriteIntent> = self.inner.queue.lock().drain(..).collect();
        items
            .chunks(MAX_BATCH)
            .map(|batch| proto::WorkerMessage {
                msg: Some(proto::worker_message::Msg::Intents(
                    proto::WriteIntentBatch {
                        items: batch.to_vec(),
                    },
                )),
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SPAN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn object(name: &str) -> ApiObject {
        ApiObject {
            group: "apps".into(),
            version: "v1".into(),
            resource: "replicasets".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn names(messages: &[proto::WorkerMessage]) -> Vec<Vec<String>> {
        messages
            .iter()
            .map(|m| match &m.msg {
                Some(proto::worker_message::Msg::Intents(batch)) => {
                    batch.items.iter().map(|i| i.name.clone()).collect()
                }
                other => panic!("not an intent batch: {other:?}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn an_intent_names_the_object_and_the_requests_span_and_wakes_the_sender() {
        let intents = WriteIntents::new(Counter::default());
        let span = TraceContext::parse(SPAN).unwrap();
        intents.send(object("web"), &span);
        tokio::time::timeout(std::time::Duration::from_secs(1), intents.ready())
            .await
            .expect("a queued intent wakes the session");
        let messages = intents.take();
        let [message] = &messages[..] else {
            panic!("one message expected: {messages:?}")
        };
        let Some(proto::worker_message::Msg::Intents(batch)) = &message.msg else {
            panic!("an intent batch expected")
        };
        assert_eq!(
            batch.items,
            [proto::WriteIntent {
                group: "apps".into(),
                version: "v1".into(),
                resource: "replicasets".into(),
                namespace: "ns".into(),
                name: "web".into(),
                traceparent: SPAN.into(),
            }]
        );
        assert!(intents.take().is_empty(), "taking empties the queue");
    }

    #[test]
    fn intents_go_out_oldest_first_in_batches_of_at_most_max_batch() {
        let intents = WriteIntents::new(Counter::default());
        let span = TraceContext::parse(SPAN).unwrap();
        for i in 0..MAX_BATCH + 2 {
            intents.send(object(&i.to_string()), &span);
        }
        let batches = names(&intents.take());
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].len(), MAX_BATCH);
        assert_eq!(batches[0][0], "0");
        assert_eq!(
            batches[1],
            [MAX_BATCH.to_string(), (MAX_BATCH + 1).to_string()]
        );
    }

    #[test]
    fn a_full_queue_drops_the_newest_and_counts_it() {
        let dropped = Counter::default();
        let intents = WriteIntents::new(dropped.clone());
        let span = TraceContext::parse(SPAN).unwrap();
        for i in 0..CAPACITY + 3 {
            intents.send(object(&i.to_string()), &span);
        }
        assert_eq!(dropped.get(), 3);
        let sent: Vec<String> = names(&intents.take()).into_iter().flatten().collect();
        assert_eq!(sent.len(), CAPACITY);
        assert_eq!(sent.last().map(String::as_str), Some("4095"));
    }
}
