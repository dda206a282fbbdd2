//! Validation of discovery.k8s.io/v1 EndpointSlices (`pkg/apis/discovery/validation`) and core/v1
//! Endpoints (`ValidateEndpoints` of `pkg/apis/core/validation`) as kube-apiserver v1.32 does it,
//! with upstream's field paths and messages (422 causes). Metadata is checked by the registry, as for
//! every kind. Also the one default of Endpoints that validation depends on ([`endpoints_defaults`]:
//! a port's protocol), so that an Endpoints written without protocols is stored as kube-apiserver
//! stores it instead of being refused.

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde_json::{Value, json};

use super::registry::NameRule;
use super::status::Cause;
use super::validation::{label_value_errors, name_errors, qualified_name_errors, subdomain_errors};

const MAX_ADDRESSES: usize = 100;
const MAX_PORTS: usize = 20_000;
const MAX_ENDPOINTS: usize = 1000;
const MAX_TOPOLOGY_LABELS: usize = 16;
const MAX_ZONE_HINTS: usize = 8;
const ADDRESS_TYPES: &[&str] = &["FQDN", "IPv4", "IPv6"];
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Upstream's `field.TooMany`.
fn too_many(field: &str, actual: usize, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooMany",
        message: format!("Too many: {actual}: must have at most {max} items"),
        field: field.to_string(),
    }
}

/// Upstream's `field.Duplicate`.
fn duplicate(field: &str, value: &Value) -> Cause {
    Cause {
        reason: "FieldValueDuplicate",
        message: format!("Duplicate value: {value}"),
        field: field.to_string(),
    }
}

/// Upstream's `ValidateDNS1123Label` of `value` at `field`.
fn dns_label(field: &str, value: &str) -> Vec<Cause> {
    name_errors(NameRule::Label1123, value)
        .iter()
        .map(|m| Cause::invalid(field, &json!(value), m))
        .collect()
}

/// Upstream's `ValidateQualifiedName` of `value` at `field`.
fn qualified_name(field: &str, value: &str) -> Vec<Cause> {
    qualified_name_errors(value)
        .iter()
        .map(|m| Cause::invalid(field, &json!(value), m))
        .collect()
}

/// Upstream's `ValidateNodeName` (a DNS subdomain) of `value` at `field`.
fn node_name(field: &str, value: &str) -> Vec<Cause> {
    subdomain_errors(value)
        .iter()
        .map(|m| Cause::invalid(field, &json!(value), m))
        .collect()
}

/// Upstream's `ValidateEndpointIP`: not unspecified, loopback, link-local or link-local multicast.
fn endpoint_ip(field: &str, value: &str) -> Vec<Cause> {
    let Ok(ip) = value.parse::<IpAddr>() else {
        return vec![Cause::invalid(
            field,
            &json!(value),
            "must be a valid IP address",
        )];
    };
    let mut causes = Vec::new();
    let mut invalid = |detail: &str| causes.push(Cause::invalid(field, &json!(value), detail));
    if ip.is_unspecified() {
        invalid(&format!("may not be unspecified ({value})"));
    }
    if ip.is_loopback() {
        invalid("may not be in the loopback range (127.0.0.0/8, ::1/128)");
    }
    let (link_local, link_local_multicast) = match ip {
        IpAddr::V4(v4) => (v4.is_link_local(), v4.octets()[..3] == [224, 0, 0]),
        IpAddr::V6(v6) => (
            v6.segments()[0] & 0xffc0 == 0xfe80,
            v6.segments()[0] & 0xff0f == 0xff02,
        ),
    };
    if link_local {
        invalid("may not be in the link-local range (169.254.0.0/16, fe80::/10)");
    }
    if link_local_multicast {
        invalid("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)");
    }
    causes
}

/// Upstream's `IsFullyQualifiedDomainName`.
fn fqdn(field: &str, value: &str) -> Vec<Cause> {
    let name = value.strip_suffix('.').unwrap_or(value);
    if name.is_empty() {
        return vec![Cause::required(field, "")];
    }
    let mut causes: Vec<Cause> = subdomain_errors(name)
        .iter()
        .map(|m| Cause::invalid(field, &json!(value), m))
        .collect();
    if name.split('.').count() < 2 {
        causes.push(Cause::invalid(
            field,
            &json!(value),
            "should be a domain with at least two segments separated by dots",
        ));
    }
    causes
}

/// Upstream's `ValidateLabels` of the map at `field`.
fn label_map(field: &str, labels: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (k, v) in labels.as_object().into_iter().flatten() {
        for m in qualified_name_errors(k) {
            causes.push(Cause::invalid(field, &json!(k), &m));
        }
        for m in label_value_errors(v.as_str().unwrap_or_default()) {
            causes.push(Cause::invalid(field, v, &m));
        }
    }
    causes
}

fn protocol(causes: &mut Vec<Cause>, field: &str, value: &Value) {
    match value.as_str() {
        None | Some("") => causes.push(Cause::required(field, "")),
        Some(p) if !PROTOCOLS.contains(&p) => {
            causes.push(Cause::not_supported(field, value, PROTOCOLS));
        }
        Some(_) => {}
    }
}

/// An EndpointSlice, on create and update (upstream `ValidateEndpointSlice`).
pub fn endpoint_slice(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let address_type = obj["addressType"].as_str().unwrap_or_default();
    if address_type.is_empty() {
        causes.push(Cause::required("addressType", ""));
    } else if !ADDRESS_TYPES.contains(&address_type) {
        causes.push(Cause::not_supported(
            "addressType",
            &obj["addressType"],
            ADDRESS_TYPES,
        ));
    }
    causes.extend(endpoints(&obj["endpoints"], address_type));
    causes.extend(slice_ports(&obj["ports"]));
    causes
}

/// An EndpointSlice update: its `addressType` may not change.
pub fn endpoint_slice_update(new: &Value, old: &Value) -> Vec<Cause> {
    if new["addressType"] != old["addressType"] {
        vec![Cause::invalid(
            "addressType",
            &new["addressType"],
            "field is immutable",
        )]
    } else {
        Vec::new()
    }
}

fn endpoints(list: &Value, address_type: &str) -> Vec<Cause> {
    let list = list.as_array().map(Vec::as_slice).unwrap_or_default();
    if list.len() > MAX_ENDPOINTS {
        return vec![too_many("endpoints", list.len(), MAX_ENDPOINTS)];
    }
    let mut causes = Vec::new();
    for (i, endpoint) in list.iter().enumerate() {
        let path = format!("endpoints[{i}]");
        let addresses_path = format!("{path}.addresses");
        let addresses = endpoint["addresses"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if addresses.is_empty() {
            causes.push(Cause::required(
                &addresses_path,
                "must contain at least 1 address",
            ));
        } else if addresses.len() > MAX_ADDRESSES {
            causes.push(too_many(&addresses_path, addresses.len(), MAX_ADDRESSES));
        }
        for (j, address) in addresses.iter().enumerate() {
            let field = format!("{addresses_path}[{j}]");
            let text = address.as_str().unwrap_or_default();
            let parsed = text.parse::<IpAddr>().ok();
            match address_type {
                "IPv4" => {
                    if !parsed.is_some_and(|ip| ip.is_ipv4()) {
                        causes.push(Cause::invalid(
                            &field,
                            address,
                            "must be a valid IPv4 address",
                        ));
                    }
                    causes.extend(endpoint_ip(&field, text));
                }
                "IPv6" => {
                    if !parsed.is_some_and(|ip| ip.is_ipv6()) {
                        causes.push(Cause::invalid(
                            &field,
                            address,
                            "must be a valid IPv6 address",
                        ));
                    }
                    causes.extend(endpoint_ip(&field, text));
                }
                "FQDN" => causes.extend(fqdn(&field, text)),
                _ => {}
            }
        }
        if let Some(node) = endpoint["nodeName"].as_str() {
            causes.extend(node_name(&format!("{path}.nodeName"), node));
        }
        let topology = &endpoint["deprecatedTopology"];
        let topology_path = format!("{path}.deprecatedTopology");
        if let Some(map) = topology.as_object() {
            if map.len() > MAX_TOPOLOGY_LABELS {
                causes.push(too_many(&topology_path, map.len(), MAX_TOPOLOGY_LABELS));
            }
            causes.extend(label_map(&topology_path, topology));
            if map.contains_key(ZONE_LABEL) {
                causes.push(Cause {
                    reason: "InternalError",
                    message: "Internal error: reserved key was not removed in conversion"
                        .to_string(),
                    field: format!("{topology_path}[{ZONE_LABEL}]"),
                });
            }
        }
        if let Some(hostname) = endpoint["hostname"].as_str() {
            causes.extend(dns_label(&format!("{path}.hostname"), hostname));
        }
        if endpoint["hints"].is_object() {
            causes.extend(hints(&format!("{path}.hints"), &endpoint["hints"]));
        }
    }
    causes
}

fn hints(path: &str, hints: &Value) -> Vec<Cause> {
    let zones_path = format!("{path}.forZones");
    let zones = hints["forZones"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if zones.len() > MAX_ZONE_HINTS {
        return vec![too_many(&zones_path, zones.len(), MAX_ZONE_HINTS)];
    }
    let mut causes = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, zone) in zones.iter().enumerate() {
        let field = format!("{zones_path}[{i}].name");
        let name = zone["name"].as_str().unwrap_or_default();
        if !seen.insert(name) {
            causes.push(duplicate(&field, &zone["name"]));
        }
        for m in label_value_errors(name) {
            causes.push(Cause::invalid(&field, &zone["name"], &m));
        }
    }
    causes
}

fn slice_ports(list: &Value) -> Vec<Cause> {
    let list = list.as_array().map(Vec::as_slice).unwrap_or_default();
    if list.len() > MAX_PORTS {
        return vec![too_many("ports", list.len(), MAX_PORTS)];
    }
    let mut causes = Vec::new();
    let mut names = BTreeSet::new();
    for (i, port) in list.iter().enumerate() {
        let path = format!("ports[{i}]");
        let name = port["name"].as_str().unwrap_or_default();
        if !name.is_empty() {
            causes.extend(dns_label(&format!("{path}.name"), name));
        }
        if !names.insert(name) {
            causes.push(duplicate(&format!("{path}.name"), &json!(name)));
        }
        protocol(&mut causes, &format!("{path}.protocol"), &port["protocol"]);
        if let Some(app) = port["appProtocol"].as_str() {
            causes.extend(qualified_name(&format!("{path}.appProtocol"), app));
        }
    }
    causes
}

/// Upstream's `SetDefaults_EndpointPort`: a port of an Endpoints subset without a protocol is TCP.
pub fn endpoints_defaults(obj: &mut Value) {
    let Some(subsets) = obj.get_mut("subsets").and_then(Value::as_array_mut) else {
        return;
    };
    for subset in subsets {
        let Some(ports) = subset.get_mut("ports").and_then(Value::as_array_mut) else {
            continue;
        };
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            if port
                .get("protocol")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                port.insert("protocol".to_string(), json!("TCP"));
            }
        }
    }
}

/// Core/v1 Endpoints, on create and update (upstream `ValidateEndpoints`' subsets).
pub fn endpoints_object(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let subsets = obj["subsets"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, subset) in subsets.iter().enumerate() {
        let path = format!("subsets[{i}]");
        let listed = |key: &str| {
            subset[key]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
        };
        if listed("addresses").is_empty() && listed("notReadyAddresses").is_empty() {
            causes.push(Cause::required(
                &path,
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for key in ["addresses", "notReadyAddresses"] {
            for (j, address) in listed(key).iter().enumerate() {
                causes.extend(endpoint_address(&format!("{path}.{key}[{j}]"), address));
            }
        }
        let ports = listed("ports");
        for (j, port) in ports.iter().enumerate() {
            let field = format!("{path}.ports[{j}]");
            let name = port["name"].as_str().unwrap_or_default();
            if ports.len() > 1 && name.is_empty() {
                causes.push(Cause::required(&format!("{field}.name"), ""));
            } else if !name.is_empty() {
                causes.extend(dns_label(&format!("{field}.name"), name));
            }
            if !port["port"]
                .as_i64()
                .is_some_and(|n| (1..=65535).contains(&n))
            {
                causes.push(Cause::invalid(
                    &format!("{field}.port"),
                    &port["port"],
                    "must be between 1 and 65535, inclusive",
                ));
            }
            protocol(&mut causes, &format!("{field}.protocol"), &port["protocol"]);
            if let Some(app) = port["appProtocol"].as_str() {
                causes.extend(qualified_name(&format!("{field}.appProtocol"), app));
            }
        }
    }
    causes
}

/// Upstream `validateEndpointAddress`.
fn endpoint_address(path: &str, address: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let ip_path = format!("{path}.ip");
    let ip = address["ip"].as_str().unwrap_or_default();
    if ip.parse::<IpAddr>().is_err() {
        causes.push(Cause::invalid(
            &ip_path,
            &json!(ip),
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ));
    }
    if let Some(hostname) = address["hostname"].as_str().filter(|h| !h.is_empty()) {
        causes.extend(dns_label(&format!("{path}.hostname"), hostname));
    }
    if let Some(node) = address["nodeName"].as_str() {
        causes.extend(node_name(&format!("{path}.nodeName"), node));
    }
    causes.extend(endpoint_ip(&ip_path, ip));
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(causes: &[Cause]) -> Vec<(&str, &str)> {
        causes
            .iter()
            .map(|c| (c.field.as_str(), c.reason))
            .collect()
    }

    #[test]
    fn a_slice_as_the_endpointslice_controller_writes_it_is_valid() {
        let slice = json!({
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.1.14"], "conditions": {"ready": true},
                           "nodeName": "node-a", "zone": "zone-a",
                           "hints": {"forZones": [{"name": "zone-a"}]},
                           "targetRef": {"kind": "Pod", "name": "web-1"}}],
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        });
        assert!(endpoint_slice(&slice).is_empty());
        let placeholder = json!({"addressType": "IPv4", "endpoints": null, "ports": null});
        assert!(endpoint_slice(&placeholder).is_empty());
    }

    #[test]
    fn bad_slices_get_upstreams_causes() {
        let slice = json!({
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": []},
                {"addresses": ["fd00::1", "127.0.0.1"], "hostname": "Bad_Host"},
                {"addresses": ["10.0.0.1"], "hints": {"forZones": [{"name": "a"}, {"name": "a"}]}},
            ],
            "ports": [{"name": "http", "protocol": "TCP"}, {"name": "http", "protocol": "ICMP"}],
        });
        assert_eq!(
            fields(&endpoint_slice(&slice)),
            [
                ("endpoints[0].addresses", "FieldValueRequired"),
                ("endpoints[1].addresses[0]", "FieldValueInvalid"),
                ("endpoints[1].addresses[1]", "FieldValueInvalid"),
                ("endpoints[1].hostname", "FieldValueInvalid"),
                ("endpoints[2].hints.forZones[1].name", "FieldValueDuplicate"),
                ("ports[1].name", "FieldValueDuplicate"),
                ("ports[1].protocol", "FieldValueNotSupported"),
            ]
        );
        let loopback = &endpoint_slice(&slice)[2];
        assert_eq!(
            loopback.message,
            "Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)"
        );
        assert_eq!(
            fields(&endpoint_slice(&json!({"addressType": "IP"}))),
            [("addressType", "FieldValueNotSupported")]
        );
        assert_eq!(
            fields(&endpoint_slice_update(
                &json!({"addressType": "IPv6"}),
                &json!({"addressType": "IPv4"})
            )),
            [("addressType", "FieldValueInvalid")]
        );
    }

    #[test]
    fn an_endpoints_port_without_a_protocol_is_defaulted_to_tcp() {
        let mut obj =
            json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]});
        endpoints_defaults(&mut obj);
        assert_eq!(obj["subsets"][0]["ports"][0]["protocol"], "TCP");
        assert!(endpoints_object(&obj).is_empty());
    }

    #[test]
    fn endpoints_subsets_need_addresses_named_ports_and_valid_ips() {
        let ok = json!({"subsets": [{"addresses": [{"ip": "10.0.0.1", "nodeName": "n"}],
                                     "ports": [{"port": 80, "protocol": "TCP"}]}]});
        assert!(endpoints_object(&ok).is_empty());
        let bad = json!({"subsets": [
            {"ports": [{"port": 80, "protocol": "TCP"}, {"name": "b", "port": 0, "protocol": "TCP"}]},
            {"notReadyAddresses": [{"ip": "169.254.1.1"}, {"ip": "nope"}]},
        ]});
        assert_eq!(
            fields(&endpoints_object(&bad)),
            [
                ("subsets[0]", "FieldValueRequired"),
                ("subsets[0].ports[0].name", "FieldValueRequired"),
                ("subsets[0].ports[1].port", "FieldValueInvalid"),
                ("subsets[1].notReadyAddresses[0].ip", "FieldValueInvalid"),
                ("subsets[1].notReadyAddresses[1].ip", "FieldValueInvalid"),
                ("subsets[1].notReadyAddresses[1].ip", "FieldValueInvalid"),
            ]
        );
    }
}
