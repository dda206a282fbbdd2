//! The cluster's TTL as one worker last computed it from the cache: the node count and the step the
//! Nodes' annotations show ([`super::boundaries`]), reused for [`REFRESH`] so that a burst of Node
//! events does not list every Node once per event.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use flotilla_sdk::k8s_openapi::api::core::v1::Node;

use super::boundaries::{TTL_ANNOTATION, desired_ttl, step_of_ttl};

/// How long a computed TTL is reused. The TTL is a caching hint that changes only when the cluster
/// crosses a size boundary, and upstream itself leaves other Nodes at the old value until their next
/// update; a few seconds of staleness costs nothing.
pub const REFRESH: Duration = Duration::from_secs(5);

/// The last computed TTL of this worker; the mutex is never held across an await.
#[derive(Debug, Default)]
pub struct Census {
    last: Mutex<Option<(Instant, u64)>>,
}

impl Census {
    /// The TTL computed at most [`REFRESH`] before `now`, if any.
    pub fn fresh(&self, now: Instant) -> Option<u64> {
        let last = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.filter(|(at, _)| now.saturating_duration_since(*at) < REFRESH)
            .map(|(_, ttl)| ttl)
    }

    /// Remembers `ttl` as computed at `now`.
    pub fn record(&self, now: Instant, ttl: u64) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((now, ttl));
    }
}

/// The TTL of an annotation value, if it is a number (upstream's `getIntFromAnnotation`; a
/// negative or garbled value counts as none).
pub fn ttl_of(node: &Node) -> Option<u64> {
    node.metadata
        .annotations
        .as_ref()?
        .get(TTL_ANNOTATION)?
        .parse()
        .ok()
}

/// The cluster's TTL given all its Nodes: the step most Nodes' TTL names (ties: the larger TTL; none:
/// step 0, where upstream starts), moved by the node count.
pub fn cluster_ttl(nodes: &[Node]) -> u64 {
    let mut votes: HashMap<u64, usize> = HashMap::new();
    for ttl in nodes.iter().filter_map(ttl_of) {
        *votes.entry(ttl).or_default() += 1;
    }
    let previous = votes
        .into_iter()
        .filter_map(|(ttl, n)| Some((n, ttl, step_of_ttl(ttl)?)))
        .max()
        .map_or(0, |(_, _, step)| step);
    desired_ttl(nodes.len() as u64, previous)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn node(ttl: Option<&str>) -> Node {
        let mut node = Node::default();
        if let Some(ttl) = ttl {
            node.metadata.annotations = Some(BTreeMap::from([(
                TTL_ANNOTATION.to_owned(),
                ttl.to_owned(),
            )]));
        }
        node
    }

    #[test]
    fn a_small_cluster_has_a_ttl_of_zero_whatever_its_nodes_carry() {
        assert_eq!(cluster_ttl(&[node(None), node(Some("0"))]), 0);
        assert_eq!(cluster_ttl(&[]), 0);
        assert_eq!(cluster_ttl(&[node(Some("300")), node(Some("x"))]), 0);
    }

    #[test]
    fn a_shrunk_cluster_keeps_the_step_its_nodes_carry_within_the_hysteresis() {
        let nodes: Vec<Node> = (0..95).map(|_| node(Some("15"))).collect();
        assert_eq!(cluster_ttl(&nodes), 15);
        let fresh: Vec<Node> = (0..95).map(|_| node(None)).collect();
        assert_eq!(cluster_ttl(&fresh), 0);
    }

    #[test]
    fn a_computed_ttl_is_reused_only_within_the_refresh_period() {
        let census = Census::default();
        let t0 = Instant::now();
        assert_eq!(census.fresh(t0), None);
        census.record(t0, 15);
        assert_eq!(census.fresh(t0 + Duration::from_secs(1)), Some(15));
        assert_eq!(census.fresh(t0 + REFRESH), None);
    }
}
