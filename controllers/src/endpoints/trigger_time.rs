//! The `endpoints.kubernetes.io/last-change-trigger-time` annotation (upstream
//! `TriggerTimeTracker`): when the earliest change not yet reflected in the Endpoints happened. A
//! pod's change time is its Ready condition's last transition, a Service's its creation; a sync
//! reports the earliest of those that moved since the previous sync of the same Service, the
//! Service's creation on its first sync, and nothing (the annotation is removed) when none moved,
//! e.g. when a pod was only deleted.
//!
//! Like upstream's, the tracker is memory of the process: each worker keeps the Services it synced.
//! A Service whose key moves to another worker (a shard handover, a worker restart) is "first
//! synced" there and gets its creation time, as upstream after a kube-controller-manager restart.

use std::collections::HashMap;

use flotilla_sdk::k8s_openapi::api::core::v1::{Pod, Service};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;

/// What the last sync of one Service saw.
#[derive(Debug, Default, Clone)]
struct ServiceState {
    /// The Service's trigger time (its creation).
    service: Option<Timestamp>,
    /// Each pod's trigger time, by pod name.
    pods: HashMap<String, Timestamp>,
}

/// The trigger times every Service was last synced with, on this worker.
#[derive(Debug, Default)]
pub(crate) struct TriggerTimeTracker {
    /// `(namespace, name)` → state; entries are removed when their Service is gone.
    states: Mutex<HashMap<(String, String), ServiceState>>,
}

impl TriggerTimeTracker {
    /// Records this sync of `service` over `pods` and returns the trigger time to write, `None` to
    /// remove the annotation. The fleet never reconciles one key twice at once, which the
    /// read-then-write of one entry relies on (as upstream's does).
    pub(crate) fn compute(
        &self,
        namespace: &str,
        service: &Service,
        pods: &[Pod],
    ) -> Option<Timestamp> {
        let key = (
            namespace.to_owned(),
            service.metadata.name.clone().unwrap_or_default(),
        );
        let previous = self.states.lock().get(&key).cloned();
        let known = previous.is_some();
        let previous = previous.unwrap_or_default();
        let mut earliest: Option<Timestamp> = None;
        let mut pod_times = HashMap::new();
        for pod in pods {
            let Some(time) = pod_trigger_time(pod) else {
                continue;
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if previous.pods.get(&name).is_none_or(|last| time > *last) {
                earliest = Some(earliest.map_or(time, |e| e.min(time)));
            }
            pod_times.insert(name, time);
        }
        let created = service.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(time) = created
            && previous.service.is_none_or(|last| time > last)
        {
            earliest = Some(earliest.map_or(time, |e| e.min(time)));
        }
        self.states.lock().insert(
            key,
            ServiceState {
                service: created,
                pods: pod_times,
            },
        );
        if known { earliest } else { created }
    }

    /// Forgets a Service that is gone.
    pub(crate) fn delete(&self, namespace: &str, name: &str) {
        self.states
            .lock()
            .remove(&(namespace.to_owned(), name.to_owned()));
    }
}

/// A pod's Ready condition's last transition, if it has one.
fn pod_trigger_time(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// The annotation's value: RFC 3339 in UTC with the fraction only when there is one (Go's
/// `time.RFC3339Nano`).
pub(crate) fn format(time: Timestamp) -> String {
    time.to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service() -> Service {
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns",
            "creationTimestamp": "2026-11-26T10:07:25Z"}}))
        .unwrap()
    }

    fn pod(name: &str, ready_at: Option<&str>) -> Pod {
        let conditions =
            ready_at.map(|t| json!([{"type": "Ready", "status": "True", "lastTransitionTime": t}]));
        serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"conditions": conditions}}))
        .unwrap()
    }

    fn at(text: &str) -> Option<Timestamp> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn the_first_sync_reports_the_services_creation_then_only_what_moved() {
        let tracker = TriggerTimeTracker::default();
        let svc = service();
        assert_eq!(
            tracker.compute("ns", &svc, &[pod("a", None)]),
            at("2026-11-26T10:07:25Z")
        );
        // Nothing moved: no trigger time (the annotation is removed if the Endpoints is written).
        assert_eq!(tracker.compute("ns", &svc, &[pod("a", None)]), None);
        let a = pod("a", Some("2026-11-26T10:07:27Z"));
        assert_eq!(
            tracker.compute("ns", &svc, std::slice::from_ref(&a)),
            at("2026-11-26T10:07:27Z")
        );
        let b = pod("b", Some("2026-11-26T10:07:28Z"));
        let c = pod("c", Some("2026-11-26T10:07:29Z"));
        assert_eq!(
            tracker.compute("ns", &svc, &[a.clone(), c.clone(), b.clone()]),
            at("2026-11-26T10:07:28Z"),
            "the earliest change that moved"
        );
        // A pod only deleted moves nothing.
        assert_eq!(tracker.compute("ns", &svc, &[a, b]), None);
        tracker.delete("ns", "web");
        assert_eq!(
            tracker.compute("ns", &svc, &[]),
            at("2026-11-26T10:07:25Z"),
            "a forgotten Service is new again"
        );
        assert_eq!(
            format(at("2026-11-26T10:07:25Z").unwrap()),
            "2026-11-26T10:07:25Z"
        );
    }
}
