//! `flotilla worker`: a worker process running the built-in controllers that `--controllers` enables,
//! with one `--concurrent-<flag>-syncs` flag per entry of the controllers' registry.

use std::collections::BTreeMap;

use flotilla_controllers::builtins;
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
            command.arg(concurrency_arg(b.flag, b.default_concurrency))
        })
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

/// The built-in controllers `--controllers` enables, with their concurrency flags applied.
///
/// # Errors
/// [`SelectionError`] for an unknown controller name.
pub fn builtin_controllers(
    selection: &[String],
    concurrency: &BuiltinConcurrency,
) -> Result<Vec<DynController>, SelectionError> {
    let names: Vec<&str> = builtins().iter().map(|b| b.name).collect();
    let selected = select_controllers(selection, &names)?;
    Ok(builtins()
        .iter()
        .filter(|b| selected.contains(&b.name))
        .map(|b| {
            let controller = b.controller();
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
    let controllers = builtin_controllers(&args.controllers, &args.concurrency)?;
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
        let controllers = builtin_controllers(&[name.to_owned()], &flags).unwrap();
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
    fn the_replicationcontroller_flag_is_abbreviated_as_upstream_does() {
        let n = concurrency_of(&["--concurrent-rc-syncs", "7"], "replicationcontroller");
        assert_eq!(n, 7);
        assert_eq!(
            concurrency_of(&["--concurrent-replicaset-syncs", "3"], "replicaset"),
            3
        );
    }
}
