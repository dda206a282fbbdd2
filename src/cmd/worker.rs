//! `flotilla worker`: a worker process running the built-in controllers that `--controllers` enables,
//! with one `--concurrent-<flag>-syncs` flag per entry of the controllers' registry.

use std::collections::BTreeMap;

use flotilla_controllers::{Settings, builtins};
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
}

impl Args {
    /// The controllers' settings besides concurrency, from their flags.
    fn settings(&self) -> Settings {
        Settings {
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            cronjob_minute: self.cronjob_minute,
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
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: super::Args,
        }
        use clap::Parser;
        let endpoints = ["w", "--etcd-endpoints", "http://a:2379"];
        let cli = Cli::try_parse_from(endpoints).unwrap();
        assert_eq!(cli.args.settings().terminated_pod_gc_threshold, 12500);
        let small = endpoints
            .iter()
            .copied()
            .chain(["--terminated-pod-gc-threshold", "3"]);
        let cli = Cli::try_parse_from(small).unwrap();
        assert_eq!(cli.args.settings().terminated_pod_gc_threshold, 3);
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
    fn the_cronjob_minute_flag_defaults_to_a_real_minute_and_takes_a_duration() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: super::Args,
        }
        use clap::Parser;
        let endpoints = ["w", "--etcd-endpoints", "http://a:2379"];
        let cli = Cli::try_parse_from(endpoints).unwrap();
        let minute = cli.args.settings().cronjob_minute;
        assert_eq!(minute, std::time::Duration::from_secs(60));
        let fast = endpoints.iter().copied().chain(["--cronjob-minute", "2s"]);
        let cli = Cli::try_parse_from(fast).unwrap();
        assert_eq!(cli.args.settings().cronjob_minute.as_secs(), 2);
        assert_eq!(cli.args.settings().validate(), Ok(()));
        assert_eq!(
            concurrency_of(&["--concurrent-cron-job-syncs", "3"], "cronjob"),
            3
        );
        assert_eq!(concurrency_of(&[], "cronjob"), 5);
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
