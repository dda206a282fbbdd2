//! What the mirrored EndpointSlices of one Endpoints should be, and the creates, updates and deletes
//! that get there from the existing ones (upstream `reconciler.reconcile`, `reconcileByPortMapping`,
//! `recycleSlices`): pure functions, tested without an API.
//!
//! The Endpoints' subsets are first repacked (upstream canonicalizes them too). Each subset's ports
//! and each address family make one group, holding at most `max_per_subset` of the subset's
//! addresses (ready ones first) that parse as IPs; a group is one slice. The first existing slice of
//! a group is kept and rewritten only when its endpoints (compared as a set, by address, hostname and
//! target), its labels or its annotations differ; further slices of the group and slices of no group
//! are deleted, and a slice to create takes over the name of one to delete of the same family.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use flotilla_sdk::k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset, Endpoints};
use flotilla_sdk::k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::endpoints::repack_subsets;

/// The label naming the controller that manages a slice (`discovery.LabelManagedBy`).
pub(crate) const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";

/// Its value on the slices this controller manages.
pub(crate) const CONTROLLER_NAME: &str = "endpointslicemirroring-controller.k8s.io";

/// The label naming a slice's Service (`discovery.LabelServiceName`).
pub(crate) const SERVICE_NAME: &str = "kubernetes.io/service-name";

/// The label that opts an Endpoints out of mirroring when `"true"` (`discovery.LabelSkipMirror`).
pub(crate) const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";

/// Annotations of the Endpoints not copied to its slices.
const NOT_MIRRORED: [&str; 2] = [
    "endpoints.kubernetes.io/last-change-trigger-time",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// A group of endpoints sharing an address family and a set of ports (upstream
/// `addrTypePortMapKey`): the ports in a canonical order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct GroupKey {
    /// `IPv4` or `IPv6`.
    address_type: String,
    /// (name, port, protocol, appProtocol), sorted.
    ports: Vec<(String, i32, String, Option<String>)>,
}

impl GroupKey {
    fn new(address_type: &str, ports: &[EndpointPort]) -> Self {
        let mut ports: Vec<_> = ports
            .iter()
            .map(|p| {
                (
                    p.name.clone().unwrap_or_default(),
                    p.port.unwrap_or_default(),
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    p.app_protocol.clone(),
                )
            })
            .collect();
        ports.sort();
        Self {
            address_type: address_type.to_owned(),
            ports,
        }
    }

    fn of_slice(slice: &EndpointSlice) -> Self {
        Self::new(
            &slice.address_type,
            slice.ports.as_deref().unwrap_or_default(),
        )
    }
}

/// The endpoints one slice should hold.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    key: GroupKey,
    ports: Vec<EndpointPort>,
    /// De-duplicated by [`identity`], the last of equal ones kept (upstream's endpoint set).
    endpoints: Vec<Endpoint>,
}

/// The groups an Endpoints mirrors into, with how many addresses were left out: `(groups, invalid,
/// skipped)` where `skipped` counts invalid addresses and those past `max_per_subset`.
pub(crate) fn desired(endpoints: &Endpoints, max_per_subset: usize) -> (Vec<Group>, usize, usize) {
    let subsets = repack_subsets(endpoints.subsets.as_deref().unwrap_or_default());
    let mut groups: Vec<Group> = Vec::new();
    let (mut invalid, mut skipped) = (0, 0);
    for subset in &subsets {
        let ports = slice_ports(subset);
        // Both families get a group, so an emptied family's slice is deleted.
        let slots: Vec<usize> = ["IPv4", "IPv6"]
            .iter()
            .map(|family| {
                let key = GroupKey::new(family, &ports);
                match groups.iter().position(|g| g.key == key) {
                    Some(slot) => slot,
                    None => {
                        groups.push(Group {
                            key,
                            ports: ports.clone(),
                            endpoints: Vec::new(),
                        });
                        groups.len() - 1
                    }
                }
            })
            .collect();
        let total = count(&subset.addresses) + count(&subset.not_ready_addresses);
        let mut added = 0;
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset
            .not_ready_addresses
            .iter()
            .flatten()
            .map(|a| (a, false));
        for (address, is_ready) in ready.chain(not_ready) {
            if added >= max_per_subset {
                break;
            }
            let Some((endpoint, v6)) = to_endpoint(address, is_ready) else {
                invalid += 1;
                continue;
            };
            added += 1;
            let group = &mut groups[slots[usize::from(v6)]];
            let id = identity(&endpoint);
            match group.endpoints.iter_mut().find(|e| identity(e) == id) {
                Some(existing) => *existing = endpoint,
                None => group.endpoints.push(endpoint),
            }
        }
        skipped += total - added;
    }
    (groups, invalid, skipped)
}

fn count(list: &Option<Vec<EndpointAddress>>) -> usize {
    list.as_ref().map_or(0, Vec::len)
}

/// A subset's ports as slice ports (upstream `epPortsToEpsPorts`): every field set.
fn slice_ports(subset: &EndpointSubset) -> Vec<EndpointPort> {
    subset
        .ports
        .iter()
        .flatten()
        .map(|p| EndpointPort {
            name: Some(p.name.clone().unwrap_or_default()),
            port: Some(p.port),
            protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
            app_protocol: p.app_protocol.clone(),
        })
        .collect()
}

/// An Endpoints address as a slice endpoint (upstream `addressToEndpoint`), with whether it is
/// IPv6; `None` when the address is not an IP. The IP is written in its canonical form.
fn to_endpoint(address: &EndpointAddress, ready: bool) -> Option<(Endpoint, bool)> {
    let ip = parse_ip_sloppy(&address.ip)?;
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let endpoint = Endpoint {
        addresses: vec![ip.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            ..EndpointConditions::default()
        }),
        target_ref: address.target_ref.clone(),
        node_name: address.node_name.clone(),
        hostname: address.hostname.clone().filter(|h| !h.is_empty()),
        ..Endpoint::default()
    };
    Some((endpoint, ip.is_ipv6()))
}

/// Go's `ParseIPSloppy`: an IP, IPv4 octets with leading zeros read as decimal.
fn parse_ip_sloppy(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let octets: Vec<u8> = text
        .split('.')
        .map(|part| {
            (!part.is_empty() && part.len() <= 3 && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse::<u8>().ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    let [a, b, c, d] = <[u8; 4]>::try_from(octets).ok()?;
    Some(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
}

/// What tells two endpoints apart (upstream `hashEndpoint`): addresses, hostname, target.
fn identity(e: &Endpoint) -> (Vec<String>, String, String, String) {
    let mut addresses = e.addresses.clone();
    addresses.sort();
    let target = e.target_ref.as_ref();
    (
        addresses,
        e.hostname.clone().unwrap_or_default(),
        target.and_then(|r| r.namespace.clone()).unwrap_or_default(),
        target.and_then(|r| r.name.clone()).unwrap_or_default(),
    )
}

/// Upstream `EndpointsEqualBeyondHash`: node, zone, conditions and target (resourceVersion aside).
fn equal_beyond_identity(a: &Endpoint, b: &Endpoint) -> bool {
    let conditions = |e: &Endpoint| {
        let c = e.conditions.clone().unwrap_or_default();
        (c.ready, c.serving, c.terminating)
    };
    let target = |e: &Endpoint| {
        e.target_ref.clone().map(|mut r| {
            r.resource_version = None;
            r
        })
    };
    a.node_name == b.node_name
        && a.zone == b.zone
        && conditions(a) == conditions(b)
        && target(a) == target(b)
}

/// What to write.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// New slices (with `generateName`).
    pub(crate) create: Vec<EndpointSlice>,
    /// Slices rewritten in place (named, with the resourceVersion they replace).
    pub(crate) update: Vec<EndpointSlice>,
    /// Existing slices to delete.
    pub(crate) delete: Vec<EndpointSlice>,
}

/// The writes that turn `existing` (this controller's slices of the Service, in list order) into the
/// slices of `groups`.
pub(crate) fn plan(
    endpoints: &Endpoints,
    groups: &[Group],
    existing: &[EndpointSlice],
    max_per_subset: usize,
) -> Plan {
    let mut plan = Plan::default();
    for group in groups {
        let mine: Vec<&EndpointSlice> = existing
            .iter()
            .filter(|s| GroupKey::of_slice(s) == group.key)
            .collect();
        if group.endpoints.is_empty() {
            plan.delete.extend(mine.into_iter().cloned());
            continue;
        }
        let kept = mine.first().copied();
        plan.delete
            .extend(mine.iter().skip(1).map(|s| (*s).clone()));
        if let Some(kept) = kept
            && unchanged(endpoints, kept, group)
        {
            continue;
        }
        let mut slice = new_slice(endpoints, group, max_per_subset);
        match kept {
            Some(kept) => {
                slice.metadata.name = kept.metadata.name.clone();
                slice.metadata.resource_version = kept.metadata.resource_version.clone();
                plan.update.push(slice);
            }
            None => plan.create.push(slice),
        }
    }
    for slice in existing {
        let key = GroupKey::of_slice(slice);
        if !groups.iter().any(|g| g.key == key) {
            plan.delete.push(slice.clone());
        }
    }
    recycle(&mut plan);
    plan
}

/// Upstream `recycleSlices`: a slice to create takes over a slice to delete of the same family.
fn recycle(plan: &mut Plan) {
    let mut creates = std::mem::take(&mut plan.create);
    let mut kept_creates = Vec::new();
    for mut slice in creates.drain(..) {
        match plan
            .delete
            .iter()
            .position(|d| d.address_type == slice.address_type)
        {
            Some(i) => {
                let old = plan.delete.remove(i);
                slice.metadata.generate_name = None;
                slice.metadata.name = old.metadata.name;
                slice.metadata.resource_version = old.metadata.resource_version;
                plan.update.push(slice);
            }
            None => kept_creates.push(slice),
        }
    }
    plan.create = kept_creates;
}

/// Whether `slice` already holds `group`'s endpoints and the Endpoints' labels and annotations.
fn unchanged(endpoints: &Endpoints, slice: &EndpointSlice, group: &Group) -> bool {
    let mut matched = 0;
    for e in &slice.endpoints {
        let id = identity(e);
        match group.endpoints.iter().find(|d| identity(d) == id) {
            None => return false,
            Some(want) if !equal_beyond_identity(want, e) => return false,
            Some(_) => matched += 1,
        }
    }
    if matched != group.endpoints.len() {
        return false;
    }
    let mut labels = slice.metadata.labels.clone().unwrap_or_default();
    labels.remove(MANAGED_BY);
    labels.remove(SERVICE_NAME);
    labels == endpoints.metadata.labels.clone().unwrap_or_default()
        && slice.metadata.annotations.clone().unwrap_or_default() == mirrored_annotations(endpoints)
}

fn mirrored_annotations(endpoints: &Endpoints) -> BTreeMap<String, String> {
    let mut annotations = endpoints.metadata.annotations.clone().unwrap_or_default();
    for key in NOT_MIRRORED {
        annotations.remove(key);
    }
    annotations
}

/// A slice of `group` for `endpoints` (upstream `newEndpointSlice`): the Endpoints' labels with the
/// Service name and manager, its annotations but the trigger time and last-applied configuration,
/// controlled by the Endpoints, named by `generateName` `<name>-`.
fn new_slice(endpoints: &Endpoints, group: &Group, max_per_subset: usize) -> EndpointSlice {
    let name = endpoints.metadata.name.clone().unwrap_or_default();
    let mut labels = endpoints.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME.to_owned(), name.clone());
    labels.insert(MANAGED_BY.to_owned(), CONTROLLER_NAME.to_owned());
    let annotations = mirrored_annotations(endpoints);
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: endpoints.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Endpoints".into(),
                name,
                uid: endpoints.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        address_type: group.key.address_type.clone(),
        endpoints: group
            .endpoints
            .iter()
            .take(max_per_subset)
            .cloned()
            .collect(),
        ports: Some(group.ports.clone()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn endpoints(value: Value) -> Endpoints {
        serde_json::from_value(value).unwrap()
    }

    /// Fixture 20's manual Endpoints.
    fn manual() -> Endpoints {
        endpoints(json!({
            "metadata": {"name": "manual", "namespace": "endpoints", "uid": "5923", "labels": {"team": "a"}},
            "subsets": [{
                "addresses": [{"ip": "192.168.10.1", "hostname": "db-1"}, {"ip": "192.168.10.2"}],
                "notReadyAddresses": [{"ip": "192.168.10.3"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }],
        }))
    }

    #[test]
    fn a_subset_mirrors_into_one_slice_as_fixture_21() {
        let e = manual();
        let (groups, invalid, skipped) = desired(&e, 1000);
        assert_eq!((invalid, skipped), (0, 0));
        let plan = plan(&e, &groups, &[], 1000);
        assert!(plan.update.is_empty() && plan.delete.is_empty());
        assert_eq!(plan.create.len(), 1);
        let slice = serde_json::to_value(&plan.create[0]).unwrap();
        assert_eq!(
            slice,
            json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "generateName": "manual-",
                    "namespace": "endpoints",
                    "labels": {
                        "endpointslice.kubernetes.io/managed-by": "endpointslicemirroring-controller.k8s.io",
                        "kubernetes.io/service-name": "manual",
                        "team": "a",
                    },
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Endpoints", "name": "manual",
                        "uid": "5923", "controller": true, "blockOwnerDeletion": true}],
                },
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": ["192.168.10.1"], "conditions": {"ready": true}, "hostname": "db-1"},
                    {"addresses": ["192.168.10.2"], "conditions": {"ready": true}},
                    {"addresses": ["192.168.10.3"], "conditions": {"ready": false}},
                ],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            })
        );
    }

    fn existing(e: &Endpoints, name: &str) -> EndpointSlice {
        let (groups, ..) = desired(e, 1000);
        let mut slice = plan(e, &groups, &[], 1000).create.remove(0);
        slice.metadata.name = Some(name.into());
        slice.metadata.resource_version = Some("7".into());
        // As the API returns it: endpoints in another order, defaults filled in.
        slice.endpoints.reverse();
        slice
    }

    #[test]
    fn an_unchanged_slice_is_left_alone_and_a_changed_one_updated_in_place() {
        let e = manual();
        let current = existing(&e, "manual-v5wfn");
        let (groups, ..) = desired(&e, 1000);
        let same = plan(&e, &groups, std::slice::from_ref(&current), 1000);
        assert!(same.create.is_empty() && same.update.is_empty() && same.delete.is_empty());

        // Fixture 23: one ready address instead.
        let updated = endpoints(json!({
            "metadata": {"name": "manual", "namespace": "endpoints", "uid": "5923", "labels": {"team": "a"}},
            "subsets": [{"addresses": [{"ip": "192.168.10.4"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}],
        }));
        let (groups, ..) = desired(&updated, 1000);
        let p = plan(&updated, &groups, &[current], 1000);
        assert!(p.create.is_empty() && p.delete.is_empty());
        assert_eq!(p.update.len(), 1);
        let slice = &p.update[0];
        assert_eq!(slice.metadata.name.as_deref(), Some("manual-v5wfn"));
        assert_eq!(slice.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(slice.endpoints.len(), 1);
        assert_eq!(slice.endpoints[0].addresses, ["192.168.10.4"]);
    }

    #[test]
    fn a_label_change_rewrites_the_slice() {
        let e = manual();
        let current = existing(&e, "manual-x");
        let mut relabelled = e.clone();
        relabelled.metadata.labels = Some(BTreeMap::from([("team".into(), "b".into())]));
        let (groups, ..) = desired(&relabelled, 1000);
        assert_eq!(plan(&relabelled, &groups, &[current], 1000).update.len(), 1);
    }

    #[test]
    fn families_split_invalid_ips_are_skipped_and_the_limit_holds_per_subset() {
        let e = endpoints(json!({
            "metadata": {"name": "dual", "namespace": "ns", "uid": "u"},
            "subsets": [{
                "addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}, {"ip": "not-an-ip"}, {"ip": "010.000.000.002"}],
                "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
            }],
        }));
        let (groups, invalid, skipped) = desired(&e, 1000);
        assert_eq!((invalid, skipped), (1, 1));
        let p = plan(&e, &groups, &[], 1000);
        let families: Vec<(&str, usize)> = p
            .create
            .iter()
            .map(|s| (s.address_type.as_str(), s.endpoints.len()))
            .collect();
        assert_eq!(families, [("IPv4", 2), ("IPv6", 1)]);
        assert!(
            p.create[0]
                .endpoints
                .iter()
                .any(|e| e.addresses == ["10.0.0.2"])
        );
        let (_, _, skipped) = desired(&e, 1);
        assert_eq!(skipped, 3, "one address mirrored of four");
    }

    #[test]
    fn a_slice_of_a_port_set_gone_is_recycled_for_the_new_one() {
        let e = manual();
        let current = existing(&e, "manual-old");
        let mut moved = e.clone();
        moved.subsets.as_mut().unwrap()[0].ports.as_mut().unwrap()[0].port = 9090;
        let (groups, ..) = desired(&moved, 1000);
        let p = plan(&moved, &groups, &[current], 1000);
        assert!(p.create.is_empty() && p.delete.is_empty());
        assert_eq!(p.update[0].metadata.name.as_deref(), Some("manual-old"));
        assert_eq!(p.update[0].metadata.generate_name, None);
        let emptied = endpoints(json!({"metadata": {"name": "manual", "uid": "5923"}}));
        let (groups, ..) = desired(&emptied, 1000);
        let slice = existing(&e, "manual-old");
        assert_eq!(plan(&emptied, &groups, &[slice], 1000).delete.len(), 1);
    }
}
