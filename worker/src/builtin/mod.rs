//! The registry of built-in controllers (kube-controller-manager's): each contributes its name, its
//! `--concurrent-<name>-syncs` default and its constructor, so `flotilla worker` grows a flag per
//! controller without editing the command.

mod claim;
mod controller_ref;
mod deployment;
mod events;
mod garbagecollector;
mod namespace;
mod replicaset;
mod serviceaccount;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ReplicationController;

use crate::runtime::{SelectionError, concurrency_arg, concurrency_value, select_controllers};
use crate::sdk::DynController;

/// One built-in controller.
pub struct Builtin {
    /// kube-controller-manager's name (`replicaset`, `deployment`, …).
    pub name: &'static str,
    /// The `<flag>` of `--concurrent-<flag>-syncs`: the name, except where kube-controller-manager
    /// abbreviates it (`rc` for `replicationcontroller`).
    pub flag: &'static str,
    /// kube-controller-manager's default of `--concurrent-<name>-syncs`.
    pub default_concurrency: u32,
    /// Builds the controller.
    pub build: fn() -> DynController,
}

/// Every built-in controller.
pub fn builtins() -> &'static [Builtin] {
    &[
        Builtin {
            name: "serviceaccount",
            flag: "serviceaccount",
            default_concurrency: serviceaccount::DEFAULT_CONCURRENCY,
            build: || serviceaccount::controller().into(),
        },
        Builtin {
            name: "replicaset",
            flag: "replicaset",
            default_concurrency: replicaset::DEFAULT_CONCURRENCY,
            build: || replicaset::controller::<ReplicaSet>().into(),
        },
        Builtin {
            name: "deployment",
            flag: "deployment",
            default_concurrency: deployment::DEFAULT_CONCURRENCY,
            build: || deployment::controller().into(),
        },
        Builtin {
            name: "replicationcontroller",
            flag: "rc",
            default_concurrency: replicaset::DEFAULT_CONCURRENCY,
            build: || replicaset::controller::<ReplicationController>().into(),
        },
        Builtin {
            name: "garbagecollector",
            flag: "gc",
            default_concurrency: garbagecollector::DEFAULT_CONCURRENCY,
            build: || garbagecollector::controller().into(),
        },
        Builtin {
            name: "namespace",
            flag: "namespace",
            default_concurrency: namespace::DEFAULT_CONCURRENCY,
            build: || namespace::controller().into(),
        },
    ]
}

/// The `--concurrent-<name>-syncs` flags of the built-in controllers.
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
            let n = concurrency
                .values
                .get(b.name)
                .copied()
                .unwrap_or(b.default_concurrency);
            (b.build)().with_concurrency(n)
        })
        .collect())
}

#[cfg(test)]
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
