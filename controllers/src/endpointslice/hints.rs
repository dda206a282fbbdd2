//! Topology hints (`endpoints[].hints.forZones`) on the slices a sync writes, as upstream's
//! `topologycache` (Service annotation `service.kubernetes.io/topology-mode: Auto`, or the older
//! `service.kubernetes.io/topology-aware-hints`) and `trafficdist` (`spec.trafficDistribution:
//! PreferClose`) set them.
//!
//! `Auto`: upstream's guards hold first — every ready Node outside the control plane has a zone and
//! allocatable CPU, there are at least two zones, at least as many ready endpoints as zones, and each
//! zone's minimum share (its CPU ratio of the endpoints, less the 20% overload threshold) fits — and
//! then each ready endpoint is hinted to its own zone. Upstream then moves hints from zones above
//! their maximum share to zones below their minimum; that redistribution is not done here, so a zone
//! whose endpoints are few for its CPU keeps same-zone hints (the guards still refuse the cases where
//! no allocation is possible). `PreferClose`: every endpoint with a zone is hinted to it. Otherwise
//! the hints are removed from the slices being written.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Service};
use flotilla_sdk::k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointHints, EndpointSlice, ForZone,
};

use super::endpoint::ZONE_LABEL;
use super::plan::Plan;

/// The annotation that turns on `Auto` hints.
pub const TOPOLOGY_MODE: &str = "service.kubernetes.io/topology-mode";
/// Its deprecated predecessor, which wins when both are set.
pub const TOPOLOGY_AWARE_HINTS: &str = "service.kubernetes.io/topology-aware-hints";
/// Upstream's overload threshold: a zone may get 20% fewer endpoints than its CPU share.
const OVERLOAD_THRESHOLD: f64 = 0.2;

/// How a Service's endpoints are hinted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Proportional to CPU per zone (the topology-mode annotation).
    Auto,
    /// Same zone (`trafficDistribution: PreferClose`).
    PreferClose,
    /// No hints.
    Off,
}

/// The mode `service` asks for (upstream `hintsEnabled`, then `trafficDistribution`).
pub fn mode(service: &Service) -> Mode {
    let annotations = service.metadata.annotations.as_ref();
    let value = annotations
        .and_then(|a| a.get(TOPOLOGY_AWARE_HINTS).or_else(|| a.get(TOPOLOGY_MODE)))
        .map(String::as_str);
    if matches!(value, Some("Auto" | "auto")) {
        return Mode::Auto;
    }
    let distribution = service
        .spec
        .as_ref()
        .and_then(|s| s.traffic_distribution.as_deref());
    if distribution == Some("PreferClose") {
        Mode::PreferClose
    } else {
        Mode::Off
    }
}

/// CPU per zone of the Nodes that count (ready, not control plane); `None` when a Node that counts
/// lacks a zone or CPU, or fewer than two zones have any (upstream `SetNodes`).
pub fn cpu_by_zone(nodes: &[Node]) -> Option<BTreeMap<String, u64>> {
    let mut zones: BTreeMap<String, u64> = BTreeMap::new();
    for node in nodes {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if labels.contains_key("node-role.kubernetes.io/control-plane")
            || labels.contains_key("node-role.kubernetes.io/master")
            || !node_ready(node)
        {
            continue;
        }
        let cpu = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("cpu"))
            .and_then(|q| millis(&q.0))
            .filter(|m| *m > 0)?;
        let zone = labels.get(ZONE_LABEL).filter(|z| !z.is_empty())?;
        *zones.entry(zone.clone()).or_default() += cpu;
    }
    (zones.len() >= 2).then_some(zones)
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A CPU quantity in millicores (`2`, `1.5`, `500m`); `None` for what is not one of those.
fn millis(quantity: &str) -> Option<u64> {
    if let Some(m) = quantity.strip_suffix('m') {
        return m.parse().ok();
    }
    let cores: f64 = quantity.parse().ok()?;
    (cores.is_finite() && cores >= 0.0).then(|| (cores * 1000.0).round() as u64)
}

/// Whether `ready` endpoints can be shared out over `zones` within the overload threshold (upstream
/// `getAllocations`).
fn allocatable(zones: &BTreeMap<String, u64>, ready: usize) -> bool {
    if zones.len() > ready {
        return false;
    }
    let total: u64 = zones.values().sum();
    if total == 0 {
        return false;
    }
    let mut left = ready as i64;
    for cpu in zones.values() {
        let desired = (*cpu as f64 / total as f64) * ready as f64;
        left -= (desired * (1.0 / (1.0 + OVERLOAD_THRESHOLD))).ceil() as i64;
        if left < 0 {
            return false;
        }
    }
    true
}

fn is_ready(endpoint: &Endpoint) -> bool {
    endpoint
        .conditions
        .as_ref()
        .and_then(|c| c.ready)
        .unwrap_or(true)
}

fn same_zone(endpoint: &Endpoint) -> Option<EndpointHints> {
    endpoint.zone.as_ref().map(|zone| EndpointHints {
        for_zones: Some(vec![ForZone { name: zone.clone() }]),
        for_nodes: None,
    })
}

/// Sets the hints of the slices `plan` writes, for `mode`; `unchanged` are the family's slices the
/// plan leaves alone, which move into the plan when their hints must change. `zones` is
/// [`cpu_by_zone`] of the cluster's Nodes (only read for [`Mode::Auto`]). Returns whether `Auto`
/// hints were refused (upstream then removes them, as here).
pub fn apply(
    mode: Mode,
    plan: &mut Plan,
    unchanged: &[EndpointSlice],
    zones: Option<&BTreeMap<String, u64>>,
) -> bool {
    let hint: fn(&Endpoint) -> Option<EndpointHints> = match mode {
        Mode::Off => {
            clear(plan);
            return false;
        }
        Mode::PreferClose => same_zone,
        Mode::Auto => {
            let all = || {
                plan.create
                    .iter()
                    .chain(&plan.update)
                    .chain(unchanged)
                    .flat_map(|s| &s.endpoints)
                    .filter(|e| is_ready(e))
            };
            let ready = all().count();
            let zoned = all().all(|e| e.zone.as_ref().is_some_and(|z| !z.is_empty()));
            let ok = zoned && ready > 0 && zones.is_some_and(|z| allocatable(z, ready));
            if !ok {
                clear(plan);
                return true;
            }
            |e| if is_ready(e) { same_zone(e) } else { None }
        }
    };
    for slice in plan.create.iter_mut().chain(plan.update.iter_mut()) {
        for endpoint in &mut slice.endpoints {
            endpoint.hints = hint(endpoint);
        }
    }
    let written: BTreeSet<Option<String>> = plan
        .update
        .iter()
        .chain(&plan.delete)
        .map(|s| s.metadata.name.clone())
        .collect();
    for slice in unchanged {
        if written.contains(&slice.metadata.name) {
            continue;
        }
        if slice.endpoints.iter().any(|e| e.hints != hint(e)) {
            let mut slice = slice.clone();
            for endpoint in &mut slice.endpoints {
                endpoint.hints = hint(endpoint);
            }
            plan.update.push(slice);
        }
    }
    false
}

fn clear(plan: &mut Plan) {
    for slice in plan.create.iter_mut().chain(plan.update.iter_mut()) {
        for endpoint in &mut slice.endpoints {
            endpoint.hints = None;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(zone: &str, cpu: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": format!("n-{zone}"), "labels": {ZONE_LABEL: zone}},
            "status": {"allocatable": {"cpu": cpu}, "conditions": [{"type": "Ready", "status": "True"}]}}))
        .unwrap()
    }

    fn slice(zones: &[&str]) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "s"}, "addressType": "IPv4",
            "endpoints": zones.iter().enumerate().map(|(i, z)| json!({
                "addresses": [format!("10.0.0.{i}")], "zone": z, "conditions": {"ready": true}})).collect::<Vec<_>>()}))
        .unwrap()
    }

    #[test]
    fn auto_hints_each_ready_endpoint_to_its_zone_when_the_guards_hold() {
        let zones = cpu_by_zone(&[node("a", "4"), node("b", "4000m")]).unwrap();
        let mut plan = Plan {
            create: vec![slice(&["a", "b", "a", "b"])],
            ..Plan::default()
        };
        assert!(!apply(Mode::Auto, &mut plan, &[], Some(&zones)));
        let hinted: Vec<String> = plan.create[0]
            .endpoints
            .iter()
            .map(|e| e.hints.clone().unwrap().for_zones.unwrap()[0].name.clone())
            .collect();
        assert_eq!(hinted, ["a", "b", "a", "b"]);
    }

    #[test]
    fn auto_is_refused_with_one_zone_or_fewer_endpoints_than_zones() {
        assert!(cpu_by_zone(&[node("a", "4")]).is_none());
        let zones = cpu_by_zone(&[node("a", "4"), node("b", "4")]).unwrap();
        let mut plan = Plan {
            create: vec![slice(&["a"])],
            ..Plan::default()
        };
        assert!(apply(Mode::Auto, &mut plan, &[], Some(&zones)));
        assert!(plan.create[0].endpoints[0].hints.is_none());
    }

    #[test]
    fn prefer_close_rewrites_an_unchanged_slice_without_hints() {
        let mut plan = Plan::default();
        apply(Mode::PreferClose, &mut plan, &[slice(&["a"])], None);
        assert_eq!(plan.update.len(), 1);
        let mut again = Plan::default();
        apply(Mode::PreferClose, &mut again, &plan.update, None);
        assert_eq!(again.writes(), 0);
    }

    #[test]
    fn the_deprecated_annotation_wins_and_quantities_parse() {
        let svc: Service = serde_json::from_value(json!({"metadata": {"annotations": {
            TOPOLOGY_MODE: "Auto", TOPOLOGY_AWARE_HINTS: "disabled"}}}))
        .unwrap();
        assert_eq!(mode(&svc), Mode::Off);
        assert_eq!(millis("1.5"), Some(1500));
        assert_eq!(millis("250m"), Some(250));
        assert_eq!(millis("x"), None);
    }
}
