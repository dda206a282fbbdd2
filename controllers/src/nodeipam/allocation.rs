//! The range allocator's decision, as a pure function of every Node (upstream `rangeAllocator` and
//! `cidrset`, without their in-memory state): which ranges are taken — by a Node's `podCIDRs` or a
//! service range — and which free range, per cluster CIDR, each Node without one gets.
//!
//! Free ranges are handed out lowest first, so a deleted Node's range is the next one given.
//! Upstream's `cidrset` walks on from its last allocation instead and comes back to freed ranges
//! only after wrapping around; the set of ranges in use is the same either way, and the lowest-first
//! choice needs no memory between passes.

use flotilla_sdk::k8s_openapi::api::core::v1::Node;

use super::cidr::Cidr;
use super::config::Pool;

/// What one pass should write.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Nodes to give ranges, in creation order.
    pub assignments: Vec<Assignment>,
    /// Nodes for which some cluster CIDR has no free range left (upstream's `CIDRNotAvailable`).
    pub unavailable: Vec<String>,
    /// `podCIDRs` entries that are not CIDRs (`node`, value): they occupy nothing, as upstream's
    /// allocator could not occupy them either.
    pub garbage: Vec<(String, String)>,
}

/// The ranges one Node gets, one per cluster CIDR in the flag's order (`spec.podCIDRs`; the first is
/// also `spec.podCIDR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The Node's name.
    pub node: String,
    /// The Node's resourceVersion the plan was made from: the write is conditional on it.
    pub resource_version: Option<String>,
    /// The ranges.
    pub cidrs: Vec<String>,
}

/// The ranges of one pool in use: sorted, disjoint, inclusive spans of subnet indexes.
#[derive(Debug)]
struct Occupancy {
    pool: Pool,
    count: u128,
    spans: Vec<(u128, u128)>,
}

impl Occupancy {
    fn new(pool: Pool) -> Self {
        Self {
            pool,
            count: pool.cluster.subnet_count(pool.node_mask).unwrap_or(0),
            spans: Vec::new(),
        }
    }

    /// Marks the ranges `cidr` overlaps as taken (upstream `cidrset.Occupy`).
    fn occupy(&mut self, cidr: &Cidr) {
        if let Some(span) = self.pool.cluster.subnet_span(self.pool.node_mask, cidr) {
            self.insert(span);
        }
    }

    fn insert(&mut self, (first, last): (u128, u128)) {
        self.spans.push((first, last));
        self.spans.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(self.spans.len());
        for &(a, b) in &self.spans {
            match merged.last_mut() {
                Some(prev) if a <= prev.1.saturating_add(1) => prev.1 = prev.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        self.spans = merged;
    }

    /// Takes the lowest free range, if any is left.
    fn take(&mut self) -> Option<Cidr> {
        let mut candidate = 0u128;
        for &(a, b) in &self.spans {
            if candidate < a {
                break;
            }
            candidate = candidate.max(b.saturating_add(1));
        }
        if candidate >= self.count {
            return None;
        }
        self.insert((candidate, candidate));
        self.pool.cluster.subnet(self.pool.node_mask, candidate)
    }
}

/// Whether `node` waits for ranges: it has none and is not being deleted.
pub fn pending(node: &Node) -> bool {
    let spec = node.spec.as_ref();
    let has_cidrs = spec.is_some_and(|s| {
        s.pod_cidrs.as_ref().is_some_and(|c| !c.is_empty())
            || s.pod_cidr.as_ref().is_some_and(|c| !c.is_empty())
    });
    !has_cidrs && node.metadata.deletion_timestamp.is_none()
}

/// The Node's ranges as written (`spec.podCIDRs`, or the single `spec.podCIDR` of an old Node).
fn node_cidrs(node: &Node) -> Vec<String> {
    let Some(spec) = node.spec.as_ref() else {
        return Vec::new();
    };
    match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(list), _) if !list.is_empty() => list.clone(),
        (_, Some(one)) if !one.is_empty() => vec![one.clone()],
        _ => Vec::new(),
    }
}

/// The plan for `nodes` (all of the cluster's, read consistently) over `pools`, with the
/// `service_ranges` reserved where they overlap a pool (upstream `filterOutServiceRange`).
pub fn plan(pools: &[Pool], service_ranges: &[Cidr], nodes: &[Node]) -> Plan {
    let mut result = Plan::default();
    let mut occupancy: Vec<Occupancy> = pools.iter().copied().map(Occupancy::new).collect();
    for occ in &mut occupancy {
        for range in service_ranges {
            occ.occupy(range);
        }
    }
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        for value in node_cidrs(node) {
            match value.parse::<Cidr>() {
                Ok(cidr) => occupancy.iter_mut().for_each(|occ| occ.occupy(&cidr)),
                Err(_) => result.garbage.push((name.clone(), value)),
            }
        }
    }
    let mut waiting: Vec<&Node> = nodes.iter().filter(|n| pending(n)).collect();
    waiting.sort_by(|a, b| {
        let key = |n: &Node| {
            (
                n.metadata.creation_timestamp.as_ref().map(|t| t.0),
                n.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    for node in waiting {
        let name = node.metadata.name.clone().unwrap_or_default();
        // A node gets a range from every pool or none: take them, give them back on a shortfall.
        let mut taken = Vec::with_capacity(occupancy.len());
        for occ in &mut occupancy {
            match occ.take() {
                Some(cidr) => taken.push(cidr),
                None => break,
            }
        }
        if taken.len() < occupancy.len() {
            for (occ, cidr) in occupancy.iter_mut().zip(&taken) {
                occ.release(cidr);
            }
            result.unavailable.push(name);
            continue;
        }
        result.assignments.push(Assignment {
            node: name,
            resource_version: node.metadata.resource_version.clone(),
            cidrs: taken.iter().map(ToString::to_string).collect(),
        });
    }
    result
}

impl Occupancy {
    /// Gives back a range [`Self::take`] took in this pass.
    fn release(&mut self, cidr: &Cidr) {
        let Some((first, last)) = self.pool.cluster.subnet_span(self.pool.node_mask, cidr) else {
            return;
        };
        let mut kept = Vec::with_capacity(self.spans.len() + 1);
        for &(a, b) in &self.spans {
            if b < first || a > last {
                kept.push((a, b));
                continue;
            }
            if a < first {
                kept.push((a, first - 1));
            }
            if b > last {
                kept.push((last + 1, b));
            }
        }
        self.spans = kept;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashSet;

    use flotilla_sdk::k8s_openapi::api::core::v1::NodeSpec;
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use flotilla_sdk::k8s_openapi::jiff::Timestamp;

    use super::*;

    fn pool(cluster: &str, mask: u8) -> Pool {
        Pool {
            cluster: cluster.parse().unwrap(),
            node_mask: mask,
        }
    }

    fn node(name: &str, created: i64, cidrs: &[&str]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        node.metadata.resource_version = Some("7".into());
        node.metadata.creation_timestamp = Some(Time(
            Timestamp::from_second(1_700_000_000 + created).unwrap(),
        ));
        if !cidrs.is_empty() {
            node.spec = Some(NodeSpec {
                pod_cidr: Some(cidrs[0].into()),
                pod_cidrs: Some(cidrs.iter().map(|c| c.to_string()).collect()),
                ..NodeSpec::default()
            });
        }
        node
    }

    #[test]
    fn nodes_without_ranges_get_the_lowest_free_ones_in_creation_order() {
        let nodes = [
            node("b", 2, &[]),
            node("a", 1, &[]),
            node("old", 0, &["10.244.0.0/24"]),
        ];
        let plan = plan(&[pool("10.244.0.0/16", 24)], &[], &nodes);
        let got: Vec<(&str, &str)> = plan
            .assignments
            .iter()
            .map(|a| (a.node.as_str(), a.cidrs[0].as_str()))
            .collect();
        assert_eq!(got, [("a", "10.244.1.0/24"), ("b", "10.244.2.0/24")]);
        assert_eq!(plan.assignments[0].resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn a_service_range_inside_the_cluster_cidr_is_never_given_out() {
        let service: Cidr = "10.244.0.0/23".parse().unwrap();
        let nodes = [node("a", 1, &[])];
        let plan = plan(&[pool("10.244.0.0/16", 24)], &[service], &nodes);
        assert_eq!(plan.assignments[0].cidrs, ["10.244.2.0/24"]);
    }

    #[test]
    fn a_dual_stack_node_gets_one_range_per_family_in_the_flags_order() {
        let pools = [pool("fd00::/48", 64), pool("10.244.0.0/16", 24)];
        let plan = plan(&pools, &[], &[node("a", 1, &[])]);
        assert_eq!(plan.assignments[0].cidrs, ["fd00::/64", "10.244.0.0/24"]);
    }

    #[test]
    fn a_full_pool_leaves_the_rest_unavailable_and_takes_nothing_from_the_other_pool() {
        let pools = [pool("10.0.0.0/16", 24), pool("10.9.0.0/23", 24)];
        let nodes: Vec<Node> = (0..3).map(|i| node(&format!("n{i}"), i, &[])).collect();
        let plan = plan(&pools, &[], &nodes);
        assert_eq!(plan.assignments.len(), 2);
        assert_eq!(plan.unavailable, ["n2"]);
    }

    #[test]
    fn no_two_nodes_ever_share_a_range_and_a_freed_range_is_given_again() {
        let pools = [pool("10.0.0.0/20", 24)];
        let mut nodes: Vec<Node> = Vec::new();
        for round in 0..20 {
            nodes.push(node(&format!("n{round}"), round, &[]));
            if round % 3 == 2 {
                nodes.remove(0);
            }
            let plan = plan(&pools, &[], &nodes);
            for a in plan.assignments {
                let n = nodes
                    .iter_mut()
                    .find(|n| n.metadata.name.as_ref() == Some(&a.node));
                let n = n.unwrap();
                n.spec = Some(NodeSpec {
                    pod_cidrs: Some(a.cidrs.clone()),
                    ..NodeSpec::default()
                });
            }
            let all: Vec<String> = nodes.iter().flat_map(node_cidrs).collect();
            let distinct: HashSet<&String> = all.iter().collect();
            assert_eq!(distinct.len(), all.len(), "round {round}: {all:?}");
        }
        let all: Vec<String> = nodes.iter().flat_map(node_cidrs).collect();
        assert!(
            all.contains(&"10.0.0.0/24".to_owned()),
            "n0's range came back: {all:?}"
        );
    }

    #[test]
    fn garbage_in_pod_cidrs_is_reported_and_occupies_nothing() {
        let plan = plan(
            &[pool("10.0.0.0/16", 24)],
            &[],
            &[node("bad", 0, &["nope"]), node("a", 1, &[])],
        );
        assert_eq!(plan.garbage, [("bad".to_owned(), "nope".to_owned())]);
        assert_eq!(plan.assignments[0].cidrs, ["10.0.0.0/24"]);
    }
}
