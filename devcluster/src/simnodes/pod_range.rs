//! A node's pod range: the IPv4 `spec.podCIDR` its pods take their IPs from, whoever set it (the
//! simulator at registration, or a node-ipam controller later).

use std::fmt;
use std::net::Ipv4Addr;

/// An IPv4 CIDR with room for at least two pods (`/30` or wider).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PodRange {
    base: Ipv4Addr,
    prefix: u8,
}

impl PodRange {
    /// The range `base/prefix`, its host bits cleared.
    pub(crate) fn new(base: Ipv4Addr, prefix: u8) -> Option<Self> {
        if prefix > 30 {
            return None;
        }
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        Some(PodRange {
            base: Ipv4Addr::from(u32::from(base) & mask),
            prefix,
        })
    }

    /// Parses `a.b.c.d/n`; `None` for anything else, an IPv6 range included (the simulator gives
    /// pods IPv4 addresses only).
    pub(crate) fn parse(cidr: &str) -> Option<Self> {
        let (ip, prefix) = cidr.split_once('/')?;
        PodRange::new(ip.parse().ok()?, prefix.parse().ok()?)
    }

    /// How many host addresses it holds (network and broadcast addresses aside).
    fn hosts(&self) -> u32 {
        let size = 1u64 << (32 - u32::from(self.prefix));
        u32::try_from(size - 2).unwrap_or(u32::MAX)
    }

    /// The `n`-th host address, cycling through them.
    pub(crate) fn host(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) + n % self.hosts() + 1)
    }
}

impl fmt::Display for PodRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_range_parses_and_hands_out_its_host_addresses_in_a_cycle() {
        let range = PodRange::parse("10.244.3.0/24").unwrap();
        assert_eq!(range.to_string(), "10.244.3.0/24");
        assert_eq!(range.host(0), Ipv4Addr::new(10, 244, 3, 1));
        assert_eq!(range.host(253), Ipv4Addr::new(10, 244, 3, 254));
        assert_eq!(range.host(254), Ipv4Addr::new(10, 244, 3, 1));
        let tiny = PodRange::parse("10.0.0.4/30").unwrap();
        assert_eq!(
            [tiny.host(0), tiny.host(1), tiny.host(2)],
            [
                Ipv4Addr::new(10, 0, 0, 5),
                Ipv4Addr::new(10, 0, 0, 6),
                Ipv4Addr::new(10, 0, 0, 5)
            ]
        );
    }

    #[test]
    fn host_bits_are_cleared_and_unusable_ranges_refused() {
        assert_eq!(
            PodRange::parse("10.1.2.3/16").unwrap().to_string(),
            "10.1.0.0/16"
        );
        assert_eq!(
            PodRange::parse("0.0.0.0/0").unwrap().host(0),
            Ipv4Addr::new(0, 0, 0, 1)
        );
        for bad in [
            "10.0.0.0/31",
            "10.0.0.0/33",
            "fd00::/64",
            "10.0.0.0",
            "x/24",
            "",
        ] {
            assert_eq!(PodRange::parse(bad), None, "{bad}");
        }
    }
}
