//! CIDR arithmetic for the range allocator: parse a CIDR, tell whether two overlap, and number the
//! node-sized subnets of a cluster CIDR (upstream `cidrset`'s indexing, without its bitmap).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Why a string is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR address: {0}")]
pub struct CidrError(pub String);

/// An IP network: an address with a prefix length, its host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The network address as a number (IPv4 in the low 32 bits).
    base: u128,
    /// The prefix length.
    prefix: u8,
    /// Whether the network is IPv6.
    v6: bool,
}

impl Cidr {
    /// The network of `ip`/`prefix`, host bits cleared (Go's `ParseCIDR` returns the same network);
    /// `None` when the prefix is longer than the family's.
    pub fn new(ip: IpAddr, prefix: u8) -> Option<Self> {
        let (value, v6) = match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), false),
            IpAddr::V6(v6) => (u128::from(v6), true),
        };
        let bits = if v6 { 128 } else { 32 };
        (prefix <= bits).then(|| Self {
            base: value & mask(bits, prefix),
            prefix,
            v6,
        })
    }

    /// Whether this is an IPv6 network.
    pub fn is_ipv6(&self) -> bool {
        self.v6
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    fn bits(&self) -> u8 {
        if self.v6 { 128 } else { 32 }
    }

    fn last(&self) -> u128 {
        self.base | !mask(self.bits(), self.prefix) & family_max(self.v6)
    }

    /// Whether the two networks share an address (one contains the other); networks of different
    /// families never do.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.v6 == other.v6 && self.base <= other.last() && other.base <= self.last()
    }

    /// How many subnets of prefix length `size` this network holds; `None` when `size` is shorter
    /// than the network's prefix or longer than the family's.
    pub fn subnet_count(&self, size: u8) -> Option<u128> {
        if size < self.prefix || size > self.bits() {
            return None;
        }
        1u128.checked_shl(u32::from(size - self.prefix))
    }

    /// The `index`-th subnet of prefix length `size` (0 is the first), if the network holds it.
    pub fn subnet(&self, size: u8, index: u128) -> Option<Cidr> {
        if index >= self.subnet_count(size)? {
            return None;
        }
        let step = 1u128
            .checked_shl(u32::from(self.bits() - size))
            .unwrap_or(0);
        Some(Cidr {
            base: self.base + index * step,
            prefix: size,
            v6: self.v6,
        })
    }

    /// The indexes (first, last) of the subnets of prefix length `size` that `other` overlaps,
    /// if it overlaps this network at all (upstream `cidrset.getIndexForIP` of its first and last
    /// address, clamped to the network).
    pub fn subnet_span(&self, size: u8, other: &Cidr) -> Option<(u128, u128)> {
        if !self.overlaps(other) {
            return None;
        }
        self.subnet_count(size)?;
        let shift = u32::from(self.bits() - size);
        let first = other.base.max(self.base) - self.base;
        let last = other.last().min(self.last()) - self.base;
        Some((
            first.checked_shr(shift).unwrap_or(0),
            last.checked_shr(shift).unwrap_or(0),
        ))
    }
}

fn family_max(v6: bool) -> u128 {
    if v6 { u128::MAX } else { u128::from(u32::MAX) }
}

fn mask(bits: u8, prefix: u8) -> u128 {
    let host = u32::from(bits - prefix.min(bits));
    let all = family_max(bits == 128);
    all & !(1u128.checked_shl(host).map_or(u128::MAX, |v| v - 1))
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || CidrError(s.to_owned());
        let (ip, prefix) = s.trim().split_once('/').ok_or_else(bad)?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        Cidr::new(ip, prefix).ok_or_else(bad)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.v6 {
            write!(f, "{}/{}", Ipv6Addr::from(self.base), self.prefix)
        } else {
            let v4 = u32::try_from(self.base).unwrap_or(u32::MAX);
            write!(f, "{}/{}", Ipv4Addr::from(v4), self.prefix)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn a_cidr_parses_to_its_network_and_prints_back() {
        assert_eq!(cidr("10.244.3.7/16").to_string(), "10.244.0.0/16");
        assert_eq!(cidr("fd00:1::5/64").to_string(), "fd00:1::/64");
        for bad in ["10.0.0.0", "10.0.0.0/33", "x/8", "10.0.0.0/", "10.0.0.0/+8"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn subnets_are_numbered_from_the_start_of_the_network() {
        let cluster = cidr("10.244.0.0/16");
        assert_eq!(cluster.subnet_count(24), Some(256));
        assert_eq!(cluster.subnet(24, 0).unwrap().to_string(), "10.244.0.0/24");
        assert_eq!(
            cluster.subnet(24, 255).unwrap().to_string(),
            "10.244.255.0/24"
        );
        assert_eq!(cluster.subnet(24, 256), None);
        assert_eq!(cluster.subnet_count(8), None);
        let v6 = cidr("fd00::/48");
        assert_eq!(v6.subnet(64, 1).unwrap().to_string(), "fd00:0:0:1::/64");
    }

    #[test]
    fn overlaps_cover_containment_either_way_and_never_cross_families() {
        let cluster = cidr("10.0.0.0/16");
        assert!(cluster.overlaps(&cidr("10.0.3.0/24")));
        assert!(cidr("10.0.3.0/24").overlaps(&cluster));
        assert!(cluster.overlaps(&cidr("10.0.0.0/8")));
        assert!(!cluster.overlaps(&cidr("10.1.0.0/24")));
        assert!(!cluster.overlaps(&cidr("::/0")));
    }

    #[test]
    fn a_span_names_every_subnet_a_network_touches_within_the_cluster() {
        let cluster = cidr("10.0.0.0/16");
        assert_eq!(cluster.subnet_span(24, &cidr("10.0.0.0/24")), Some((0, 0)));
        assert_eq!(cluster.subnet_span(24, &cidr("10.0.4.0/22")), Some((4, 7)));
        assert_eq!(
            cluster.subnet_span(24, &cidr("10.0.9.128/25")),
            Some((9, 9))
        );
        assert_eq!(cluster.subnet_span(24, &cidr("10.0.0.0/8")), Some((0, 255)));
        assert_eq!(cluster.subnet_span(24, &cidr("10.1.0.0/24")), None);
    }
}
