//! `flotilla rbac`: the ClusterRole rules a fleet running the given built-in controllers needs — its
//! workers' (what the reconciles ask of the API) and its coordinators' (what the informers list and
//! watch) — as YAML or JSON, in the canonical form the Helm chart renders.

use flotilla_controllers::rbac::fleet_rules;
use flotilla_sdk::k8s_openapi::api::rbac::v1::PolicyRule;

use super::selection::selected_builtins;

/// Flags of `flotilla rbac`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The controllers, as `flotilla worker --controllers` takes them: `*` (all), `foo`, `-foo`.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// Print only this role's rules (a list), instead of both under `coordinator` and `worker`.
    #[arg(long, value_enum)]
    pub role: Option<Role>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
}

/// A role of the fleet.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `flotilla worker` processes.
    Worker,
    /// `flotilla coordinator` processes.
    Coordinator,
}

/// How the rules are printed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// YAML, to paste under a ClusterRole's `rules:`.
    Yaml,
    /// JSON, for scripts.
    Json,
}

/// Both roles' rules.
#[derive(serde::Serialize, Debug)]
struct Both {
    coordinator: Vec<PolicyRule>,
    worker: Vec<PolicyRule>,
}

/// Prints the rules `args` ask for.
///
/// # Errors
/// An unknown controller name, or no controller selected.
pub async fn run(args: Args) -> anyhow::Result<()> {
    print!("{}", render(&args)?);
    Ok(())
}

/// The text `flotilla rbac` prints for `args`.
fn render(args: &Args) -> anyhow::Result<String> {
    let selected = selected_builtins(&args.controllers)?;
    let rules = fleet_rules(selected);
    let worker = rules.worker.policy_rules();
    let coordinator = rules.coordinator.policy_rules();
    let text = match (args.role, args.output) {
        (Some(role), format) => {
            let rules = match role {
                Role::Worker => worker,
                Role::Coordinator => coordinator,
            };
            encode(&rules, format)?
        }
        (None, format) => encode(
            &Both {
                coordinator,
                worker,
            },
            format,
        )?,
    };
    Ok(text)
}

fn encode<T: serde::Serialize>(value: &T, format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Yaml => serde_saphyr::to_string(value)?,
        Format::Json => format!("{}\n", serde_json::to_string_pretty(value)?),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn rules(extra: &[&str]) -> Vec<PolicyRule> {
        let mut argv = vec!["rbac", "-o", "json"];
        argv.extend_from_slice(extra);
        let text = render(&Cli::try_parse_from(argv).unwrap().args).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn names(rules: &[PolicyRule]) -> Vec<String> {
        rules
            .iter()
            .map(|r| {
                let group = r.api_groups.as_deref().unwrap_or_default().join(",");
                let resource = r.resources.as_deref().unwrap_or_default().join(",");
                format!("{group}/{resource}: {}", r.verbs.join(","))
            })
            .collect()
    }

    #[test]
    fn the_deployment_worker_gets_exactly_its_controllers_grants() {
        let worker = rules(&["--controllers", "deployment", "--role", "worker"]);
        assert_eq!(
            names(&worker),
            [
                "/events: create,patch",
                "apps/deployments: get",
                "apps/deployments/finalizers: update",
                "apps/deployments/status: update",
                "apps/replicasets: create,delete,get,patch,update",
            ]
        );
    }

    #[test]
    fn the_coordinator_of_every_builtin_lists_and_watches_everything() {
        let coordinator = rules(&["--role", "coordinator"]);
        assert_eq!(names(&coordinator), ["*/*: list,watch"]);
    }

    #[test]
    fn star_minus_a_controller_drops_its_grants() {
        let worker = rules(&[
            "--controllers",
            "*,-garbagecollector,-namespace",
            "--role",
            "worker",
        ]);
        let all = names(&worker);
        // No grant over every resource is left; the disruption controller's read of any
        // controller's scale (upstream's own rule) is the one wildcard.
        assert!(all.iter().all(|r| !r.starts_with("*/*:")), "{all:?}");
        assert!(all.contains(&"*/*/scale: get".to_owned()), "{all:?}");
        assert!(
            all.contains(&"/serviceaccounts: create".to_owned()),
            "{all:?}"
        );
    }

    #[test]
    fn both_roles_print_under_their_names_in_yaml() {
        let cli = Cli::try_parse_from(["rbac", "--controllers", "serviceaccount"]).unwrap();
        let text = render(&cli.args).unwrap();
        let value: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(value["worker"][0]["resources"][0], "serviceaccounts");
        assert_eq!(value["worker"][0]["apiGroups"][0], "", "{text}");
        assert_eq!(value["coordinator"][0]["resources"][0], "namespaces");
    }

    #[test]
    fn an_unknown_controller_is_refused() {
        let cli = Cli::try_parse_from(["rbac", "--controllers", "nope"]).unwrap();
        let err = render(&cli.args).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let cli = Cli::try_parse_from(["rbac", "--controllers=-namespace"]).unwrap();
        assert!(render(&cli.args).is_err(), "an empty selection");
    }
}
