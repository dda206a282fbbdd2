//! The node-ipam flags (kube-controller-manager's `--allocate-node-cidrs`, `--cluster-cidr`,
//! `--node-cidr-mask-size[-ipv4|-ipv6]`, `--service-cluster-ip-range`, `--cidr-allocator-type`),
//! checked once at start-up as `startNodeIpamController` checks them, and resolved into one
//! [`Pool`] per cluster CIDR.

use std::str::FromStr;

use super::cidr::{Cidr, CidrError};

/// kube-controller-manager's default node mask for an IPv4 cluster CIDR.
pub const DEFAULT_NODE_CIDR_MASK_SIZE_IPV4: u8 = 24;
/// kube-controller-manager's default node mask for an IPv6 cluster CIDR.
pub const DEFAULT_NODE_CIDR_MASK_SIZE_IPV6: u8 = 64;
/// The most a node mask may exceed an IPv6 cluster mask (upstream `clusterSubnetMaxDiff`: 65536
/// ranges).
const IPV6_MAX_DIFF: u8 = 16;
/// The only allocator kube-controller-manager offers without a cloud provider.
pub const RANGE_ALLOCATOR: &str = "RangeAllocator";

/// Up to two CIDRs from a comma-separated flag (`--cluster-cidr`, `--service-cluster-ip-range`);
/// empty when the flag is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CidrList {
    cidrs: [Option<Cidr>; 2],
    /// How many CIDRs the flag named (more than 2 is kept to be refused by [`NodeIpamConfig::pools`]).
    count: usize,
}

impl CidrList {
    /// The CIDRs, in the flag's order.
    pub fn iter(&self) -> impl Iterator<Item = Cidr> + '_ {
        self.cidrs.iter().flatten().copied()
    }

    /// How many CIDRs the flag named.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the flag named none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl FromStr for CidrList {
    type Err = CidrError;

    /// Parses `a[,b…]`; an empty string is an empty list.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut list = CidrList::default();
        if s.trim().is_empty() {
            return Ok(list);
        }
        for (i, part) in s.split(',').enumerate() {
            let cidr: Cidr = part.parse()?;
            if let Some(slot) = list.cidrs.get_mut(i) {
                *slot = Some(cidr);
            }
            list.count += 1;
        }
        Ok(list)
    }
}

/// The flags of the node-ipam controller, as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeIpamConfig {
    /// `--allocate-node-cidrs` (default false): without it the controller does nothing, as
    /// kube-controller-manager does not start it.
    pub allocate_node_cidrs: bool,
    /// `--cluster-cidr`: one CIDR, or two of different families (dual-stack).
    pub cluster_cidr: CidrList,
    /// `--node-cidr-mask-size` (0: unset); single-stack only.
    pub node_cidr_mask_size: u8,
    /// `--node-cidr-mask-size-ipv4` (0: unset, meaning 24).
    pub node_cidr_mask_size_ipv4: u8,
    /// `--node-cidr-mask-size-ipv6` (0: unset, meaning 64).
    pub node_cidr_mask_size_ipv6: u8,
    /// `--service-cluster-ip-range`: ranges no node may get a piece of.
    pub service_cluster_ip_range: CidrList,
    /// `--cidr-allocator-type` is `RangeAllocator` (the only one supported; `CloudAllocator` needs a
    /// cloud provider).
    pub range_allocator: bool,
}

impl Default for NodeIpamConfig {
    fn default() -> Self {
        Self {
            allocate_node_cidrs: false,
            cluster_cidr: CidrList::default(),
            node_cidr_mask_size: 0,
            node_cidr_mask_size_ipv4: 0,
            node_cidr_mask_size_ipv6: 0,
            service_cluster_ip_range: CidrList::default(),
            range_allocator: true,
        }
    }
}

/// Why the node-ipam flags are refused (kube-controller-manager's words where it has them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `--cidr-allocator-type` other than `RangeAllocator`.
    #[error(
        "--cidr-allocator-type: only RangeAllocator is supported (CloudAllocator needs a cloud provider)"
    )]
    AllocatorType,
    /// `--allocate-node-cidrs` without `--cluster-cidr`.
    #[error("--allocate-node-cidrs needs --cluster-cidr")]
    NoClusterCidr,
    /// Two cluster CIDRs of one family.
    #[error(
        "len of ClusterCIDRs==2 and they are not configured as dual stack (at least one from each IPFamily"
    )]
    NotDualStack,
    /// More than two cluster CIDRs.
    #[error("length of clusterCIDRs is:{0} more than max allowed of 2")]
    TooManyClusterCidrs(usize),
    /// Two service ranges of one family, or more than two.
    #[error("serviceCIDR and secondaryServiceCIDR are not dualstack (from different IPfamiliies)")]
    ServiceNotDualStack,
    /// A mask flag that does not fit the cluster's families.
    #[error("{0}")]
    MaskFlags(&'static str),
    /// A node mask shorter than its cluster CIDR's, longer than the family's, or (IPv6) more than 16
    /// bits longer than the cluster's.
    #[error("node CIDR mask size /{mask} does not fit cluster CIDR {cluster}")]
    MaskSize {
        /// The cluster CIDR.
        cluster: String,
        /// The node mask.
        mask: u8,
    },
}

/// One cluster CIDR and the size of the ranges nodes get from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// The cluster CIDR.
    pub cluster: Cidr,
    /// The prefix length of each node's range.
    pub node_mask: u8,
}

impl NodeIpamConfig {
    /// Checks the flags; [`Self::pools`] with its error dropped.
    ///
    /// # Errors
    /// [`ConfigError`] for the first bad flag.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.range_allocator {
            return Err(ConfigError::AllocatorType);
        }
        if self.allocate_node_cidrs {
            self.pools()?;
        }
        let services = &self.service_cluster_ip_range;
        if services.len() > 2 {
            return Err(ConfigError::ServiceNotDualStack);
        }
        let families: Vec<bool> = services.iter().map(|c| c.is_ipv6()).collect();
        if families.len() == 2 && families[0] == families[1] {
            return Err(ConfigError::ServiceNotDualStack);
        }
        Ok(())
    }

    /// The pools nodes get ranges from, one per cluster CIDR in the flag's order (upstream
    /// `validateCIDRs` and `setNodeCIDRMaskSizes`).
    ///
    /// # Errors
    /// [`ConfigError`] when the cluster CIDRs or mask flags do not fit together.
    pub fn pools(&self) -> Result<Vec<Pool>, ConfigError> {
        let clusters: Vec<Cidr> = self.cluster_cidr.iter().collect();
        match self.cluster_cidr.len() {
            0 => return Err(ConfigError::NoClusterCidr),
            1 | 2 => {}
            n => return Err(ConfigError::TooManyClusterCidrs(n)),
        }
        let dual = clusters.len() == 2;
        if dual && clusters[0].is_ipv6() == clusters[1].is_ipv6() {
            return Err(ConfigError::NotDualStack);
        }
        let (mut v4, mut v6) = (
            DEFAULT_NODE_CIDR_MASK_SIZE_IPV4,
            DEFAULT_NODE_CIDR_MASK_SIZE_IPV6,
        );
        let (any, ipv4, ipv6) = (
            self.node_cidr_mask_size,
            self.node_cidr_mask_size_ipv4,
            self.node_cidr_mask_size_ipv6,
        );
        if dual {
            if any != 0 {
                return Err(ConfigError::MaskFlags(
                    "usage of --node-cidr-mask-size is not allowed with dual-stack clusters",
                ));
            }
        } else if any != 0 {
            if ipv4 != 0 || ipv6 != 0 {
                return Err(ConfigError::MaskFlags(
                    "usage of --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6 is not allowed if --node-cidr-mask-size is set. For dual-stack clusters please unset it and use IPFamily specific flags",
                ));
            }
            (v4, v6) = (any, any);
        } else if clusters[0].is_ipv6() && ipv4 != 0 {
            return Err(ConfigError::MaskFlags(
                "usage of --node-cidr-mask-size-ipv4 is not allowed for a single-stack IPv6 cluster",
            ));
        } else if !clusters[0].is_ipv6() && ipv6 != 0 {
            return Err(ConfigError::MaskFlags(
                "usage of --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster",
            ));
        }
        if any == 0 {
            if ipv4 != 0 {
                v4 = ipv4;
            }
            if ipv6 != 0 {
                v6 = ipv6;
            }
        }
        clusters
            .into_iter()
            .map(|cluster| {
                let node_mask = if cluster.is_ipv6() { v6 } else { v4 };
                let too_wide =
                    cluster.is_ipv6() && node_mask.saturating_sub(cluster.prefix()) > IPV6_MAX_DIFF;
                if cluster.subnet_count(node_mask).is_none() || too_wide {
                    return Err(ConfigError::MaskSize {
                        cluster: cluster.to_string(),
                        mask: node_mask,
                    });
                }
                Ok(Pool { cluster, node_mask })
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn config(cluster: &str) -> NodeIpamConfig {
        NodeIpamConfig {
            allocate_node_cidrs: true,
            cluster_cidr: cluster.parse().unwrap(),
            ..NodeIpamConfig::default()
        }
    }

    #[test]
    fn an_ipv4_cluster_gets_slash_24s_and_an_ipv6_one_slash_64s_by_default() {
        let pools = config("10.244.0.0/16,fd00::/48").pools().unwrap();
        assert_eq!(pools[0].node_mask, 24);
        assert_eq!(pools[1].node_mask, 64);
        let single = NodeIpamConfig {
            node_cidr_mask_size: 26,
            ..config("10.244.0.0/16")
        };
        assert_eq!(single.pools().unwrap()[0].node_mask, 26);
        let v4 = NodeIpamConfig {
            node_cidr_mask_size_ipv4: 25,
            ..config("10.244.0.0/16")
        };
        assert_eq!(v4.pools().unwrap()[0].node_mask, 25);
    }

    #[test]
    fn mask_flags_that_do_not_fit_the_families_are_refused() {
        let dual_any = NodeIpamConfig {
            node_cidr_mask_size: 24,
            ..config("10.244.0.0/16,fd00::/48")
        };
        assert!(matches!(dual_any.pools(), Err(ConfigError::MaskFlags(_))));
        let v6_on_v4 = NodeIpamConfig {
            node_cidr_mask_size_ipv6: 64,
            ..config("10.244.0.0/16")
        };
        assert!(matches!(v6_on_v4.pools(), Err(ConfigError::MaskFlags(_))));
        let too_big = config("10.244.0.0/25");
        assert!(matches!(too_big.pools(), Err(ConfigError::MaskSize { .. })));
        let too_many = config("fd00::/32");
        assert!(matches!(
            too_many.pools(),
            Err(ConfigError::MaskSize { .. })
        ));
    }

    #[test]
    fn cluster_cidrs_are_one_or_two_of_different_families() {
        assert_eq!(
            config("10.0.0.0/16,10.1.0.0/16").pools(),
            Err(ConfigError::NotDualStack)
        );
        assert_eq!(
            config("10.0.0.0/16,fd00::/48,10.1.0.0/16").pools(),
            Err(ConfigError::TooManyClusterCidrs(3))
        );
        assert_eq!(
            NodeIpamConfig::default().pools(),
            Err(ConfigError::NoClusterCidr)
        );
        assert_eq!(NodeIpamConfig::default().validate(), Ok(()));
        assert!("10.0.0.0/33".parse::<CidrList>().is_err());
        assert!("".parse::<CidrList>().unwrap().is_empty());
    }
}
