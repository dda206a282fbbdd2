//! The event recorder a reconcile publishes through: kube-rs's [`Recorder`] (which folds repeats of
//! one event into a series) behind client-go's per-object spam filter, shared by every reconcile of a
//! controller on a worker, as kube-controller-manager's event broadcaster is shared by its controller.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};

use crate::spam_filter::SpamFilter;

/// What the spam filter tells objects apart by (client-go's `getSpamKey`; the source — controller and
/// worker — is the same for every event of one recorder).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SpamKey {
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    api_version: Option<String>,
}

/// Publishes Events about objects; cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    recorder: Recorder,
    spam: Arc<SpamFilter<SpamKey>>,
}

impl EventRecorder {
    /// A recorder publishing through kube-rs's `recorder`, with client-go's default spam filter.
    pub fn new(recorder: Recorder) -> Self {
        Self {
            recorder,
            spam: Arc::default(),
        }
    }

    /// Publishes `event` about the object `regarding`, unless that object has had its burst of events
    /// (25, then one per 5 minutes): then the event is dropped, as client-go drops it, and logged at
    /// debug level.
    ///
    /// # Errors
    /// When the API server refuses the Event; an Event is a courtesy, so callers usually log this and
    /// carry on.
    pub async fn publish(&self, event: &Event, regarding: &ObjectReference) -> kube::Result<()> {
        let key = SpamKey {
            kind: regarding.kind.clone(),
            namespace: regarding.namespace.clone(),
            name: regarding.name.clone(),
            uid: regarding.uid.clone(),
            api_version: regarding.api_version.clone(),
        };
        if !self.spam.allow(&key) {
            tracing::debug!(
                reason = %event.reason,
                object = ?regarding.name,
                "event dropped: the object had its burst of events"
            );
            return Ok(());
        }
        self.recorder.publish(event, regarding).await
    }
}
