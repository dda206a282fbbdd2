//! A StatefulSet's PersistentVolumeClaims (upstream `getPersistentVolumeClaims` and the
//! `persistentVolumeClaimRetentionPolicy` helpers of `stateful_set_utils.go`): the claims a pod needs,
//! and which owner references its claims must carry so the garbage collector deletes them when the
//! policy says — the set as controller for `whenDeleted: Delete` (while the pod is in range), the pod
//! as controller for `whenScaled: Delete` once its ordinal is scaled away, none for Retain.

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::apps::v1::StatefulSet;
use flotilla_sdk::k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use flotilla_sdk::kube::ResourceExt;

use super::names::DELETE;
use super::ordinals::claim_name;

/// The claims the set's pod at `ordinal` mounts, one per volumeClaimTemplate in spec order, ready to
/// create: the template named `<template>-<set>-<ordinal>`, in the set's namespace, its labels plus
/// the set selector's matchLabels.
pub fn pod_claims(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let set_name = set.name_any();
    let Some(spec) = set.spec.as_ref() else {
        return Vec::new();
    };
    let selector_labels = spec.selector.match_labels.clone().unwrap_or_default();
    spec.volume_claim_templates
        .iter()
        .flatten()
        .filter_map(|template| {
            let template_name = template.metadata.name.as_deref()?;
            let mut claim = template.clone();
            claim.metadata.name = Some(claim_name(template_name, &set_name, ordinal));
            claim.metadata.namespace = set.namespace();
            let mut labels: BTreeMap<String, String> =
                claim.metadata.labels.take().unwrap_or_default();
            labels.extend(selector_labels.clone());
            claim.metadata.labels = (!labels.is_empty()).then_some(labels);
            claim.status = None;
            Some(claim)
        })
        .collect()
}

/// The set's `persistentVolumeClaimRetentionPolicy`, each half true for Delete. An unknown value
/// makes the whole policy Retain, as upstream treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    /// `whenDeleted: Delete`: the claims go with the set.
    pub when_deleted: bool,
    /// `whenScaled: Delete`: a claim goes with its pod once the pod's ordinal is scaled away.
    pub when_scaled: bool,
}

impl Retention {
    /// The policy of `set` (Retain/Retain when unset).
    pub fn of(set: &StatefulSet) -> Self {
        let policy = set
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
        let parse = |v: Option<&str>| match v.unwrap_or("Retain") {
            "Retain" => Some(false),
            DELETE => Some(true),
            _ => None,
        };
        let deleted = parse(policy.and_then(|p| p.when_deleted.as_deref()));
        let scaled = parse(policy.and_then(|p| p.when_scaled.as_deref()));
        match (deleted, scaled) {
            (Some(when_deleted), Some(when_scaled)) => Self {
                when_deleted,
                when_scaled,
            },
            _ => Self::default(),
        }
    }
}

/// An object a claim's owner reference may point at: the set or one of its pods.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// `apps/v1` or `v1`.
    pub api_version: &'a str,
    /// `StatefulSet` or `Pod`.
    pub kind: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The object's uid; empty for a pod not created yet.
    pub uid: &'a str,
}

impl<'a> Owner<'a> {
    /// The set as an owner.
    pub fn set(set: &'a StatefulSet) -> Self {
        Self {
            api_version: "apps/v1",
            kind: "StatefulSet",
            name: set.metadata.name.as_deref().unwrap_or_default(),
            uid: set.metadata.uid.as_deref().unwrap_or_default(),
        }
    }

    /// A pod as an owner.
    pub fn pod(pod: &'a Pod) -> Self {
        Self {
            api_version: "v1",
            kind: "Pod",
            name: pod.metadata.name.as_deref().unwrap_or_default(),
            uid: pod.metadata.uid.as_deref().unwrap_or_default(),
        }
    }

    /// Whether `reference` names this object by kind and name, whatever its uid (upstream `matchesRef`).
    fn matches(&self, reference: &OwnerReference) -> bool {
        reference.api_version == self.api_version
            && reference.kind == self.kind
            && reference.name == self.name
    }

    fn controller_ref(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.to_owned(),
            kind: self.kind.to_owned(),
            name: self.name.to_owned(),
            uid: self.uid.to_owned(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

fn has_ref(claim: &PersistentVolumeClaim, owner: &Owner<'_>) -> bool {
    claim.owner_references().iter().any(|r| r.uid == owner.uid)
}

/// Whether the claim names `owner` by kind and name but with another uid: a reference left by an
/// earlier object of the same name (upstream `hasStaleOwnerRef`). A pod not created yet has no uid,
/// so any reference to its name is stale: its claim belongs to a pod that was scaled away and is
/// about to be garbage collected, and must not be reused.
pub fn has_stale_ref(claim: &PersistentVolumeClaim, owner: &Owner<'_>) -> bool {
    claim
        .owner_references()
        .iter()
        .find(|r| owner.matches(r))
        .is_some_and(|r| r.uid != owner.uid)
}

/// Whether a controller other than the set and pod holds the claim, under a policy that deletes
/// (upstream `hasUnexpectedController`).
fn has_unexpected_controller(
    claim: &PersistentVolumeClaim,
    policy: Retention,
    set: &Owner<'_>,
    pod: &Owner<'_>,
) -> bool {
    if policy == Retention::default() {
        return false;
    }
    claim.owner_references().iter().any(|r| {
        if set.matches(r) {
            r.uid != set.uid
        } else if pod.matches(r) {
            r.uid != pod.uid
        } else {
            r.controller == Some(true)
        }
    })
}

/// Whether the claim's owner references agree with the policy for the pod, in range or scaled away
/// (upstream `isClaimOwnerUpToDate`). A claim with stale references, or held by another controller
/// and not by us, is left alone (reported up to date).
pub fn claim_owners_up_to_date(
    claim: &PersistentVolumeClaim,
    policy: Retention,
    set: &Owner<'_>,
    pod: &Owner<'_>,
    pod_in_range: bool,
) -> bool {
    if has_stale_ref(claim, set) || has_stale_ref(claim, pod) {
        return true;
    }
    if has_unexpected_controller(claim, policy, set, pod) {
        return !(has_ref(claim, set) || has_ref(claim, pod));
    }
    let non_controller = claim
        .owner_references()
        .iter()
        .any(|r| (r.uid == set.uid || r.uid == pod.uid) && r.controller != Some(true));
    if non_controller {
        return false;
    }
    let (want_set, want_pod) = wanted_owners(policy, pod_in_range);
    has_ref(claim, set) == want_set && has_ref(claim, pod) == want_pod
}

/// Which of (set, pod) the policy makes the claim's controller.
fn wanted_owners(policy: Retention, pod_in_range: bool) -> (bool, bool) {
    let scaled_down = !pod_in_range;
    match (policy.when_deleted, policy.when_scaled) {
        (false, false) => (false, false),
        (true, false) => (true, false),
        (false, true) => (false, scaled_down),
        (true, true) => (!scaled_down, scaled_down),
    }
}

/// The claim's owner references rewritten to agree with the policy (upstream
/// `updateClaimOwnerRefForSetAndPod`): references to the set and pod are dropped, then the wanted
/// ones added back as controller references; under another controller none are added.
pub fn updated_owner_refs(
    claim: &PersistentVolumeClaim,
    policy: Retention,
    set: &Owner<'_>,
    pod: &Owner<'_>,
    pod_in_range: bool,
) -> Vec<OwnerReference> {
    let unexpected = has_unexpected_controller(claim, policy, set, pod);
    let mut refs: Vec<OwnerReference> = claim
        .owner_references()
        .iter()
        .filter(|r| !set.matches(r) && !pod.matches(r))
        .cloned()
        .collect();
    if unexpected {
        return refs;
    }
    let (want_set, want_pod) = wanted_owners(policy, pod_in_range);
    for (wanted, owner) in [(want_set, set), (want_pod, pod)] {
        if wanted && !refs.iter().any(|r| r.uid == owner.uid) {
            refs.push(owner.controller_ref());
        }
    }
    refs
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy;
    use serde_json::json;

    use super::*;

    fn set(deleted: &str, scaled: &str) -> StatefulSet {
        let mut set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {},
                "volumeClaimTemplates": [
                    {"metadata": {"name": "data", "labels": {"tier": "db"}}, "spec": {}, "status": {"phase": "Pending"}},
                    {"metadata": {"name": "logs"}, "spec": {}}
                ]
            }
        }))
        .unwrap();
        set.spec
            .as_mut()
            .unwrap()
            .persistent_volume_claim_retention_policy =
            Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_deleted: Some(deleted.into()),
                when_scaled: Some(scaled.into()),
            });
        set
    }

    fn pod(uid: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web-2".into());
        pod.metadata.uid = Some(uid.into());
        pod
    }

    fn claim_with(refs: Vec<OwnerReference>) -> PersistentVolumeClaim {
        let mut claim = PersistentVolumeClaim::default();
        claim.metadata.owner_references = Some(refs);
        claim
    }

    #[test]
    fn claims_are_named_per_template_and_labelled_with_the_selector() {
        let claims = pod_claims(&set("Retain", "Retain"), 2);
        let names: Vec<_> = claims.iter().map(|c| c.name_any()).collect();
        assert_eq!(names, ["data-web-2", "logs-web-2"]);
        let labels = claims[0].metadata.labels.clone().unwrap();
        assert_eq!(
            (labels["tier"].as_str(), labels["app"].as_str()),
            ("db", "web")
        );
        assert_eq!(claims[1].metadata.labels.clone().unwrap().len(), 1);
        assert_eq!(claims[0].metadata.namespace.as_deref(), Some("ns"));
        assert!(claims[0].status.is_none());
    }

    #[test]
    fn an_unknown_retention_value_retains_everything() {
        assert_eq!(Retention::of(&set("Delete", "Bogus")), Retention::default());
        assert_eq!(
            Retention::of(&set("Delete", "Retain")),
            Retention {
                when_deleted: true,
                when_scaled: false
            }
        );
    }

    #[test]
    fn when_deleted_delete_makes_the_set_the_claims_controller() {
        let s = set("Delete", "Retain");
        let p = pod("pod-uid");
        let (so, po) = (Owner::set(&s), Owner::pod(&p));
        let policy = Retention::of(&s);
        let bare = claim_with(Vec::new());
        assert!(!claim_owners_up_to_date(&bare, policy, &so, &po, true));
        let refs = updated_owner_refs(&bare, policy, &so, &po, true);
        assert_eq!(refs.len(), 1);
        assert_eq!(
            (refs[0].kind.as_str(), refs[0].uid.as_str()),
            ("StatefulSet", "set-uid")
        );
        assert_eq!(refs[0].controller, Some(true));
        assert_eq!(refs[0].block_owner_deletion, Some(true));
        assert!(claim_owners_up_to_date(
            &claim_with(refs.clone()),
            policy,
            &so,
            &po,
            true
        ));
        assert!(
            claim_owners_up_to_date(&claim_with(refs), policy, &so, &po, false),
            "kept on scale-down"
        );
    }

    #[test]
    fn when_scaled_delete_hands_a_condemned_claim_to_its_pod() {
        let s = set("Delete", "Delete");
        let p = pod("pod-uid");
        let (so, po) = (Owner::set(&s), Owner::pod(&p));
        let policy = Retention::of(&s);
        let in_range = claim_with(updated_owner_refs(
            &claim_with(Vec::new()),
            policy,
            &so,
            &po,
            true,
        ));
        assert!(claim_owners_up_to_date(&in_range, policy, &so, &po, true));
        assert!(!claim_owners_up_to_date(&in_range, policy, &so, &po, false));
        let condemned = updated_owner_refs(&in_range, policy, &so, &po, false);
        assert_eq!(condemned.len(), 1);
        assert_eq!(
            (condemned[0].kind.as_str(), condemned[0].uid.as_str()),
            ("Pod", "pod-uid")
        );
    }

    #[test]
    fn retain_removes_our_references_but_leaves_others() {
        let s = set("Retain", "Retain");
        let p = pod("pod-uid");
        let (so, po) = (Owner::set(&s), Owner::pod(&p));
        let foreign = OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "x".into(),
            uid: "x".into(),
            ..OwnerReference::default()
        };
        let claim = claim_with(vec![so.controller_ref(), foreign.clone()]);
        let policy = Retention::of(&s);
        assert!(!claim_owners_up_to_date(&claim, policy, &so, &po, true));
        assert_eq!(
            updated_owner_refs(&claim, policy, &so, &po, true),
            vec![foreign]
        );
    }

    #[test]
    fn a_claim_of_an_earlier_pod_of_the_same_name_is_stale_and_left_alone() {
        let s = set("Retain", "Delete");
        let old = pod("old-uid");
        let claim = claim_with(vec![Owner::pod(&old).controller_ref()]);
        let unborn = pod("");
        assert!(has_stale_ref(&claim, &Owner::pod(&unborn)));
        assert!(!has_stale_ref(&claim, &Owner::pod(&old)));
        let policy = Retention::of(&s);
        assert!(claim_owners_up_to_date(
            &claim,
            policy,
            &Owner::set(&s),
            &Owner::pod(&unborn),
            true
        ));
    }

    #[test]
    fn another_controller_keeps_the_claim_and_only_our_references_go() {
        let s = set("Delete", "Retain");
        let p = pod("pod-uid");
        let (so, po) = (Owner::set(&s), Owner::pod(&p));
        let other = OwnerReference {
            api_version: "x/v1".into(),
            kind: "Other".into(),
            name: "o".into(),
            uid: "o".into(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        let policy = Retention::of(&s);
        let alone = claim_with(vec![other.clone()]);
        assert!(claim_owners_up_to_date(&alone, policy, &so, &po, true));
        let shared = claim_with(vec![other.clone(), so.controller_ref()]);
        assert!(!claim_owners_up_to_date(&shared, policy, &so, &po, true));
        assert_eq!(
            updated_owner_refs(&shared, policy, &so, &po, true),
            vec![other]
        );
    }
}
