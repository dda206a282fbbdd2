//! The PersistentVolumeClaims the simulator has seen, so that — as kube-scheduler's VolumeBinding
//! plugin does — a pod whose claim does not exist (or is being deleted) stays unbound and Pending
//! with `PodScheduled=False` / `Unschedulable`, and is bound as soon as the claim appears.
//!
//! The set is fed by a watch on all claims; until its first list is complete, pods that mount a
//! claim are not bound at all (a claim may exist that the simulator has not heard of yet).

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

/// A claim's namespace and name.
pub(crate) type ClaimKey = (String, String);

/// The claims known to exist, each with whether it is being deleted.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    known: HashMap<ClaimKey, bool>,
    /// Claims seen since the watcher restarted its list, to drop those deleted while it was away.
    relisted: Option<HashSet<ClaimKey>>,
    synced: bool,
}

/// Why a pod cannot be scheduled yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The claim list is not complete yet; nothing is reported.
    Unsynced,
    /// The scheduler's reason, e.g. `persistentvolumeclaim "data" not found`.
    Unschedulable(String),
}

fn key_of(claim: &PersistentVolumeClaim) -> Option<ClaimKey> {
    Some((
        claim.metadata.namespace.clone()?,
        claim.metadata.name.clone()?,
    ))
}

impl Claims {
    /// Records a watch event; returns the claims that now exist and did not before (or whose
    /// deletion state changed), whose waiting pods deserve another look. After the first complete
    /// list every pod with claims does, so `InitDone` returns `None` meaning "all".
    pub(crate) fn observe(&mut self, event: Event<PersistentVolumeClaim>) -> Option<Vec<ClaimKey>> {
        match event {
            Event::Init => {
                self.relisted = Some(HashSet::new());
                Some(Vec::new())
            }
            Event::InitApply(claim) => {
                let changed = self.apply(&claim);
                if let (Some(seen), Some(key)) = (self.relisted.as_mut(), key_of(&claim)) {
                    seen.insert(key);
                }
                Some(changed)
            }
            Event::InitDone => {
                if let Some(seen) = self.relisted.take() {
                    self.known.retain(|key, _| seen.contains(key));
                }
                self.synced = true;
                None
            }
            Event::Apply(claim) => Some(self.apply(&claim)),
            Event::Delete(claim) => {
                if let Some(key) = key_of(&claim) {
                    self.known.remove(&key);
                }
                Some(Vec::new())
            }
        }
    }

    fn apply(&mut self, claim: &PersistentVolumeClaim) -> Vec<ClaimKey> {
        let Some(key) = key_of(claim) else {
            return Vec::new();
        };
        let deleting = claim.metadata.deletion_timestamp.is_some();
        match self.known.insert(key.clone(), deleting) {
            Some(before) if before == deleting => Vec::new(),
            _ => vec![key],
        }
    }

    /// Why `pod` may not be bound yet, or `None` when all the claims it mounts exist.
    pub(crate) fn wait(&self, pod: &Pod) -> Option<Wait> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let names = claim_names(pod);
        if names.is_empty() {
            return None;
        }
        if !self.synced {
            return Some(Wait::Unsynced);
        }
        names.into_iter().find_map(|name| {
            match self.known.get(&(namespace.clone(), name.to_string())) {
                None => Some(Wait::Unschedulable(format!(
                    "persistentvolumeclaim \"{name}\" not found"
                ))),
                Some(true) => Some(Wait::Unschedulable(format!(
                    "persistentvolumeclaim \"{name}\" is being deleted"
                ))),
                Some(false) => None,
            }
        })
    }
}

/// The claims `pod` mounts through `persistentVolumeClaim` volumes, in volume order.
pub(crate) fn claim_names(pod: &Pod) -> Vec<&str> {
    pod.spec
        .iter()
        .flat_map(|spec| spec.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
        .collect()
}

/// Whether `pod` mounts the claim `key`.
pub(crate) fn mounts(pod: &Pod, key: &ClaimKey) -> bool {
    pod.metadata.namespace.as_deref() == Some(key.0.as_str())
        && claim_names(pod).contains(&key.1.as_str())
}

/// The message kube-scheduler puts on a pod that a pre-filter (here VolumeBinding) rejects on
/// every one of `nodes` nodes, preemption included.
pub(crate) fn unschedulable_message(reason: &str, nodes: usize) -> String {
    format!(
        "0/{nodes} nodes are available: {reason}. preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
    )
}

/// Whether `pod` already carries a `PodScheduled=False` / `Unschedulable` condition.
pub(crate) fn reported_unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
}

/// The merge patch of `pod`'s status that reports it `PodScheduled=False` / `Unschedulable` with
/// `message`, or `None` when it already says so. Other conditions are kept.
pub(crate) fn unschedulable_patch(pod: &Pod, message: &str, now: &Value) -> Option<Value> {
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let current = conditions.iter().find(|c| c.type_ == "PodScheduled");
    if current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
            && c.message.as_deref() == Some(message)
    }) {
        return None;
    }
    // The transition time moves only when the status does, as the scheduler keeps it.
    let since = current
        .filter(|c| c.status == "False")
        .and_then(|c| c.last_transition_time.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or_else(|| now.clone());
    let mut list: Vec<Value> = conditions
        .iter()
        .filter(|c| c.type_ != "PodScheduled")
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    list.push(json!({
        "type": "PodScheduled",
        "status": "False",
        "lastProbeTime": null,
        "lastTransitionTime": since,
        "reason": "Unschedulable",
        "message": message,
    }));
    Some(json!({"status": {"conditions": list}}))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(claims: &[&str]) -> Pod {
        let volumes: Vec<Value> = claims
            .iter()
            .map(|c| json!({"name": format!("v-{c}"), "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c"}], "volumes": volumes},
        }))
        .unwrap()
    }

    fn claim(name: &str, deleting: bool) -> PersistentVolumeClaim {
        let mut meta = json!({"name": name, "namespace": "ns"});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({"metadata": meta})).unwrap()
    }

    fn synced(claims: &[PersistentVolumeClaim]) -> Claims {
        let mut known = Claims::default();
        known.observe(Event::Init);
        for c in claims {
            known.observe(Event::InitApply(c.clone()));
        }
        known.observe(Event::InitDone);
        known
    }

    #[test]
    fn a_pod_without_claims_never_waits() {
        assert_eq!(Claims::default().wait(&pod(&[])), None);
    }

    #[test]
    fn a_pod_with_claims_waits_for_the_first_list() {
        assert_eq!(
            Claims::default().wait(&pod(&["data"])),
            Some(Wait::Unsynced)
        );
    }

    #[test]
    fn a_missing_claim_is_reported_as_the_scheduler_words_it_until_it_appears() {
        let mut claims = synced(&[claim("logs", false)]);
        let p = pod(&["logs", "data"]);
        assert_eq!(
            claims.wait(&p),
            Some(Wait::Unschedulable(
                "persistentvolumeclaim \"data\" not found".into()
            ))
        );
        let appeared = claims.observe(Event::Apply(claim("data", false)));
        assert_eq!(appeared, Some(vec![("ns".into(), "data".into())]));
        assert!(mounts(&p, &appeared.unwrap()[0]));
        assert_eq!(claims.wait(&p), None);
        claims.observe(Event::Apply(claim("data", true)));
        assert_eq!(
            claims.wait(&p),
            Some(Wait::Unschedulable(
                "persistentvolumeclaim \"data\" is being deleted".into()
            ))
        );
        claims.observe(Event::Delete(claim("data", true)));
        assert!(matches!(claims.wait(&p), Some(Wait::Unschedulable(_))));
    }

    #[test]
    fn a_relist_forgets_claims_deleted_meanwhile() {
        let mut claims = synced(&[claim("data", false)]);
        let again = synced(&[]);
        claims.observe(Event::Init);
        claims.observe(Event::InitDone);
        assert_eq!(claims.wait(&pod(&["data"])), again.wait(&pod(&["data"])));
    }

    #[test]
    fn the_unschedulable_condition_is_written_once_and_keeps_other_conditions() {
        let message = unschedulable_message("persistentvolumeclaim \"data\" not found", 3);
        assert_eq!(
            message,
            "0/3 nodes are available: persistentvolumeclaim \"data\" not found. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
        let now = json!("2026-01-01T00:00:00Z");
        let mut p = pod(&["data"]);
        let patch = unschedulable_patch(&p, &message, &now).unwrap();
        let condition = &patch["status"]["conditions"][0];
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "Unschedulable");
        p.status = serde_json::from_value(patch["status"].clone()).unwrap();
        assert_eq!(unschedulable_patch(&p, &message, &now), None);
    }
}
