//! The `endpoints.kubernetes.io/last-change-trigger-time` annotation (upstream
//! `TriggerTimeTracker`): the earliest change that this sync is the first to see, among the Service's
//! creation and its pods' Ready transitions; none when nothing changed since the last sync (a
//! deletion, say), which removes the annotation from the slices written.
//!
//! Like upstream's, the tracker remembers what the last sync of each Service saw, in memory. A worker
//! keeps the keys of its shards, so it sees a Service's syncs in turn; after a shard moves or the
//! worker restarts, the first sync reports the Service's creation time, as kube-controller-manager
//! does after a restart. No two syncs of one Service run at once (the fleet's processing set).

use std::collections::{BTreeMap, HashMap};

use flotilla_sdk::k8s_openapi::api::core::v1::{Pod, Service};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;

/// The annotation's key.
pub const ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

#[derive(Debug, Default)]
struct Seen {
    service: Option<Timestamp>,
    pods: BTreeMap<String, Timestamp>,
}

/// What the last sync of each Service saw. Shared by one controller's reconciles on one worker.
#[derive(Debug, Default)]
pub struct Tracker {
    services: Mutex<HashMap<String, Seen>>,
}

impl Tracker {
    /// The trigger time of this sync of `service` (key `key`) over `pods` (every pod its selector
    /// matches), remembering them for the next; `None` for no annotation.
    pub fn observe(&self, key: &str, service: &Service, pods: &[Pod]) -> Option<Timestamp> {
        let created = service.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let now: BTreeMap<String, Timestamp> = pods
            .iter()
            .filter_map(|p| Some((p.metadata.name.clone()?, ready_transition(p)?)))
            .collect();
        let mut services = self.services.lock();
        let known = services.contains_key(key);
        let seen = services.entry(key.to_owned()).or_default();
        let mut earliest: Option<Timestamp> = None;
        let mut consider = |t: Timestamp| earliest = Some(earliest.map_or(t, |e| e.min(t)));
        for (name, at) in &now {
            if seen.pods.get(name).is_none_or(|before| at > before) {
                consider(*at);
            }
        }
        if let Some(created) = created
            && seen.service.is_none_or(|before| created > before)
        {
            consider(created);
        }
        seen.pods = now;
        seen.service = created;
        if known { earliest } else { created }
    }

    /// Forgets a Service that is gone.
    pub fn forget(&self, key: &str) {
        self.services.lock().remove(key);
    }
}

fn ready_transition(pod: &Pod) -> Option<Timestamp> {
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

/// `at` as the annotation writes it (RFC 3339 in UTC, as Go's `RFC3339Nano`: no trailing zeros).
pub fn format(at: Timestamp) -> String {
    at.to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, ready_at: &str) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]}}),
        )
        .unwrap()
    }

    /// The fixture's sequence: created at :25, web-1 ready at :27, web-3 appears not ready at :27,
    /// web-3 ready at :28, web-1 marked for deletion (no transition), web-1 gone after :31.
    #[test]
    fn follows_kube_controller_managers_recorded_annotations() {
        let svc: Service = serde_json::from_value(
            json!({"metadata": {"name": "web", "creationTimestamp": "2026-11-26T10:07:25Z"}}),
        )
        .unwrap();
        let t = Tracker::default();
        let at = |s: &str| Some(s.parse::<Timestamp>().unwrap());
        assert_eq!(t.observe("ns/web", &svc, &[]), at("2026-11-26T10:07:25Z"));
        let w1 = pod("web-1", "2026-11-26T10:07:27Z");
        assert_eq!(
            t.observe("ns/web", &svc, std::slice::from_ref(&w1)),
            at("2026-11-26T10:07:27Z")
        );
        let w3 = pod("web-3", "2026-11-26T10:07:27Z");
        assert_eq!(
            t.observe("ns/web", &svc, &[w1.clone(), w3]),
            at("2026-11-26T10:07:27Z")
        );
        let w3 = pod("web-3", "2026-11-26T10:07:28Z");
        assert_eq!(
            t.observe("ns/web", &svc, &[w1.clone(), w3.clone()]),
            at("2026-11-26T10:07:28Z")
        );
        assert_eq!(t.observe("ns/web", &svc, &[w1, w3.clone()]), None);
        let w1 = pod("web-1", "2026-11-26T10:07:31Z");
        assert_eq!(
            t.observe("ns/web", &svc, &[w1, w3]),
            at("2026-11-26T10:07:31Z")
        );
        assert_eq!(
            format(at("2026-11-26T10:07:31Z").unwrap()),
            "2026-11-26T10:07:31Z"
        );
    }
}
