//! A pod's readiness and availability, as every workload controller reads them (upstream
//! `podutil.IsPodReady` and `IsPodAvailable`): ready is the Ready condition True; available is ready
//! for at least `minReadySeconds`, measured from the condition's last transition.
//!
//! The instant a pod becomes available counts as available (upstream compares with a strict
//! `Before`), so a requeue for [`available_at`] finds the pod available rather than asking again
//! for the same instant.

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Since when the pod is ready: `Some(None)` when ready since an unknown time (no transition time),
/// `None` when not ready.
pub fn ready_since(pod: &Pod) -> Option<Option<Timestamp>> {
    let ready = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    (ready.status == "True").then(|| ready.last_transition_time.as_ref().map(|t| t.0))
}

/// The Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Ready, and with `min_ready_seconds` above zero ready for that long at `now`. A pod ready since an
/// unknown time is available only without `min_ready_seconds`; a transition time too late to add to
/// is never reached. The phase is not looked at, as upstream.
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(since)) => after(since, min_ready_seconds).is_some_and(|at| at <= now),
    }
}

/// When a ready pod that is not available yet becomes available: `None` when it is not ready, is
/// already available, or was ready since an unknown time (it never becomes available by waiting).
pub fn available_at(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> Option<Timestamp> {
    if min_ready_seconds <= 0 {
        return None;
    }
    let at = after(ready_since(pod)??, min_ready_seconds)?;
    (at > now).then_some(at)
}

/// `seconds` after `t`; `None` past the end of time.
fn after(t: Timestamp, seconds: i32) -> Option<Timestamp> {
    t.checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(ready: Option<&str>, since: Option<&str>) -> Pod {
        let conditions = match (ready, since) {
            (None, _) => json!([]),
            (Some(status), None) => json!([{"type": "Ready", "status": status}]),
            (Some(status), Some(t)) => {
                json!([{"type": "Ready", "status": status, "lastTransitionTime": t}])
            }
        };
        serde_json::from_value(json!({"status": {"conditions": conditions}})).unwrap()
    }

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    #[test]
    fn ready_needs_the_ready_condition_true() {
        assert!(!is_ready(&pod(None, None)));
        assert!(!is_ready(&pod(Some("False"), Some("2026-01-01T00:00:00Z"))));
        assert!(is_ready(&pod(Some("True"), None)));
        assert_eq!(ready_since(&pod(Some("True"), None)), Some(None));
    }

    #[test]
    fn available_counts_min_ready_seconds_from_the_transition_inclusively() {
        let p = pod(Some("True"), Some("2026-01-01T00:00:00Z"));
        assert!(is_available(&p, 0, at("2026-01-01T00:00:00Z")));
        assert!(!is_available(&p, 10, at("2026-01-01T00:00:09Z")));
        assert!(is_available(&p, 10, at("2026-01-01T00:00:10Z")));
        assert_eq!(
            available_at(&p, 10, at("2026-01-01T00:00:05Z")),
            Some(at("2026-01-01T00:00:10Z"))
        );
        assert_eq!(available_at(&p, 10, at("2026-01-01T00:00:10Z")), None);
        assert_eq!(available_at(&p, 0, at("2026-01-01T00:00:00Z")), None);
    }

    #[test]
    fn ready_since_an_unknown_time_is_available_only_without_min_ready_seconds() {
        let p = pod(Some("True"), None);
        assert!(is_available(&p, 0, at("2026-01-01T00:00:00Z")));
        assert!(!is_available(&p, 5, at("2030-01-01T00:00:00Z")));
        assert_eq!(available_at(&p, 5, at("2026-01-01T00:00:00Z")), None);
    }
}
