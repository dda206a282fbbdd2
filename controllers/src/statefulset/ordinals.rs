//! A StatefulSet's stable identities (upstream `stateful_set_utils.go`): a pod is `<set>-<ordinal>`,
//! its claims `<template>-<set>-<ordinal>`, and the set owns the ordinals
//! `[spec.ordinals.start, start + replicas)`.

use flotilla_sdk::k8s_openapi::api::apps::v1::StatefulSet;

/// The ordinals a StatefulSet keeps pods at: `start..=end`, empty when `replicas` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrdinalRange {
    /// `spec.ordinals.start` (0 when unset).
    pub start: i32,
    /// `spec.replicas` (1 when unset, as the API server defaults it; never negative).
    pub replicas: i32,
}

impl OrdinalRange {
    /// The range of `set`.
    pub fn of(set: &StatefulSet) -> Self {
        let spec = set.spec.as_ref();
        let start = spec
            .and_then(|s| s.ordinals.as_ref())
            .and_then(|o| o.start)
            .unwrap_or(0)
            .max(0);
        let replicas = spec.and_then(|s| s.replicas).unwrap_or(1).max(0);
        Self { start, replicas }
    }

    /// Whether `ordinal` is one the set keeps a pod at (upstream `podInOrdinalRange`).
    pub fn contains(&self, ordinal: i32) -> bool {
        ordinal >= self.start
            && i64::from(ordinal) < i64::from(self.start) + i64::from(self.replicas)
    }

    /// The slot of `ordinal` in `0..replicas`, when [`Self::contains`] it.
    pub fn slot(&self, ordinal: i32) -> Option<usize> {
        self.contains(ordinal)
            .then(|| usize::try_from(ordinal - self.start).ok())
            .flatten()
    }

    /// The ordinal of slot `slot`.
    pub fn ordinal(&self, slot: usize) -> i32 {
        self.start
            .saturating_add(i32::try_from(slot).unwrap_or(i32::MAX))
    }
}

/// The parent name and ordinal a pod's name encodes (`<parent>-<digits>`, upstream
/// `getParentNameAndOrdinal`); `None` when the name has no such suffix or the ordinal overflows an
/// `i32`.
pub fn parent_and_ordinal(pod_name: &str) -> Option<(&str, i32)> {
    let (parent, digits) = pod_name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((parent, digits.parse().ok()?))
}

/// The ordinal of a pod of the set named `set_name`: `None` when the pod's name is not
/// `<set_name>-<ordinal>` (upstream's `isMemberOf` and `getOrdinal`).
pub fn member_ordinal(set_name: &str, pod_name: &str) -> Option<i32> {
    parent_and_ordinal(pod_name)
        .filter(|(parent, _)| *parent == set_name)
        .map(|(_, ordinal)| ordinal)
}

/// The name of the set's pod at `ordinal` (upstream `getPodName`).
pub fn pod_name(set_name: &str, ordinal: i32) -> String {
    format!("{set_name}-{ordinal}")
}

/// The name of the claim from template `template` of the set's pod at `ordinal` (upstream
/// `getPersistentVolumeClaimName`).
pub fn claim_name(template: &str, set_name: &str, ordinal: i32) -> String {
    format!("{template}-{set_name}-{ordinal}")
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::apps::v1::{StatefulSetOrdinals, StatefulSetSpec};

    use super::*;

    #[test]
    fn a_pod_name_splits_at_its_last_dash_into_parent_and_ordinal() {
        assert_eq!(parent_and_ordinal("web-0"), Some(("web", 0)));
        assert_eq!(parent_and_ordinal("my-web-12"), Some(("my-web", 12)));
        assert_eq!(parent_and_ordinal("web"), None);
        assert_eq!(parent_and_ordinal("web-"), None);
        assert_eq!(parent_and_ordinal("web-1a"), None);
        assert_eq!(
            parent_and_ordinal("web-99999999999"),
            None,
            "overflows an i32"
        );
    }

    #[test]
    fn only_pods_named_after_the_set_are_members() {
        assert_eq!(member_ordinal("web", "web-3"), Some(3));
        assert_eq!(member_ordinal("web", "my-web-3"), None);
        assert_eq!(member_ordinal("my", "my-web-3"), None);
    }

    #[test]
    fn pods_and_claims_are_named_by_ordinal() {
        assert_eq!(pod_name("web", 2), "web-2");
        assert_eq!(claim_name("data", "web", 2), "data-web-2");
    }

    #[test]
    fn the_range_starts_at_spec_ordinals_start_and_holds_replicas_ordinals() {
        let mut set = StatefulSet {
            spec: Some(StatefulSetSpec {
                replicas: Some(3),
                ordinals: Some(StatefulSetOrdinals { start: Some(5) }),
                ..StatefulSetSpec::default()
            }),
            ..StatefulSet::default()
        };
        let range = OrdinalRange::of(&set);
        assert_eq!(
            range,
            OrdinalRange {
                start: 5,
                replicas: 3
            }
        );
        assert!(!range.contains(4) && range.contains(5) && range.contains(7) && !range.contains(8));
        assert_eq!(range.slot(6), Some(1));
        assert_eq!(range.slot(8), None);
        assert_eq!(range.ordinal(2), 7);
        set.spec.as_mut().unwrap().ordinals = None;
        set.spec.as_mut().unwrap().replicas = Some(0);
        let empty = OrdinalRange::of(&set);
        assert!(!empty.contains(0));
    }
}
