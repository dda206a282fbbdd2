//! `flotilla worker`: a worker process running the built-in controllers that `--controllers` enables,
//! with one `--concurrent-<flag>-syncs` flag per entry of the controllers' registry.

use std::collections::BTreeMap;

use flotilla_controllers::{
    CidrList, NodeIpamConfig, NodeLifecycleSettings, RANGE_ALLOCATOR, Settings, builtins,
};
use flotilla_sdk::DynController;
use flotilla_worker::{
    SelectionError, WorkerFlags, concurrency_arg, concurrency_value, select_controllers,
};

/// Flags of `flotilla worker`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    worker: WorkerFlags,
    /// Controllers to run, kube-controller-manager's syntax: `*` (all), `foo` (enable), `-foo` (disable).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    controllers: Vec<String>,
    #[command(flatten)]
    concurrency: BuiltinConcurrency,
    /// How many terminated pods (Succeeded or Failed) may exist before the podgc controller deletes
    /// the oldest; 0 or less keeps them all (kube-controller-manager's flag and default).
    #[arg(long, default_value_t = Settings::default().terminated_pod_gc_threshold, allow_negative_numbers = true)]
    terminated_pod_gc_threshold: i32,
    /// TESTS ONLY: how long one schedule minute of the cronjob controller lasts (1ms to 60s), so
    /// end-to-end tests see `*/1 * * * *` fire every few seconds; everything the controller writes
    /// is then in sped-up time. Hidden; the default is the wall clock, as kube-controller-manager.
    #[arg(long, hide = true, default_value = "60s", value_parser = flotilla_common::parse_duration)]
    cronjob_minute: std::time::Duration,
    /// The most endpoints the endpointslice controller puts in one EndpointSlice, 1 to 1000
    /// (kube-controller-manager's flag and default).
    #[arg(long, default_value_t = Settings::default().max_endpoints_per_slice, allow_negative_numbers = true)]
    max_endpoints_per_slice: i32,
    /// kube-controller-manager's batching of pod changes into EndpointSlice updates; accepted for
    /// compatibility and not applied: the fleet's queue already coalesces a Service's changes while
    /// it waits or syncs.
    #[arg(long, default_value = "0s", value_parser = flotilla_common::parse_duration)]
    endpointslice_updates_batch_period: std::time::Duration,
    /// How long the endpoint controller puts off a sync caused by a pod change, so the pod changes
    /// within it land in one Endpoints write (kube-controller-manager's flag and default).
    #[arg(long, default_value = "0s", value_parser = flotilla_common::parse_duration)]
    endpoint_updates_batch_period: std::time::Duration,
    /// The most addresses of one Endpoints subset the endpointslicemirroring controller mirrors, 1
    /// to 1000 (kube-controller-manager's flag and default).
    #[arg(long, default_value_t = Settings::default().mirroring_max_endpoints_per_subset, allow_negative_numbers = true)]
    mirroring_max_endpoints_per_subset: i32,
    /// How long the endpointslicemirroring controller puts off a sync caused by a change of a
    /// mirrored EndpointSlice (kube-controller-manager's flag and default).
    #[arg(long, default_value = "0s", value_parser = flotilla_common::parse_duration)]
    mirroring_endpointslice_updates_batch_period: std::time::Duration,
    /// How long a node that reported once may go without a heartbeat (its Ready condition's or its
    /// Lease's) before the nodelifecycle controller marks it Unknown (kube-controller-manager's flag
    /// and v1.32 default).
    #[arg(long, default_value = "50s", value_parser = flotilla_common::parse_duration)]
    node_monitor_grace_period: std::time::Duration,
    /// The same for a node that never posted its status (kube-controller-manager's flag and default).
    #[arg(long, default_value = "1m0s", value_parser = flotilla_common::parse_duration)]
    node_startup_grace_period: std::time::Duration,
    /// How long a node is seen not ready before its NoExecute taint is decided, and how often a node
    /// held back by its zone's state is looked at again (kube-controller-manager's flag and default).
    #[arg(long, default_value = "5s", value_parser = flotilla_common::parse_duration)]
    node_monitor_period: std::time::Duration,
    /// Nodes per second tainted NoExecute in a healthy zone (kube-controller-manager's flag and
    /// default).
    #[arg(long, default_value_t = Settings::default().node_lifecycle.node_eviction_rate)]
    node_eviction_rate: f32,
    /// Nodes per second tainted NoExecute in a partially disrupted zone larger than
    /// --large-cluster-size-threshold (kube-controller-manager's flag and default).
    #[arg(long, default_value_t = Settings::default().node_lifecycle.secondary_node_eviction_rate)]
    secondary_node_eviction_rate: f32,
    /// A partially disrupted zone of at most this many nodes gets no NoExecute taint
    /// (kube-controller-manager's flag and default).
    #[arg(long, default_value_t = Settings::default().node_lifecycle.large_cluster_size_threshold)]
    large_cluster_size_threshold: i32,
    /// The share of not-ready nodes (and more than two) from which a zone is partially disrupted
    /// (kube-controller-manager's flag and default).
    #[arg(long, default_value_t = Settings::default().node_lifecycle.unhealthy_zone_threshold)]
    unhealthy_zone_threshold: f32,
    /// Whether the nodeipam controller gives Nodes pod CIDRs from --cluster-cidr
    /// (kube-controller-manager's flag and default; off, the controller does nothing).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    allocate_node_cidrs: bool,
    /// CIDR range of the Pods in the cluster, or two of different families for dual-stack; needed by
    /// --allocate-node-cidrs (kube-controller-manager's flag).
    #[arg(long, default_value = "")]
    cluster_cidr: CidrList,
    /// Mask size of each Node's CIDR in a single-stack cluster; 0: 24 for IPv4, 64 for IPv6
    /// (kube-controller-manager's flag and default).
    #[arg(long, default_value_t = 0)]
    node_cidr_mask_size: u8,
    /// Mask size of each Node's IPv4 CIDR; 0: 24 (kube-controller-manager's flag and default).
    #[arg(long, default_value_t = 0)]
    node_cidr_mask_size_ipv4: u8,
    /// Mask size of each Node's IPv6 CIDR; 0: 64 (kube-controller-manager's flag and default).
    #[arg(long, default_value_t = 0)]
    node_cidr_mask_size_ipv6: u8,
    /// The Services' CIDR range(s), at most one per family: Node CIDRs never overlap them
    /// (kube-controller-manager's flag).
    #[arg(long, default_value = "")]
    service_cluster_ip_range: CidrList,
    /// The node CIDR allocator: only RangeAllocator (kube-controller-manager's flag and default;
    /// CloudAllocator needs a cloud provider).
    #[arg(long, default_value = RANGE_ALLOCATOR)]
    cidr_allocator_type: String,
}

impl Args {
    /// The controllers' settings besides concurrency, from their flags.
    fn settings(&self) -> Settings {
        Settings {
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            cronjob_minute: self.cronjob_minute,
            max_endpoints_per_slice: self.max_endpoints_per_slice,
            endpointslice_updates_batch_period: self.endpointslice_updates_batch_period,
            endpoint_updates_batch_period: self.endpoint_updates_batch_period,
            mirroring_max_endpoints_per_subset: self.mirroring_max_endpoints_per_subset,
            mirroring_endpointslice_updates_batch_period: self
                .mirroring_endpointslice_updates_batch_period,
            node_lifecycle: NodeLifecycleSettings {
                node_monitor_grace_period: self.node_monitor_grace_period,
                node_startup_grace_period: self.node_startup_grace_period,
                node_monitor_period: self.node_monitor_period,
                node_eviction_rate: self.node_eviction_rate,
                secondary_node_eviction_rate: self.secondary_node_eviction_rate,
                large_cluster_size_threshold: self.large_cluster_size_threshold,
                unhealthy_zone_threshold: self.unhealthy_zone_threshold,
            },
            node_ipam: NodeIpamConfig {
                allocate_node_cidrs: self.allocate_node_cidrs,
                cluster_cidr: self.cluster_cidr,
                node_cidr_mask_size: self.node_cidr_mask_size,
                node_cidr_mask_size_ipv4: self.node_cidr_mask_size_ipv4,
                node_cidr_mask_size_ipv6: self.node_cidr_mask_size_ipv6,
                service_cluster_ip_range: self.service_cluster_ip_range,
                range_allocator: self.cidr_allocator_type == RANGE_ALLOCATOR,
            },
        }
    }
}

/// The `--concurrent-<flag>-syncs` flags of the built-in controllers, as given (or defaulted), by
/// controller name.
#[derive(Debug, Clone, Default)]
pub struct BuiltinConcurrency {
    values: BTreeMap<String, u32>,
}

impl clap::FromArgMatches for BuiltinConcurrency {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = Self::default();
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        for builtin in builtins() {
            if let Some(n) = concurrency_value(matches, builtin.flag) {
                self.values.insert(builtin.name.to_owned(), n);
            }
        }
        Ok(())
    }
}

impl clap::Args for BuiltinConcurrency {
    fn augment_args(command: clap::Command) -> clap::Command {
        builtins().iter().fold(command, |command, b| {
            command.arg(concurrency_arg(b.name, b.flag, b.default_concurrency))
        })
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

/// The built-in controllers `--controllers` enables, with their concurrency flags and `settings`
/// applied.
///
/// # Errors
/// [`SelectionError`] for an unknown controller name.
pub fn builtin_controllers(
    selection: &[String],
    concurrency: &BuiltinConcurrency,
    settings: &Settings,
) -> Result<Vec<DynController>, SelectionError> {
    let names: Vec<&str> = builtins().iter().map(|b| b.name).collect();
    let selected = select_controllers(selection, &names)?;
    Ok(builtins()
        .iter()
        .filter(|b| selected.contains(&b.name))
        .map(|b| {
            let controller = b.controller_with(settings);
            match concurrency.values.get(b.name) {
                Some(&n) => controller.with_concurrency(n),
                None => controller,
            }
        })
        .collect())
}

/// Runs `flotilla worker` until SIGINT or SIGTERM, then shuts down gracefully.
///
/// # Errors
/// An unknown controller name, no controller enabled, or any start-up failure.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let settings = args.settings();
    settings.validate()?;
    let controllers = builtin_controllers(&args.controllers, &args.concurrency, &settings)?;
    if controllers.is_empty() {
        anyhow::bail!(
            "no controllers enabled (this build has no built-in controllers yet; run a custom controller binary such as greeting-controller)"
        );
    }
    flotilla_worker::run_with_flags(&args.worker, controllers).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::{Args, FromArgMatches};

    use super::*;

    fn concurrency_of(args: &[&str], name: &str) -> u32 {
        let command = BuiltinConcurrency::augment_args(clap::Command::new("worker"));
        let matches = command
            .try_get_matches_from(std::iter::once("worker").chain(args.iter().copied()))
            .unwrap();
        let flags = BuiltinConcurrency::from_arg_matches(&matches).unwrap();
        let controllers =
            builtin_controllers(&[name.to_owned()], &flags, &Settings::default()).unwrap();
        assert_eq!(controllers.len(), 1);
        controllers[0].concurrency_limit()
    }

    /// The settings the worker's flags give, `extra` following the required ones; clap's error where
    /// it refuses them.
    fn settings_with(extra: &[&str]) -> Result<Settings, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: super::Args,
        }
        use clap::Parser;
        let argv = ["w", "--etcd-endpoints", "http://a:2379"];
        Cli::try_parse_from(argv.into_iter().chain(extra.iter().copied()))
            .map(|c| c.args.settings())
    }

    #[test]
    fn each_builtin_takes_kube_controller_managers_default_concurrency() {
        assert_eq!(concurrency_of(&[], "serviceaccount"), 1);
        assert_eq!(concurrency_of(&[], "replicaset"), 5);
        assert_eq!(concurrency_of(&[], "replicationcontroller"), 5);
        assert_eq!(concurrency_of(&[], "deployment"), 5);
        assert_eq!(concurrency_of(&[], "garbagecollector"), 20);
        assert_eq!(
            concurrency_of(&["--concurrent-gc-syncs", "4"], "garbagecollector"),
            4
        );
        assert_eq!(concurrency_of(&[], "namespace"), 10);
    }

    #[test]
    fn the_terminated_pod_gc_threshold_flag_is_kube_controller_managers() {
        let defaults = settings_with(&[]).unwrap();
        assert_eq!(defaults.terminated_pod_gc_threshold, 12500);
        let small = settings_with(&["--terminated-pod-gc-threshold", "3"]).unwrap();
        assert_eq!(small.terminated_pod_gc_threshold, 3);
        assert_eq!(concurrency_of(&[], "podgc"), 1);
        assert_eq!(
            concurrency_of(
                &["--concurrent-ttl-after-finished-syncs", "2"],
                "ttl-after-finished"
            ),
            2
        );
    }

    #[test]
    fn the_endpoint_and_mirroring_flags_are_kube_controller_managers() {
        let settings = settings_with(&[]).unwrap();
        assert_eq!(
            settings.endpoint_updates_batch_period,
            std::time::Duration::ZERO
        );
        assert_eq!(settings.mirroring_max_endpoints_per_subset, 1000);
        assert_eq!(
            settings.mirroring_endpointslice_updates_batch_period,
            std::time::Duration::ZERO
        );
        let settings = settings_with(&[
            "--endpoint-updates-batch-period",
            "500ms",
            "--mirroring-max-endpoints-per-subset",
            "10",
            "--mirroring-endpointslice-updates-batch-period",
            "1s",
        ])
        .unwrap();
        assert_eq!(
            settings.endpoint_updates_batch_period,
            std::time::Duration::from_millis(500)
        );
        assert_eq!(settings.mirroring_max_endpoints_per_subset, 10);
        assert_eq!(
            settings.mirroring_endpointslice_updates_batch_period,
            std::time::Duration::from_secs(1)
        );
        assert!(settings.validate().is_ok());
        let too_many = Settings {
            mirroring_max_endpoints_per_subset: 1001,
            ..settings
        };
        assert!(too_many.validate().is_err());
        assert_eq!(concurrency_of(&[], "endpoint"), 5);
        assert_eq!(
            concurrency_of(
                &["--mirroring-concurrent-service-endpoint-syncs", "2"],
                "endpointslicemirroring"
            ),
            2
        );
    }

    #[test]
    fn the_cronjob_minute_flag_defaults_to_a_real_minute_and_takes_a_duration() {
        let minute = settings_with(&[]).unwrap().cronjob_minute;
        assert_eq!(minute, std::time::Duration::from_secs(60));
        let fast = settings_with(&["--cronjob-minute", "2s"]).unwrap();
        assert_eq!(fast.cronjob_minute.as_secs(), 2);
        assert_eq!(fast.validate(), Ok(()));
        assert_eq!(
            concurrency_of(&["--concurrent-cron-job-syncs", "3"], "cronjob"),
            3
        );
        assert_eq!(concurrency_of(&[], "cronjob"), 5);
    }

    #[test]
    fn the_endpointslice_flags_are_kube_controller_managers() {
        let defaults = settings_with(&[]).unwrap();
        assert_eq!(defaults.max_endpoints_per_slice, 100);
        assert!(defaults.endpointslice_updates_batch_period.is_zero());
        let set = settings_with(&[
            "--max-endpoints-per-slice",
            "1001",
            "--endpointslice-updates-batch-period",
            "1s",
        ])
        .unwrap();
        assert_eq!(set.endpointslice_updates_batch_period.as_secs(), 1);
        assert!(set.validate().is_err(), "1001 is refused");
        assert_eq!(
            concurrency_of(
                &["--concurrent-service-endpoint-syncs", "9"],
                "endpointslice"
            ),
            9
        );
        assert_eq!(concurrency_of(&[], "endpointslice"), 5);
    }

    #[test]
    fn the_node_lifecycle_flags_are_kube_controller_managers_with_its_v1_32_defaults() {
        let nl = settings_with(&[]).unwrap().node_lifecycle;
        assert_eq!(nl, NodeLifecycleSettings::default());
        assert_eq!(nl.node_monitor_grace_period.as_secs(), 50);
        assert_eq!(nl.node_startup_grace_period.as_secs(), 60);
        assert_eq!(nl.node_monitor_period.as_secs(), 5);
        assert_eq!(
            (nl.node_eviction_rate, nl.secondary_node_eviction_rate),
            (0.1, 0.01)
        );
        assert_eq!(nl.large_cluster_size_threshold, 50);
        assert_eq!(nl.unhealthy_zone_threshold, 0.55);
        let nl = settings_with(&[
            "--node-monitor-grace-period",
            "4s",
            "--node-monitor-period",
            "500ms",
            "--node-eviction-rate",
            "0.5",
            "--large-cluster-size-threshold",
            "2",
        ])
        .unwrap()
        .node_lifecycle;
        assert_eq!(nl.node_monitor_grace_period.as_secs(), 4);
        assert_eq!(nl.node_monitor_period.as_millis(), 500);
        assert_eq!(nl.node_eviction_rate, 0.5);
        assert_eq!(nl.large_cluster_size_threshold, 2);
        let zero = settings_with(&["--node-monitor-period", "0s"]).unwrap();
        assert!(zero.validate().is_err());
        assert_eq!(concurrency_of(&[], "nodelifecycle"), 5);
        assert_eq!(
            concurrency_of(&["--concurrent-node-lifecycle-syncs", "2"], "nodelifecycle"),
            2
        );
    }

    #[test]
    fn the_node_ipam_flags_are_kube_controller_managers_and_default_to_no_allocation() {
        let defaults = settings_with(&[]).unwrap();
        assert!(!defaults.node_ipam.allocate_node_cidrs);
        assert!(defaults.node_ipam.range_allocator);
        assert_eq!(defaults.validate(), Ok(()));
        let on = settings_with(&[
            "--allocate-node-cidrs",
            "--cluster-cidr",
            "10.244.0.0/16,fd00::/48",
            "--node-cidr-mask-size-ipv4",
            "25",
            "--service-cluster-ip-range=10.244.0.0/20",
        ])
        .unwrap();
        let ipam = &on.node_ipam;
        assert!(ipam.allocate_node_cidrs);
        assert_eq!(ipam.cluster_cidr.len(), 2);
        assert_eq!(ipam.node_cidr_mask_size_ipv4, 25);
        assert_eq!(ipam.service_cluster_ip_range.len(), 1);
        assert_eq!(on.validate(), Ok(()));
        assert!(settings_with(&["--cluster-cidr", "10.0.0.0/33"]).is_err());
        let cloud = settings_with(&["--cidr-allocator-type", "CloudAllocator"]).unwrap();
        assert!(cloud.validate().is_err());
        assert_eq!(concurrency_of(&[], "nodeipam"), 1);
        assert_eq!(concurrency_of(&["--concurrent-ttl-syncs", "2"], "ttl"), 2);
        assert_eq!(concurrency_of(&[], "service-cidr"), 5);
    }

    #[test]
    fn the_replicationcontroller_flag_is_abbreviated_as_upstream_does() {
        let n = concurrency_of(&["--concurrent-rc-syncs", "7"], "replicationcontroller");
        assert_eq!(n, 7);
        assert_eq!(
            concurrency_of(&["--concurrent-replicaset-syncs", "3"], "replicaset"),
            3
        );
    }
}
