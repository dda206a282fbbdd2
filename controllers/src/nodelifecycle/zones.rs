//! Zones and their states (upstream `ComputeZoneState` and `handleDisruption`): a node's zone is its
//! region and zone labels (upstream `GetZoneKey`); a zone with no ready node is fully disrupted, one
//! with more than two not-ready nodes making at least `--unhealthy-zone-threshold` of it partially
//! disrupted, otherwise normal. A [`ZoneView`] summarises every node of the cluster for those
//! decisions: counts per zone, the newest NoExecute taint per zone (the fleet's rate limiter reads
//! its state from the cluster, see [`super::limiter`]), and the nodes carrying one.

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::core::v1::Node;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

use super::status::ready_status;
use super::taints::{newest_no_execute, taints};

/// A node with this label counts in no zone (upstream `labelNodeDisruptionExclusion`).
pub const EXCLUDE_DISRUPTION: &str = "node.kubernetes.io/exclude-disruption";

/// The state of one zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    /// Few nodes, or none, are not ready.
    Normal,
    /// More than two nodes and at least the threshold's share are not ready.
    PartialDisruption,
    /// No node is ready.
    FullDisruption,
}

/// Upstream `GetZoneKey`: region and zone, each from the beta label if set, else the GA one; empty
/// when neither is set.
pub fn zone_key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let label = |beta: &str, ga: &str| {
        labels
            .and_then(|l| l.get(beta).or_else(|| l.get(ga)))
            .cloned()
            .unwrap_or_default()
    };
    let zone = label(
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    );
    let region = label(
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    );
    if zone.is_empty() && region.is_empty() {
        String::new()
    } else {
        format!("{region}:\u{0}:{zone}")
    }
}

/// Upstream `ComputeZoneState` over a zone's counts.
pub fn zone_state(ready: usize, not_ready: usize, unhealthy_threshold: f32) -> ZoneState {
    #[allow(clippy::cast_precision_loss)] // node counts are far below 2^24
    let share = not_ready as f32 / (ready + not_ready).max(1) as f32;
    if ready == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && share >= unhealthy_threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// What one node contributes.
#[derive(Debug, Clone)]
struct Entry {
    zone: String,
    /// Not excluded from disruption checks.
    counted: bool,
    ready: bool,
    newest_taint: Option<Timestamp>,
    /// The node itself when it carries a lifecycle NoExecute taint (master disruption mode removes
    /// them).
    tainted: Option<Node>,
}

/// Every node of the cluster as zone decisions need it, keyed by node name.
#[derive(Debug, Clone, Default)]
pub struct ZoneView {
    entries: BTreeMap<String, Entry>,
}

/// One zone's counts and newest NoExecute taint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZoneHealth {
    /// Counted nodes whose Ready condition is True.
    pub ready: usize,
    /// Counted nodes whose Ready condition is not True (or missing).
    pub not_ready: usize,
    /// The newest `timeAdded` of a lifecycle NoExecute taint on any node of the zone.
    pub newest_taint: Option<Timestamp>,
}

impl ZoneHealth {
    /// How many nodes the zone counts.
    pub fn size(&self) -> usize {
        self.ready + self.not_ready
    }
}

impl ZoneView {
    /// The view of `nodes`.
    pub fn of<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Self {
        let mut view = Self::default();
        for node in nodes {
            view.update(node);
        }
        view
    }

    /// Replaces what the view holds of `node` by the node as given (a fresher copy than the cache's).
    pub fn update(&mut self, node: &Node) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        let excluded = node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(EXCLUDE_DISRUPTION));
        let newest_taint = newest_no_execute(node);
        let tainted = taints(node)
            .iter()
            .any(super::taints::is_lifecycle_no_execute)
            .then(|| node.clone());
        self.entries.insert(
            name,
            Entry {
                zone: zone_key(node),
                counted: !excluded,
                ready: ready_status(node) == Some("True"),
                newest_taint,
                tainted,
            },
        );
    }

    /// Every zone with a counted node.
    pub fn zones(&self) -> BTreeMap<&str, ZoneHealth> {
        let mut zones: BTreeMap<&str, ZoneHealth> = BTreeMap::new();
        for e in self.entries.values() {
            let zone = zones.entry(e.zone.as_str()).or_default();
            if e.counted {
                if e.ready {
                    zone.ready += 1;
                } else {
                    zone.not_ready += 1;
                }
            }
            zone.newest_taint = zone.newest_taint.max(e.newest_taint);
        }
        zones.retain(|_, z| z.size() > 0 || z.newest_taint.is_some());
        zones
    }

    /// One zone's health (empty when the view has none of it).
    pub fn zone(&self, zone: &str) -> ZoneHealth {
        self.zones().get(zone).copied().unwrap_or_default()
    }

    /// Upstream's "master disruption mode": there is a zone, and every zone with a counted node is
    /// fully disrupted — the control plane, not the nodes, is likely cut off.
    pub fn all_fully_disrupted(&self, unhealthy_threshold: f32) -> bool {
        let zones = self.zones();
        let counted: Vec<&ZoneHealth> = zones.values().filter(|z| z.size() > 0).collect();
        !counted.is_empty()
            && counted.iter().all(|z| {
                zone_state(z.ready, z.not_ready, unhealthy_threshold) == ZoneState::FullDisruption
            })
    }

    /// The nodes carrying a lifecycle NoExecute taint.
    pub fn tainted(&self) -> impl Iterator<Item = &Node> {
        self.entries.values().filter_map(|e| e.tainted.as_ref())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn node(name: &str, zone: &str, ready: &str, tainted_at: Option<&str>) -> Node {
        let taints = tainted_at.map_or(json!([]), |at| {
            json!([{"key": super::super::taints::UNREACHABLE, "effect": "NoExecute", "timeAdded": at}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }))
        .unwrap()
    }

    #[test]
    fn the_zone_key_is_region_and_zone_beta_labels_first() {
        let mut n = node("a", "z1", "True", None);
        assert_eq!(zone_key(&n), ":\u{0}:z1");
        n.metadata.labels.as_mut().unwrap().insert(
            "failure-domain.beta.kubernetes.io/zone".into(),
            "old".into(),
        );
        n.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("topology.kubernetes.io/region".into(), "r".into());
        assert_eq!(zone_key(&n), "r:\u{0}:old");
        n.metadata.labels = None;
        assert_eq!(zone_key(&n), "");
    }

    #[test]
    fn zone_states_are_upstreams() {
        assert_eq!(zone_state(3, 0, 0.55), ZoneState::Normal);
        assert_eq!(zone_state(0, 1, 0.55), ZoneState::FullDisruption);
        assert_eq!(
            zone_state(1, 2, 0.55),
            ZoneState::Normal,
            "two are not enough"
        );
        assert_eq!(zone_state(1, 3, 0.55), ZoneState::PartialDisruption);
        assert_eq!(
            zone_state(3, 3, 0.55),
            ZoneState::Normal,
            "half is below 0.55"
        );
        assert_eq!(zone_state(0, 0, 0.55), ZoneState::Normal);
    }

    #[test]
    fn the_view_counts_zones_finds_the_newest_taint_and_master_disruption() {
        let a0 = node("a0", "a", "Unknown", Some("2026-01-01T00:00:10Z"));
        let a1 = node("a1", "a", "Unknown", Some("2026-01-01T00:00:20Z"));
        let b0 = node("b0", "b", "True", None);
        let mut excluded = node("x", "b", "False", None);
        excluded
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(EXCLUDE_DISRUPTION.into(), String::new());
        let mut view = ZoneView::of([&a0, &a1, &b0, &excluded]);
        let a = view.zone(":\u{0}:a");
        assert_eq!((a.ready, a.not_ready), (0, 2));
        assert_eq!(
            a.newest_taint,
            Some("2026-01-01T00:00:20Z".parse().unwrap())
        );
        assert_eq!(
            view.zone(":\u{0}:b").size(),
            1,
            "the excluded node counts nowhere"
        );
        assert!(!view.all_fully_disrupted(0.55));
        assert_eq!(view.tainted().count(), 2);
        view.update(&node("b0", "b", "Unknown", None));
        assert!(view.all_fully_disrupted(0.55));
    }

    proptest! {
        #[test]
        fn a_zone_state_is_full_exactly_when_none_is_ready_and_partial_only_past_the_threshold(
            ready in 0usize..200, not_ready in 0usize..200, threshold in 0.0f32..1.0,
        ) {
            let state = zone_state(ready, not_ready, threshold);
            prop_assert_eq!(state == ZoneState::FullDisruption, ready == 0 && not_ready > 0);
            if state == ZoneState::PartialDisruption {
                prop_assert!(not_ready > 2);
                prop_assert!(not_ready as f32 / (ready + not_ready) as f32 >= threshold);
            }
            // More not-ready nodes never make a zone healthier.
            let worse = zone_state(ready, not_ready + 1, threshold);
            prop_assert!(rank(worse) >= rank(state) || ready == 0);
        }
    }

    fn rank(s: ZoneState) -> u8 {
        match s {
            ZoneState::Normal => 0,
            ZoneState::PartialDisruption => 1,
            ZoneState::FullDisruption => 2,
        }
    }
}
