//! Upstream's `endpoints.RepackSubsets` and `SortSubsets`: the canonical layout of an Endpoints'
//! subsets, which both the endpoints controller (before comparing and writing) and the mirroring
//! controller (before mirroring) put subsets in.
//!
//! Every (address, port) pair is expanded, addresses are de-duplicated by IP and target uid, a port
//! an address is not ready on makes it not ready there ("not ready trumps ready"), and the ports
//! served by exactly the same addresses (with the same readiness) share one subset. A subset without
//! ports (a headless Service without ports) is kept under a sentinel port that is not written.
//! Addresses are sorted by IP bytes then uid, ports and subsets by the MD5 of their `spew` rendering,
//! as upstream, so the result is byte-for-byte the order kube-controller-manager writes.

use std::cmp::Ordering;

use flotilla_sdk::k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset};

use super::{md5, spew};

/// Addresses (indexes into the de-duplicated list) with their readiness on one port.
type AddressSet = Vec<(usize, bool)>;

/// The subsets in canonical form (see the module doc). Empty address and port lists are `None`, as
/// upstream's nil slices, which JSON omits.
pub(crate) fn repack_subsets(subsets: &[EndpointSubset]) -> Vec<EndpointSubset> {
    // Every distinct address (by IP and target uid), first copy kept.
    let mut all: Vec<EndpointAddress> = Vec::new();
    // Each distinct port (None: the sentinel of a port-less subset) with the addresses serving it.
    let mut by_port: Vec<(Option<EndpointPort>, AddressSet)> = Vec::new();
    for subset in subsets {
        let ports: Vec<Option<&EndpointPort>> = match subset.ports.as_deref() {
            None | Some([]) => vec![None],
            Some(ports) => ports.iter().map(Some).collect(),
        };
        for port in ports {
            let ready = subset.addresses.iter().flatten().map(|a| (a, true));
            let not_ready = subset
                .not_ready_addresses
                .iter()
                .flatten()
                .map(|a| (a, false));
            for (address, is_ready) in ready.chain(not_ready) {
                let index = intern(&mut all, address);
                let slot = match by_port.iter().position(|(p, _)| p.as_ref() == port) {
                    Some(slot) => slot,
                    None => {
                        by_port.push((port.cloned(), Vec::new()));
                        by_port.len() - 1
                    }
                };
                let set = &mut by_port[slot].1;
                match set.iter_mut().find(|(i, _)| *i == index) {
                    // Not ready trumps ready.
                    Some((_, was_ready)) => *was_ready = *was_ready && is_ready,
                    None => set.push((index, is_ready)),
                }
            }
        }
    }

    // Group the ports by the exact set of (address, readiness) serving them.
    let mut groups: Vec<(AddressSet, Vec<EndpointPort>)> = Vec::new();
    for (port, mut set) in by_port {
        set.sort_by(|a, b| less_cmp(&all[a.0], &all[b.0]).then(a.1.cmp(&b.1)));
        let slot = match groups.iter().position(|(s, _)| *s == set) {
            Some(slot) => slot,
            None => {
                groups.push((set, Vec::new()));
                groups.len() - 1
            }
        };
        if let Some(port) = port {
            groups[slot].1.push(port);
        }
    }

    let mut out: Vec<EndpointSubset> = groups
        .into_iter()
        .map(|(set, ports)| {
            let pick = |ready: bool| {
                let list: Vec<EndpointAddress> = set
                    .iter()
                    .filter(|(_, r)| *r == ready)
                    .map(|(i, _)| all[*i].clone())
                    .collect();
                (!list.is_empty()).then_some(list)
            };
            EndpointSubset {
                addresses: pick(true),
                not_ready_addresses: pick(false),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect();
    sort_subsets(&mut out);
    out
}

/// Upstream's `SortSubsets`: addresses by IP then uid, ports and subsets by hash.
pub(crate) fn sort_subsets(subsets: &mut [EndpointSubset]) {
    for subset in subsets.iter_mut() {
        if let Some(list) = subset.addresses.as_mut() {
            list.sort_by(less_cmp);
        }
        if let Some(list) = subset.not_ready_addresses.as_mut() {
            list.sort_by(less_cmp);
        }
        if let Some(ports) = subset.ports.as_mut() {
            ports.sort_by_cached_key(|p| md5::digest(spew::port(p).as_bytes()));
        }
    }
    subsets.sort_by_cached_key(|s| md5::digest(spew::subset(s).as_bytes()));
}

/// The index of `address` among `all` by IP and target uid, appending a copy when it is new.
fn intern(all: &mut Vec<EndpointAddress>, address: &EndpointAddress) -> usize {
    let uid = |a: &EndpointAddress| a.target_ref.as_ref().and_then(|r| r.uid.clone());
    match all
        .iter()
        .position(|a| a.ip == address.ip && uid(a) == uid(address))
    {
        Some(index) => index,
        None => {
            all.push(address.clone());
            all.len() - 1
        }
    }
}

/// Upstream's `LessEndpointAddress` as an ordering: IP bytes, then no target before a target, then
/// target uid.
pub(crate) fn less_cmp(a: &EndpointAddress, b: &EndpointAddress) -> Ordering {
    let uid = |x: &EndpointAddress| {
        x.target_ref
            .as_ref()
            .map(|r| r.uid.clone().unwrap_or_default())
    };
    a.ip.as_bytes()
        .cmp(b.ip.as_bytes())
        .then_with(|| uid(a).cmp(&uid(b)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::ObjectReference;

    use super::*;

    fn addr(ip: &str, pod: &str) -> EndpointAddress {
        EndpointAddress {
            ip: ip.into(),
            node_name: Some("node-b".into()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("endpoints".into()),
                name: Some(pod.into()),
                uid: Some(format!("uid-{pod}")),
                ..ObjectReference::default()
            }),
            ..EndpointAddress::default()
        }
    }

    fn port(name: &str, number: i32) -> EndpointPort {
        EndpointPort {
            name: Some(name.into()),
            port: number,
            protocol: Some("TCP".into()),
            app_protocol: None,
        }
    }

    fn one(address: EndpointAddress, ready: bool, p: EndpointPort) -> EndpointSubset {
        let list = Some(vec![address]);
        EndpointSubset {
            addresses: if ready { list.clone() } else { None },
            not_ready_addresses: if ready { None } else { list },
            ports: Some(vec![p]),
        }
    }

    #[test]
    fn pods_serving_the_same_ports_share_one_subset_with_ports_in_upstreams_hash_order() {
        let input = vec![
            one(addr("10.244.2.11", "web-2"), true, port("http", 8080)),
            one(addr("10.244.2.11", "web-2"), true, port("metrics", 9090)),
            one(addr("10.244.1.14", "web-1"), true, port("http", 8080)),
            one(addr("10.244.1.14", "web-1"), true, port("metrics", 9090)),
            one(addr("10.244.1.15", "web-3"), false, port("http", 8080)),
            one(addr("10.244.1.15", "web-3"), false, port("metrics", 9090)),
        ];
        let out = repack_subsets(&input);
        assert_eq!(out.len(), 1);
        let ips: Vec<&str> = out[0]
            .addresses
            .iter()
            .flatten()
            .map(|a| a.ip.as_str())
            .collect();
        assert_eq!(ips, ["10.244.1.14", "10.244.2.11"], "sorted by IP");
        assert_eq!(out[0].not_ready_addresses.as_ref().unwrap().len(), 1);
        // Fixture 08: metrics before http.
        assert_eq!(
            out[0].ports,
            Some(vec![port("metrics", 9090), port("http", 8080)])
        );
    }

    #[test]
    fn a_named_port_resolved_differently_splits_the_subsets_as_fixture_17() {
        let mut input = Vec::new();
        for (ip, pod, http) in [
            ("10.244.1.15", "web-3", 8080),
            ("10.244.2.11", "web-2", 8080),
            ("10.244.2.12", "web-alt", 8081),
        ] {
            input.push(one(addr(ip, pod), true, port("http", http)));
            input.push(one(addr(ip, pod), true, port("metrics", 9090)));
        }
        // Fixture 17's node names and uids, so the hashes are those KCM sorted by.
        let fixture_uid = |pod: &str| match pod {
            "web-3" => ("node-a", "d4873cf3-e7ce-41be-beca-c266409cc417"),
            "web-2" => ("node-b", "0ba2871b-fefd-4f0c-9d49-e919b677bd05"),
            _ => ("node-b", "a25c4263-db0e-4341-947d-3e20c084e721"),
        };
        for subset in &mut input {
            for a in subset.addresses.iter_mut().flatten() {
                let r = a.target_ref.as_mut().unwrap();
                let (node, uid) = fixture_uid(r.name.as_deref().unwrap());
                a.node_name = Some(node.into());
                r.uid = Some(uid.into());
            }
        }
        let out = repack_subsets(&input);
        let summary: Vec<(Vec<String>, Vec<i32>)> = out
            .iter()
            .map(|s| {
                (
                    s.addresses
                        .iter()
                        .flatten()
                        .map(|a| a.target_ref.as_ref().unwrap().name.clone().unwrap())
                        .collect(),
                    s.ports.iter().flatten().map(|p| p.port).collect(),
                )
            })
            .collect();
        let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            summary,
            [
                (names(&["web-3", "web-2", "web-alt"]), vec![9090]),
                (names(&["web-alt"]), vec![8081]),
                (names(&["web-3", "web-2"]), vec![8080]),
            ]
        );
    }

    #[test]
    fn not_ready_on_one_port_trumps_ready_and_duplicates_collapse() {
        let input = vec![
            one(addr("10.0.0.1", "a"), true, port("http", 80)),
            one(addr("10.0.0.1", "a"), false, port("http", 80)),
            one(addr("10.0.0.1", "a"), true, port("http", 80)),
        ];
        let out = repack_subsets(&input);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].addresses, None);
        assert_eq!(out[0].not_ready_addresses.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn addresses_without_ports_are_kept_without_ports() {
        let input = vec![EndpointSubset {
            addresses: Some(vec![addr("10.0.0.2", "b"), addr("10.0.0.1", "a")]),
            not_ready_addresses: None,
            ports: Some(vec![]),
        }];
        let out = repack_subsets(&input);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ports, None);
        assert_eq!(out[0].addresses.as_ref().unwrap()[0].ip, "10.0.0.1");
        assert!(repack_subsets(&[]).is_empty());
    }
}
