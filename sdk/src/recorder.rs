//! The event recorder a reconcile records Events through, as kube-controller-manager's controllers
//! record theirs with client-go's event broadcaster: [`EventRecorder::event`] returns at once, and a
//! writer task per recorder runs each Event through client-go's correlator ([`EventCorrelator`]) and
//! writes it as a core/v1 Event — created, or patched with a raised `count` when it repeats — in
//! kube-controller-manager's shape (name `<object>.<hex nanoseconds>`, `source.component` and
//! `reportingComponent` the controller's event source).
//!
//! Like client-go's broadcaster, at most 1,000 Events wait to be written; more are dropped (logged at
//! debug level). A write failing in transport is tried again, up to 12 times, 10 s apart (the first
//! wait jittered); an Event the API server refuses is dropped with a log line.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use tokio::sync::mpsc;

use crate::event_correlator::{Correlated, EventCorrelator, event_name};

/// client-go's `maxQueuedEvents`: Events waiting to be written before more are dropped.
pub const MAX_QUEUED_EVENTS: usize = 1000;

/// client-go's `maxTriesPerEvent`.
pub const MAX_TRIES_PER_EVENT: u32 = 12;

/// client-go's `defaultSleepDuration`: the wait between tries (the first one jittered below it).
pub const RETRY_SLEEP: Duration = Duration::from_secs(10);

/// An Event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something may need a look.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Records Events about objects; cheap to clone. The writer task ends when the last clone is dropped,
/// once what is queued is written.
#[derive(Clone)]
pub struct EventRecorder {
    inner: Arc<Inner>,
}

struct Inner {
    component: String,
    /// Events waiting to be written. The span an Event was recorded in is not kept with it: holding
    /// the reconcile's span until the Event is written would stretch the reconcile's recorded duration
    /// by the queue's wait, so Event writes are not part of the reconcile's trace.
    queue: mpsc::Sender<Event>,
}

impl EventRecorder {
    /// A recorder writing through `client` as event source `component` (kube-controller-manager's are
    /// `replicaset-controller`, `deployment-controller`, …).
    ///
    /// # Panics
    /// Outside a tokio runtime, where its writer task cannot be spawned.
    pub fn new(client: kube::Client, component: &str) -> Self {
        let (queue, queued) = mpsc::channel(MAX_QUEUED_EVENTS);
        tokio::spawn(write_all(client, queued));
        Self {
            inner: Arc::new(Inner {
                component: component.to_owned(),
                queue,
            }),
        }
    }

    /// Records an Event of `type_` about `object` (in its namespace, or `default` for a cluster-scoped
    /// object), with a CamelCase `reason` and a human-readable `message`. Never waits. The Event refers
    /// to the object as client-go's `GetReference` does: kind, apiVersion, namespace, name, uid and
    /// the resourceVersion the controller saw.
    pub fn event<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let mut regarding = object.object_ref(&());
        regarding.resource_version = object.meta().resource_version.clone();
        self.event_on_reference(&regarding, type_, reason, message);
    }

    /// [`Self::event`] about the object `regarding` refers to (for objects without a static type).
    pub fn event_on_reference(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let now = Some(Time(Timestamp::now()));
        let component = Some(self.inner.component.clone());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name(
                    regarding.name.as_deref().unwrap_or_default(),
                    now.as_ref(),
                )),
                namespace: Some(
                    regarding
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".to_owned()),
                ),
                ..Default::default()
            },
            involved_object: regarding.clone(),
            reason: Some(reason.to_owned()),
            message: Some(message.into()),
            type_: Some(type_.as_str().to_owned()),
            source: Some(EventSource {
                component: component.clone(),
                host: None,
            }),
            reporting_component: component,
            reporting_instance: Some(String::new()),
            first_timestamp: now.clone(),
            last_timestamp: now,
            count: Some(1),
            ..Default::default()
        };
        if self.inner.queue.try_send(event).is_err() {
            tracing::debug!(
                reason,
                object = ?regarding.name,
                "event dropped: {MAX_QUEUED_EVENTS} events already wait to be written"
            );
        }
    }
}

/// The writer task: each queued Event, correlated and written, one at a time.
async fn write_all(client: kube::Client, mut queued: mpsc::Receiver<Event>) {
    let correlator = EventCorrelator::default();
    while let Some(event) = queued.recv().await {
        let correlated = correlator.correlate(event);
        write(&client, &correlator, correlated).await;
    }
}

/// Writes one correlated Event, trying again while the failure is in transport.
async fn write(client: &kube::Client, correlator: &EventCorrelator, correlated: Correlated) {
    let (event, patch) = match correlated {
        Correlated::Skip => {
            tracing::debug!("event dropped: the object had its burst of events");
            return;
        }
        Correlated::Create(event) => (event, None),
        Correlated::Patch { event, patch } => (event, Some(patch)),
    };
    for attempt in 1..=MAX_TRIES_PER_EVENT {
        let err = match write_once(client, &event, patch.as_ref()).await {
            Ok(written) => {
                correlator.update_state(&written);
                return;
            }
            Err(err) => err,
        };
        if let kube::Error::Api(status) = &err {
            // Refused, not lost in transport: trying again would be refused again.
            if status.code == 409 || status.message.contains("being terminated") {
                tracing::debug!(error = %err, reason = ?event.reason, "event refused");
            } else {
                tracing::warn!(error = %err, reason = ?event.reason, "event refused; not retried");
            }
            return;
        }
        if attempt == MAX_TRIES_PER_EVENT {
            tracing::warn!(error = %err, reason = ?event.reason, "cannot write an event; giving up");
            return;
        }
        tracing::warn!(error = %err, attempt, reason = ?event.reason, "cannot write an event; trying again");
        tokio::time::sleep(retry_delay(attempt)).await;
    }
}

/// Patches the Event when it repeats one written before (creating it if that one is gone), else
/// creates it; the API server's copy.
async fn write_once(
    client: &kube::Client,
    event: &Event,
    patch: Option<&serde_json::Value>,
) -> kube::Result<Event> {
    let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    if let Some(patch) = patch {
        let name = event.metadata.name.as_deref().unwrap_or_default();
        match events
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            written => return written,
        }
    }
    let mut event = event.clone();
    event.metadata.resource_version = None;
    events.create(&PostParams::default(), &event).await
}

/// client-go's wait before try `attempt + 1`: [`RETRY_SLEEP`], the first one scaled by a random
/// fraction so that recorders failing together do not retry together.
fn retry_delay(attempt: u32) -> Duration {
    if attempt > 1 {
        return RETRY_SLEEP;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    RETRY_SLEEP.mul_f64(f64::from(nanos % 1000) / 1000.0)
}
