//! What the node simulator simulates: how many nodes, their size, and how fast pods progress.

use std::time::Duration;

use super::SimError;

/// Configuration of a [`NodeSimulator`](super::NodeSimulator). `Default` gives the documented values.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// How many nodes to simulate, named `{name_prefix}0 ..= {name_prefix}{nodes - 1}`.
    /// Default 3: enough for spreading and stop-node tests, cheap to heartbeat.
    pub nodes: usize,
    /// Prefix of the node names. Default `sim-node-`, so a real cluster's own nodes are never touched.
    pub name_prefix: String,
    /// `status.capacity.cpu` (and allocatable) of every node. Default `32`.
    pub cpu: String,
    /// `status.capacity.memory` (and allocatable) of every node. Default `256Gi`.
    pub memory: String,
    /// `status.capacity.pods` (and allocatable). Default 1000, not kubelet's 110: benchmarks put
    /// thousands of pods on a handful of simulated nodes. The simulator's binder does not enforce it.
    pub max_pods: u32,
    /// Delay between a pod being bound and it being reported Running and Ready (or Failed).
    /// Default 100 ms: fast tests, yet a controller still sees a Pending phase first, as on a real node.
    pub pod_ready_delay: Duration,
    /// How long a pod with `restartPolicy` Never or OnFailure runs before it is reported Succeeded.
    /// Default 1 s, so Job tests finish quickly but observe the Running phase.
    pub job_pod_duration: Duration,
    /// How often each node renews its Lease in `kube-node-lease`. Default 10 s, kubelet's default
    /// (`nodeLeaseDurationSeconds` 40 / 4).
    pub lease_renew_interval: Duration,
    /// `spec.leaseDurationSeconds` of the node Leases. Default 40, kubelet's default.
    pub lease_duration_seconds: i32,
    /// How often each node rewrites its Ready condition's `lastHeartbeatTime`. Default 60 s: kubelet
    /// reports an unchanged status every 5 min and relies on the Lease for liveness; a minute keeps
    /// the condition fresh for readers that look at it without flooding node watchers.
    pub status_interval: Duration,
    /// Whether the simulator gives each node a pod range (`spec.podCIDR`, a /20 of 10.128.0.0/9) at
    /// registration. Default true: pods get IPs with no node-ipam controller running. False: nodes
    /// register without one, for a node-ipam controller (`--allocate-node-cidrs`) to assign; a pod
    /// bound to a node without a range stays Pending (no IP, not Running) until the Node has one, as
    /// behind a network plugin waiting for its range. Either way pod IPs come from the Node's
    /// `spec.podCIDR` whoever set it (IPv4 only).
    pub assign_pod_cidrs: bool,
    /// How many API calls (binds, status patches, deletes) run at once. Default 16: keeps thousands of
    /// pending pods moving without a thundering herd against a small API server.
    pub max_concurrent_requests: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            name_prefix: "sim-node-".to_string(),
            cpu: "32".to_string(),
            memory: "256Gi".to_string(),
            max_pods: 1000,
            pod_ready_delay: Duration::from_millis(100),
            job_pod_duration: Duration::from_secs(1),
            lease_renew_interval: Duration::from_secs(10),
            lease_duration_seconds: 40,
            status_interval: Duration::from_secs(60),
            max_concurrent_requests: 16,
            assign_pod_cidrs: true,
        }
    }
}

impl SimConfig {
    /// Checks the values once at start-up.
    ///
    /// # Errors
    /// [`SimError::InvalidConfig`] for a zero interval, zero concurrency, an empty name prefix or more
    /// nodes than the simulated address ranges hold (2048).
    pub fn validate(&self) -> Result<(), SimError> {
        let invalid = |why: &str| Err(SimError::InvalidConfig(why.to_string()));
        if self.name_prefix.is_empty() {
            return invalid("name_prefix must not be empty");
        }
        if self.nodes > super::nodes::MAX_NODES {
            return invalid("at most 2048 nodes can be simulated");
        }
        if self.lease_renew_interval.is_zero() || self.status_interval.is_zero() {
            return invalid("heartbeat intervals must be greater than zero");
        }
        if self.lease_duration_seconds <= 0 {
            return invalid("lease_duration_seconds must be positive");
        }
        if self.max_concurrent_requests == 0 {
            return invalid("max_concurrent_requests must be at least 1");
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        SimConfig::default().validate().unwrap();
    }

    #[test]
    fn a_zero_heartbeat_interval_is_rejected() {
        let config = SimConfig {
            lease_renew_interval: Duration::ZERO,
            ..SimConfig::default()
        };
        assert!(matches!(config.validate(), Err(SimError::InvalidConfig(_))));
    }
}
