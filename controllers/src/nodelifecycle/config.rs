//! The node-lifecycle controller's settings: kube-controller-manager's flags of the same names, with
//! its v1.32 defaults, checked once at start-up.

use std::time::Duration;

/// `--node-monitor-grace-period`, `--node-startup-grace-period`, `--node-monitor-period`,
/// `--node-eviction-rate`, `--secondary-node-eviction-rate`, `--large-cluster-size-threshold` and
/// `--unhealthy-zone-threshold`, as kube-controller-manager v1.32 defaults them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// How long a node that reported once may go without a heartbeat (a Ready condition's
    /// `lastHeartbeatTime` or its Lease's `renewTime` seen to change) before it is marked Unknown.
    /// Default 50 s (v1.32 raised it from 40 s so a kubelet gets its five status retries).
    pub node_monitor_grace_period: Duration,
    /// The same for a node that never posted a Ready condition. Default 60 s.
    pub node_startup_grace_period: Duration,
    /// Upstream's pass period; here how long a node is seen not ready before its NoExecute taint is
    /// decided, and how often a node held back by its zone's state is looked at again. Default 5 s.
    pub node_monitor_period: Duration,
    /// Nodes per second that may get a NoExecute taint in a zone that is not partially disrupted.
    /// Default 0.1 (one every 10 s).
    pub node_eviction_rate: f32,
    /// The same in a partially disrupted zone larger than `large_cluster_size_threshold`. Default 0.01.
    pub secondary_node_eviction_rate: f32,
    /// A partially disrupted zone of at most this many nodes taints none. Default 50.
    pub large_cluster_size_threshold: i32,
    /// The share of not-ready nodes (and more than two) from which a zone is partially disrupted.
    /// Default 0.55.
    pub unhealthy_zone_threshold: f32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            node_monitor_grace_period: Duration::from_secs(50),
            node_startup_grace_period: Duration::from_secs(60),
            node_monitor_period: Duration::from_secs(5),
            node_eviction_rate: 0.1,
            secondary_node_eviction_rate: 0.01,
            large_cluster_size_threshold: 50,
            unhealthy_zone_threshold: 0.55,
        }
    }
}

/// Why the settings are refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A period is zero.
    #[error("--{0} must be greater than zero")]
    ZeroPeriod(&'static str),
    /// A rate or threshold is negative or not a number.
    #[error("--{0} must be a number of at least zero")]
    Negative(&'static str),
}

impl Config {
    /// Checks the settings once, at start-up.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first bad flag.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (flag, period) in [
            ("node-monitor-grace-period", self.node_monitor_grace_period),
            ("node-startup-grace-period", self.node_startup_grace_period),
            ("node-monitor-period", self.node_monitor_period),
        ] {
            if period.is_zero() {
                return Err(ConfigError::ZeroPeriod(flag));
            }
        }
        for (flag, value) in [
            ("node-eviction-rate", self.node_eviction_rate),
            (
                "secondary-node-eviction-rate",
                self.secondary_node_eviction_rate,
            ),
            ("unhealthy-zone-threshold", self.unhealthy_zone_threshold),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ConfigError::Negative(flag));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_kube_controller_manager_v1_32s_and_valid() {
        let c = Config::default();
        assert_eq!(c.node_monitor_grace_period, Duration::from_secs(50));
        assert_eq!(c.node_startup_grace_period, Duration::from_secs(60));
        assert_eq!(c.node_monitor_period, Duration::from_secs(5));
        assert_eq!(c.large_cluster_size_threshold, 50);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn a_zero_period_or_a_negative_rate_is_refused() {
        let zero = Config {
            node_monitor_period: Duration::ZERO,
            ..Config::default()
        };
        assert_eq!(
            zero.validate(),
            Err(ConfigError::ZeroPeriod("node-monitor-period"))
        );
        let negative = Config {
            node_eviction_rate: -1.0,
            ..Config::default()
        };
        assert_eq!(
            negative.validate(),
            Err(ConfigError::Negative("node-eviction-rate"))
        );
    }
}
