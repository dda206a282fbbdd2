//! What the built-in controllers take besides their concurrency: kube-controller-manager's flags of
//! the same names, which `flotilla worker` passes on through [`crate::Builtin::controller_with`].

use std::time::Duration;

use crate::cronjob::{ClockError, REAL_MINUTE, ScheduleClock};
use crate::endpointslice::{
    DEFAULT_MAX_ENDPOINTS_PER_SLICE, DEFAULT_UPDATES_BATCH_PERIOD, MAX_MAX_ENDPOINTS_PER_SLICE,
};
use crate::nodeipam::{ConfigError as NodeIpamError, NodeIpamConfig};
use crate::nodelifecycle::{Config as NodeLifecycleConfig, ConfigError as NodeLifecycleError};
use crate::podgc::DEFAULT_TERMINATED_POD_GC_THRESHOLD;

/// Settings of the built-in controllers, each named and defaulted like the kube-controller-manager
/// flag it comes from.
/// (`PartialEq` only: the node-lifecycle rates are floats.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// `--terminated-pod-gc-threshold` (default 12500): how many terminated pods may exist before the
    /// `podgc` controller deletes the oldest; 0 or less keeps them all, as upstream.
    pub terminated_pod_gc_threshold: i32,
    /// `--cronjob-minute` (default 60s; hidden, for tests only, no kube-controller-manager
    /// counterpart): how long one schedule minute of the `cronjob` controller lasts, so end-to-end
    /// tests see minute-grained schedules fire within seconds. At the default the controller runs
    /// on the wall clock, exactly as upstream.
    pub cronjob_minute: Duration,
    /// `--max-endpoints-per-slice` (default 100, 1 ..= 1000 as kube-controller-manager validates
    /// it): how many endpoints the `endpointslice` controller puts in one slice.
    pub max_endpoints_per_slice: i32,
    /// `--endpointslice-updates-batch-period` (default 0): accepted for kube-controller-manager
    /// compatibility, not applied (see the `endpointslice` controller's documentation).
    pub endpointslice_updates_batch_period: Duration,
    /// `--endpoint-updates-batch-period` (default 0): how long the `endpoint` controller puts off a
    /// sync caused by a pod change, so pod changes within it land in one Endpoints write.
    pub endpoint_updates_batch_period: Duration,
    /// `--mirroring-max-endpoints-per-subset` (default 1000): how many addresses of one Endpoints
    /// subset the `endpointslicemirroring` controller mirrors.
    pub mirroring_max_endpoints_per_subset: i32,
    /// `--mirroring-endpointslice-updates-batch-period` (default 0): how long the
    /// `endpointslicemirroring` controller puts off a sync caused by a change of a mirrored slice.
    pub mirroring_endpointslice_updates_batch_period: Duration,
    /// The `nodelifecycle` controller's flags (`--node-monitor-grace-period`,
    /// `--node-eviction-rate`, …), with kube-controller-manager v1.32's defaults.
    pub node_lifecycle: NodeLifecycleConfig,
    /// The `nodeipam` controller's flags (`--allocate-node-cidrs`, `--cluster-cidr`,
    /// `--node-cidr-mask-size[-ipv4|-ipv6]`, `--service-cluster-ip-range`,
    /// `--cidr-allocator-type`), with kube-controller-manager's defaults (allocation off).
    pub node_ipam: NodeIpamConfig,
}

/// Why settings are refused at start-up.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// `--cronjob-minute` is outside 1ms ..= 60s.
    #[error("invalid --cronjob-minute")]
    CronjobMinute(#[source] ClockError),
    /// `--max-endpoints-per-slice` is outside 1 ..= 1000.
    #[error("invalid --max-endpoints-per-slice {0}: must be between 1 and 1000")]
    MaxEndpointsPerSlice(i32),
    /// `--mirroring-max-endpoints-per-subset` is outside 1 ..= 1000.
    #[error("invalid --mirroring-max-endpoints-per-subset {0}: must be between 1 and 1000")]
    MirroringMaxEndpointsPerSubset(i32),
    /// A `nodelifecycle` flag is out of range.
    #[error("invalid node-lifecycle settings")]
    NodeLifecycle(#[source] NodeLifecycleError),
    /// The node-ipam flags do not fit together.
    #[error("invalid node-ipam settings")]
    NodeIpam(#[source] NodeIpamError),
}

impl Settings {
    /// Checks the settings once, at start-up, so a bad flag stops the worker instead of being
    /// replaced by a default later.
    ///
    /// # Errors
    /// [`SettingsError`] naming the first bad flag.
    pub fn validate(&self) -> Result<(), SettingsError> {
        ScheduleClock::with_minute(self.cronjob_minute).map_err(SettingsError::CronjobMinute)?;
        if !(1..=MAX_MAX_ENDPOINTS_PER_SLICE).contains(&self.max_endpoints_per_slice) {
            return Err(SettingsError::MaxEndpointsPerSlice(
                self.max_endpoints_per_slice,
            ));
        }
        if !(1..=1000).contains(&self.mirroring_max_endpoints_per_subset) {
            return Err(SettingsError::MirroringMaxEndpointsPerSubset(
                self.mirroring_max_endpoints_per_subset,
            ));
        }
        self.node_lifecycle
            .validate()
            .map_err(SettingsError::NodeLifecycle)?;
        self.node_ipam.validate().map_err(SettingsError::NodeIpam)?;
        Ok(())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            terminated_pod_gc_threshold: DEFAULT_TERMINATED_POD_GC_THRESHOLD,
            cronjob_minute: REAL_MINUTE,
            max_endpoints_per_slice: DEFAULT_MAX_ENDPOINTS_PER_SLICE,
            endpointslice_updates_batch_period: DEFAULT_UPDATES_BATCH_PERIOD,
            node_lifecycle: NodeLifecycleConfig::default(),
            node_ipam: NodeIpamConfig::default(),
            endpoint_updates_batch_period: Duration::ZERO,
            mirroring_max_endpoints_per_subset: 1000,
            mirroring_endpointslice_updates_batch_period: Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_a_zero_cronjob_minute_is_not() {
        assert_eq!(Settings::default().validate(), Ok(()));
        let zero = Settings {
            cronjob_minute: Duration::ZERO,
            ..Settings::default()
        };
        assert!(matches!(
            zero.validate(),
            Err(SettingsError::CronjobMinute(_))
        ));
    }

    #[test]
    fn max_endpoints_per_slice_is_bounded_like_kube_controller_managers() {
        for (value, ok) in [(0, false), (1, true), (1000, true), (1001, false)] {
            let settings = Settings {
                max_endpoints_per_slice: value,
                ..Settings::default()
            };
            assert_eq!(settings.validate().is_ok(), ok, "{value}");
        }
    }
}
