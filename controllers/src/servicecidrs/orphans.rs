//! Whether deleting a ServiceCIDR would orphan an IPAddress (upstream `canDeleteCIDR`): not when
//! another ServiceCIDR contains each of its CIDRs, otherwise not when every IPAddress kube-apiserver
//! allocated in it lies in another ServiceCIDR too.

use std::net::IpAddr;

use flotilla_sdk::k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};

/// The label naming who allocated an IPAddress, and kube-apiserver's value of it.
pub const MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
/// kube-apiserver's allocator (upstream `ipallocator.ControllerName`).
pub const IP_ALLOCATOR: &str = "ipallocator.k8s.io";

/// A parsed CIDR: network address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prefix {
    ip: IpAddr,
    len: u8,
}

impl Prefix {
    fn parse(s: &str) -> Option<Self> {
        let (ip, len) = s.split_once('/')?;
        let ip: IpAddr = ip.parse().ok()?;
        let len: u8 = len.parse().ok()?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        (len <= max).then_some(Self { ip, len })
    }

    fn bits(ip: IpAddr) -> (u128, u8) {
        match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        if self.ip.is_ipv4() != ip.is_ipv4() {
            return false;
        }
        let (net, width) = Self::bits(self.ip);
        let (addr, _) = Self::bits(ip);
        let shift = u32::from(width - self.len);
        net.checked_shr(shift).unwrap_or(0) == addr.checked_shr(shift).unwrap_or(0)
    }

    fn contains_prefix(&self, other: &Prefix) -> bool {
        self.len <= other.len && self.contains(other.ip)
    }
}

fn prefixes(cidr: &ServiceCIDR) -> Vec<Prefix> {
    cidr.spec
        .as_ref()
        .and_then(|s| s.cidrs.as_ref())
        .map(|list| list.iter().filter_map(|c| Prefix::parse(c)).collect())
        .unwrap_or_default()
}

fn name(cidr: &ServiceCIDR) -> &str {
    cidr.metadata.name.as_deref().unwrap_or_default()
}

/// The IPAddress that deleting `target` would orphan, if any, given every ServiceCIDR (`target`
/// among them) and every IPAddress.
pub fn orphan<'a>(
    target: &ServiceCIDR,
    all: &[ServiceCIDR],
    ips: &'a [IPAddress],
) -> Option<&'a IPAddress> {
    let own = prefixes(target);
    let others: Vec<Vec<Prefix>> = all
        .iter()
        .filter(|c| name(c) != name(target))
        .map(prefixes)
        .collect();
    // Each CIDR inside another ServiceCIDR: every IP stays covered.
    let has_parent = own
        .iter()
        .all(|p| others.iter().flatten().any(|o| o.contains_prefix(p)));
    if has_parent {
        return None;
    }
    ips.iter().find(|ip| {
        let managed = ip
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_BY))
            .is_some_and(|v| v == IP_ALLOCATOR);
        let Some(address) = ip
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.parse::<IpAddr>().ok())
        else {
            return false;
        };
        managed
            && own.iter().any(|p| p.contains(address))
            && !others.iter().flatten().any(|o| o.contains(address))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use flotilla_sdk::k8s_openapi::api::networking::v1::ServiceCIDRSpec;

    use super::*;

    fn cidr(name: &str, cidrs: &[&str]) -> ServiceCIDR {
        let mut c = ServiceCIDR::default();
        c.metadata.name = Some(name.into());
        c.spec = Some(ServiceCIDRSpec {
            cidrs: Some(cidrs.iter().map(|s| s.to_string()).collect()),
        });
        c
    }

    fn ip(address: &str, managed: bool) -> IPAddress {
        let mut ip = IPAddress::default();
        ip.metadata.name = Some(address.into());
        if managed {
            ip.metadata.labels = Some(BTreeMap::from([(
                MANAGED_BY.to_owned(),
                IP_ALLOCATOR.to_owned(),
            )]));
        }
        ip
    }

    #[test]
    fn an_allocated_ip_only_the_deleted_cidr_holds_blocks_it() {
        let target = cidr("extra", &["10.1.0.0/24"]);
        let all = [target.clone(), cidr("kubernetes", &["10.0.0.0/24"])];
        let ips = [ip("10.0.0.5", true), ip("10.1.0.5", true)];
        assert_eq!(
            orphan(&target, &all, &ips).and_then(|i| i.metadata.name.as_deref()),
            Some("10.1.0.5")
        );
        assert!(orphan(&target, &all, &ips[..1]).is_none());
    }

    #[test]
    fn ips_not_allocated_by_kube_apiserver_do_not_block() {
        let target = cidr("extra", &["10.1.0.0/24"]);
        let all = [target.clone()];
        assert!(orphan(&target, &all, &[ip("10.1.0.5", false)]).is_none());
    }

    #[test]
    fn a_cidr_inside_another_or_an_ip_another_covers_does_not_block() {
        let target = cidr("small", &["10.0.0.0/25"]);
        let all = [target.clone(), cidr("big", &["10.0.0.0/16"])];
        assert!(orphan(&target, &all, &[ip("10.0.0.5", true)]).is_none());
        let dual = cidr("dual", &["10.2.0.0/24", "fd00::/112"]);
        let all = [dual.clone(), cidr("v4", &["10.2.0.0/16"])];
        assert!(orphan(&dual, &all, &[ip("10.2.0.9", true)]).is_none());
        assert!(orphan(&dual, &all, &[ip("fd00::9", true)]).is_some());
    }
}
