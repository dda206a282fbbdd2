//! Upstream's table of TTLs by cluster size (`ttlBoundaries`) and the hysteresis between its steps:
//! the step moves up once the node count exceeds its `size_max`, down once it falls below its
//! `size_min`, so a cluster hovering at a boundary does not flap.

/// The annotation kubelets read (`v1.ObjectTTLAnnotationKey`).
pub const TTL_ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";

/// One step of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary {
    /// Below this many nodes the cluster moves one step down.
    pub size_min: u64,
    /// Above this many nodes the cluster moves one step up.
    pub size_max: u64,
    /// The TTL of the step, in seconds.
    pub ttl_seconds: u64,
}

/// Upstream's table, steps overlapping by 10% for the hysteresis; the last has no upper bound
/// (upstream's `math.MaxInt32`).
pub const BOUNDARIES: [Boundary; 5] = [
    Boundary {
        size_min: 0,
        size_max: 100,
        ttl_seconds: 0,
    },
    Boundary {
        size_min: 90,
        size_max: 500,
        ttl_seconds: 15,
    },
    Boundary {
        size_min: 450,
        size_max: 1000,
        ttl_seconds: 30,
    },
    Boundary {
        size_min: 900,
        size_max: 2000,
        ttl_seconds: 60,
    },
    Boundary {
        size_min: 1800,
        size_max: i32::MAX as u64,
        ttl_seconds: 300,
    },
];

/// The step whose TTL is `ttl_seconds`, if one is.
pub fn step_of_ttl(ttl_seconds: u64) -> Option<usize> {
    BOUNDARIES.iter().position(|b| b.ttl_seconds == ttl_seconds)
}

/// The step a cluster of `nodes` nodes is in, coming from step `previous` (0 for a cluster with no
/// history, as upstream starts): up while the count exceeds the step's `size_max`, down while it is
/// below its `size_min` — where upstream's handlers, seeing one node at a time, would have moved it.
pub fn step(nodes: u64, previous: usize) -> usize {
    let mut step = previous.min(BOUNDARIES.len() - 1);
    while step + 1 < BOUNDARIES.len() && nodes > BOUNDARIES[step].size_max {
        step += 1;
    }
    while step > 0 && nodes < BOUNDARIES[step].size_min {
        step -= 1;
    }
    step
}

/// The TTL, in seconds, of a cluster of `nodes` nodes coming from step `previous`.
pub fn desired_ttl(nodes: u64, previous: usize) -> u64 {
    BOUNDARIES[step(nodes, previous)].ttl_seconds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_without_history_gets_the_ttl_of_its_size() {
        assert_eq!(desired_ttl(0, 0), 0);
        assert_eq!(desired_ttl(100, 0), 0);
        assert_eq!(desired_ttl(101, 0), 15);
        assert_eq!(desired_ttl(500, 0), 15);
        assert_eq!(desired_ttl(501, 0), 30);
        assert_eq!(desired_ttl(1001, 0), 60);
        assert_eq!(desired_ttl(2001, 0), 300);
        assert_eq!(desired_ttl(100_000, 0), 300);
    }

    #[test]
    fn a_cluster_shrinking_keeps_its_step_until_it_falls_below_the_steps_minimum() {
        // Grown past 100: 15 s, and it stays 15 s down to 90 nodes.
        assert_eq!(desired_ttl(95, 1), 15);
        assert_eq!(desired_ttl(90, 1), 15);
        assert_eq!(desired_ttl(89, 1), 0);
        assert_eq!(desired_ttl(460, 2), 30);
        assert_eq!(desired_ttl(449, 2), 15);
        // A collapse moves as many steps as upstream's node-by-node handlers would have.
        assert_eq!(desired_ttl(10, 4), 0);
    }

    #[test]
    fn a_cluster_growing_into_the_overlap_keeps_the_lower_step() {
        assert_eq!(desired_ttl(95, 0), 0);
        assert_eq!(desired_ttl(950, 2), 30);
        assert_eq!(step(1900, 3), 3);
    }

    #[test]
    fn each_ttl_names_its_step_and_an_unknown_one_none() {
        assert_eq!(step_of_ttl(0), Some(0));
        assert_eq!(step_of_ttl(300), Some(4));
        assert_eq!(step_of_ttl(7), None);
        assert_eq!(step(5, 99), 0, "an out-of-range step is clamped");
    }
}
