//! A pod as an endpoint of a Service, as upstream's `podToEndpoint`, `getEndpointPorts`, `FindPort`
//! and `ShouldPodBeInEndpoints` make it, and the identity that matches a desired endpoint to one
//! already in a slice (upstream's endpoint hash: addresses, hostname and the pod's namespace/name),
//! so a change of readiness or zone updates an endpoint in place instead of moving it.

use std::net::IpAddr;

use flotilla_sdk::k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service, ServicePort};
use flotilla_sdk::k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::pod_ready::is_ready;

/// The zone label of a Node (`topology.kubernetes.io/zone`), copied to its pods' endpoints.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// An address family of a Service: one set of slices each (`addressType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressType {
    /// `IPv4`.
    V4,
    /// `IPv6`.
    V6,
}

impl AddressType {
    /// The `addressType` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }

    /// The address type named `value`; `None` for the deprecated `FQDN` and anything else.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "IPv4" => Some(Self::V4),
            "IPv6" => Some(Self::V6),
            _ => None,
        }
    }

    fn holds(self, ip: &IpAddr) -> bool {
        matches!(
            (self, ip),
            (Self::V4, IpAddr::V4(_)) | (Self::V6, IpAddr::V6(_))
        )
    }
}

/// The address types a Service's slices carry (upstream `getAddressTypesForService`): its
/// `ipFamilies`; without them (an object written by an old API server) its cluster IP's family, or
/// both for a headless Service, so that no traffic is cut before the API server defaults them.
pub fn address_types(service: &Service) -> Vec<AddressType> {
    let spec = service.spec.as_ref();
    let mut types: Vec<AddressType> = spec
        .and_then(|s| s.ip_families.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|family| match family.as_str() {
            "IPv4" => Some(AddressType::V4),
            "IPv6" => Some(AddressType::V6),
            _ => None,
        })
        .collect();
    types.sort();
    types.dedup();
    if !types.is_empty() {
        return types;
    }
    match spec.and_then(|s| s.cluster_ip.as_deref()) {
        Some(ip) if !ip.is_empty() && ip != "None" => {
            let v6 = ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6());
            vec![if v6 { AddressType::V6 } else { AddressType::V4 }]
        }
        _ => vec![AddressType::V4, AddressType::V6],
    }
}

/// Whether `pod` belongs in the slices at all: not terminal (Succeeded or Failed) and given an IP.
/// Terminating pods stay (upstream includes them, marked `terminating`).
pub fn should_be_in_slices(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return false;
    }
    status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        || status.pod_ips.as_ref().is_some_and(|ips| !ips.is_empty())
}

/// The ports of `pod`'s endpoint, in the Service's order (upstream `getEndpointPorts`): each Service
/// port whose target the pod has; a named target port is looked up in the pod's containers (and
/// restartable init containers), so pods may resolve it differently and land in different slices.
/// A headless Service without ports has none.
pub fn ports(service: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let service_ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    service_ports
        .iter()
        .filter_map(|sp| {
            let port = find_port(pod, sp)?;
            Some(EndpointPort {
                name: Some(sp.name.clone().unwrap_or_default()),
                port: Some(port),
                protocol: Some(protocol(sp.protocol.as_deref()).to_owned()),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect()
}

fn protocol(value: Option<&str>) -> &str {
    value.filter(|p| !p.is_empty()).unwrap_or("TCP")
}

/// The container port `sp` targets on `pod` (upstream `FindPort`): a number as is; a name among the
/// containers' ports of the same protocol, then among restartable init containers' (sidecars).
fn find_port(pod: &Pod, sp: &ServicePort) -> Option<i32> {
    let target = sp.target_port.clone().unwrap_or(IntOrString::Int(sp.port));
    let name = match target {
        IntOrString::Int(port) => return Some(port),
        IntOrString::String(name) => name,
    };
    let wanted = protocol(sp.protocol.as_deref());
    let spec = pod.spec.as_ref()?;
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(&name) && protocol(p.protocol.as_deref()) == wanted)
        .map(|p| p.container_port)
}

/// `pod`'s addresses of family `family`, each re-formatted canonically (upstream re-stringifies
/// parsed IPs); unparseable ones are left out.
pub fn addresses(pod: &Pod, family: AddressType) -> Vec<String> {
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let listed: Vec<&str> = match status.pod_ips.as_deref() {
        Some(ips) if !ips.is_empty() => ips.iter().map(|ip| ip.ip.as_str()).collect(),
        _ => status.pod_ip.as_deref().into_iter().collect(),
    };
    listed
        .into_iter()
        .filter_map(|ip| ip.parse::<IpAddr>().ok())
        .filter(|ip| family.holds(ip))
        .map(|ip| ip.to_string())
        .collect()
}

/// The endpoint of `pod` (bound to `node`, when that Node is known) in `service`'s slices of
/// `family` (upstream `podToEndpoint`): `serving` is the pod's readiness, `terminating` its deletion,
/// `ready` serving and not terminating (always true with `publishNotReadyAddresses`); nodeName, the
/// node's zone, the pod as targetRef, and the pod's hostname when its subdomain is the Service's name.
pub fn endpoint(
    pod: &Pod,
    node: Option<&Node>,
    service: &Service,
    family: AddressType,
) -> Endpoint {
    let serving = is_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let publish = service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let ready = publish || (serving && !terminating);
    let spec = pod.spec.as_ref();
    let node_name = spec
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let zone = node
        .and_then(|n| n.metadata.labels.as_ref())
        .and_then(|l| l.get(ZONE_LABEL))
        .filter(|z| !z.is_empty())
        .cloned();
    let hostname = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .filter(|_| {
            spec.and_then(|s| s.subdomain.as_deref()) == service.metadata.name.as_deref()
                && pod.metadata.namespace == service.metadata.namespace
        });
    Endpoint {
        addresses: addresses(pod, family),
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".to_owned()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectReference::default()
        }),
        node_name,
        zone,
        hostname,
        ..Endpoint::default()
    }
}

/// What identifies an endpoint across syncs (upstream's endpoint hash): its sorted addresses, its
/// hostname and the namespace/name of its target. Everything else may change in place.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointKey {
    target: (String, String),
    hostname: String,
    addresses: Vec<String>,
}

impl EndpointKey {
    /// The key of `endpoint`.
    pub fn of(endpoint: &Endpoint) -> Self {
        let mut addresses = endpoint.addresses.clone();
        addresses.sort();
        let target = endpoint
            .target_ref
            .as_ref()
            .map(|t| {
                (
                    t.namespace.clone().unwrap_or_default(),
                    t.name.clone().unwrap_or_default(),
                )
            })
            .unwrap_or_default();
        Self {
            target,
            hostname: endpoint.hostname.clone().unwrap_or_default(),
            addresses,
        }
    }
}

/// Whether two endpoints of the same key are equal in what an update would change (upstream
/// `EndpointsEqualBeyondHash`): nodeName, zone, the three conditions and the targetRef (its
/// resourceVersion aside). Hints are not compared: they are the topology step's to set.
pub fn equal_beyond_key(a: &Endpoint, b: &Endpoint) -> bool {
    let conditions = |e: &Endpoint| {
        let c = e.conditions.clone().unwrap_or_default();
        (c.ready, c.serving, c.terminating)
    };
    let target = |e: &Endpoint| {
        e.target_ref.clone().map(|mut t| {
            t.resource_version = None;
            t
        })
    };
    a.node_name == b.node_name
        && a.zone == b.zone
        && conditions(a) == conditions(b)
        && target(a) == target(b)
}

/// What groups endpoints into slices: their ports, in a canonical order (upstream's `PortMapKey`), so
/// that pods resolving a named port differently go to different slices.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortKey(Vec<(String, i32, String, Option<String>)>);

impl PortKey {
    /// The key of `ports` (none and empty are the same key).
    pub fn of(ports: &[EndpointPort]) -> Self {
        let mut key: Vec<_> = ports
            .iter()
            .map(|p| {
                (
                    p.name.clone().unwrap_or_default(),
                    p.port.unwrap_or_default(),
                    p.protocol.clone().unwrap_or_default(),
                    p.app_protocol.clone(),
                )
            })
            .collect();
        key.sort();
        Self(key)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn service(value: serde_json::Value) -> Service {
        serde_json::from_value(value).unwrap()
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_named_target_port_resolves_per_pod_and_a_missing_one_is_left_out() {
        let svc = service(
            json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": {"ports": [
            {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
            {"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"},
            {"name": "dns", "port": 53, "targetPort": "dns", "protocol": "UDP"}]}}),
        );
        let a = pod(json!({"spec": {"containers": [{"name": "c", "ports": [
            {"name": "http", "containerPort": 8080}, {"name": "dns", "containerPort": 53}]}]}}));
        let b = pod(json!({"spec": {"containers": [{"name": "c", "ports": [
            {"name": "http", "containerPort": 8081}]}]}}));
        let ports_of = |p: &Pod| -> Vec<(String, i32)> {
            ports(&svc, p)
                .into_iter()
                .map(|p| (p.name.unwrap(), p.port.unwrap()))
                .collect()
        };
        // The dns container port is TCP (defaulted), the Service's UDP: no match.
        assert_eq!(
            ports_of(&a),
            [("http".into(), 8080), ("metrics".into(), 9090)]
        );
        assert_eq!(
            ports_of(&b),
            [("http".into(), 8081), ("metrics".into(), 9090)]
        );
        assert_ne!(PortKey::of(&ports(&svc, &a)), PortKey::of(&ports(&svc, &b)));
    }

    #[test]
    fn a_terminating_ready_pod_is_serving_and_terminating_but_not_ready() {
        let svc = service(json!({"metadata": {"name": "web", "namespace": "ns"}}));
        let p = pod(json!({
            "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1",
                         "deletionTimestamp": "2026-11-26T10:07:30Z"},
            "spec": {"nodeName": "node-a", "containers": []},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
                       "conditions": [{"type": "Ready", "status": "True"}]}}));
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": "node-a", "labels": {ZONE_LABEL: "zone-a"}}}),
        )
        .unwrap();
        let e = endpoint(&p, Some(&node), &svc, AddressType::V4);
        assert_eq!(e.addresses, ["10.0.0.1"]);
        let c = e.conditions.unwrap();
        assert_eq!(
            (c.ready, c.serving, c.terminating),
            (Some(false), Some(true), Some(true))
        );
        assert_eq!(e.zone.as_deref(), Some("zone-a"));
        assert_eq!(e.node_name.as_deref(), Some("node-a"));
        assert_eq!(
            endpoint(&p, None, &svc, AddressType::V6).addresses,
            ["fd00::1"]
        );
        assert!(should_be_in_slices(&p));
    }

    #[test]
    fn terminal_pods_and_pods_without_an_ip_are_not_endpoints() {
        let done = pod(json!({"status": {"phase": "Succeeded", "podIP": "10.0.0.1"}}));
        let pending = pod(json!({"status": {"phase": "Pending"}}));
        assert!(!should_be_in_slices(&done));
        assert!(!should_be_in_slices(&pending));
    }

    #[test]
    fn families_come_from_ip_families_then_the_cluster_ip_then_both_for_headless() {
        let of = |spec: serde_json::Value| address_types(&service(json!({"spec": spec})));
        assert_eq!(
            of(json!({"ipFamilies": ["IPv6", "IPv4"]})),
            [AddressType::V4, AddressType::V6]
        );
        assert_eq!(of(json!({"clusterIP": "fd00::10"})), [AddressType::V6]);
        assert_eq!(of(json!({"clusterIP": "10.0.0.10"})), [AddressType::V4]);
        assert_eq!(
            of(json!({"clusterIP": "None"})),
            [AddressType::V4, AddressType::V6]
        );
    }

    #[test]
    fn the_hostname_is_set_only_when_the_subdomain_names_the_service() {
        let svc = service(json!({"metadata": {"name": "db", "namespace": "ns"}}));
        let p = |sub: &str| {
            pod(json!({"metadata": {"name": "db-0", "namespace": "ns"},
                "spec": {"hostname": "db-0", "subdomain": sub, "containers": []},
                "status": {"podIP": "10.0.0.2"}}))
        };
        let hostname = |p: &Pod| endpoint(p, None, &svc, AddressType::V4).hostname;
        assert_eq!(hostname(&p("db")).as_deref(), Some("db-0"));
        assert_eq!(hostname(&p("other")), None);
    }
}
