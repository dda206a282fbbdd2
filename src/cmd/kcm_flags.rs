//! `flotilla kcm-flags`: the `--controllers` flag kube-controller-manager needs to run beside a fleet,
//! so that each controller runs in exactly one of them while a cluster migrates controller by
//! controller.
//!
//! kube-controller-manager's `--controllers` takes `*` (every controller on by default), `foo` (enable)
//! and `-foo` (disable), by canonical name (`replicaset-controller`) or by the older alias
//! (`replicaset`, which is also the fleet's name for it). The flag printed is the operator's current
//! list with every mention of the fleet's controllers, under either name, replaced by `-<canonical>`.

use super::selection::selected_builtins;

/// Flags of `flotilla kcm-flags`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The fleet's controllers, as `flotilla worker --controllers` takes them: `*`, `foo`, `-foo`.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// kube-controller-manager's `--controllers` today; its default is `*`.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub kcm_controllers: Vec<String>,
}

/// Prints the flag for `args`.
///
/// # Errors
/// An unknown fleet controller, or a kube-controller-manager that would be left with no controller.
pub fn run(args: Args) -> anyhow::Result<()> {
    println!("{}", render(&args)?);
    Ok(())
}

/// `--controllers=…` for kube-controller-manager beside a fleet running `args.controllers`.
fn render(args: &Args) -> anyhow::Result<String> {
    let fleet = selected_builtins(&args.controllers)?;
    let is_fleets = |name: &str| fleet.iter().any(|b| b.name == name || b.kcm_name == name);
    let mut entries: Vec<String> = args
        .kcm_controllers
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty() && !is_fleets(e.trim_start_matches('-')))
        .map(str::to_owned)
        .collect();
    if !entries.iter().any(|e| !e.starts_with('-')) {
        anyhow::bail!(
            "kube-controller-manager would run no controller beside this fleet: stop it instead"
        );
    }
    entries.extend(fleet.iter().map(|b| format!("-{}", b.kcm_name)));
    Ok(format!("--controllers={}", entries.join(",")))
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

    fn flag(argv: &[&str]) -> anyhow::Result<String> {
        let mut full = vec!["kcm-flags"];
        full.extend_from_slice(argv);
        render(&Cli::try_parse_from(full).unwrap().args)
    }

    #[test]
    fn the_fleets_controllers_are_disabled_by_their_canonical_names() {
        assert_eq!(
            flag(&["--controllers", "replicaset,deployment"]).unwrap(),
            "--controllers=*,-replicaset-controller,-deployment-controller"
        );
        assert_eq!(
            flag(&["--controllers", "garbagecollector"]).unwrap(),
            "--controllers=*,-garbage-collector-controller"
        );
    }

    #[test]
    fn the_operators_list_is_kept_but_for_mentions_of_the_fleets_controllers_by_either_name() {
        let kcm = "*,bootstrap-signer-controller,replicaset,-deployment-controller,-ttl-controller";
        assert_eq!(
            flag(&[
                "--controllers",
                "deployment,replicaset",
                "--kcm-controllers",
                kcm
            ])
            .unwrap(),
            "--controllers=*,bootstrap-signer-controller,-ttl-controller,\
             -replicaset-controller,-deployment-controller"
        );
    }

    #[test]
    fn a_kcm_left_with_nothing_to_run_is_refused() {
        let err = flag(&[
            "--controllers",
            "replicaset,deployment",
            "--kcm-controllers",
            "replicaset-controller,deployment",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("no controller"), "{err}");
    }

    #[test]
    fn an_unknown_fleet_controller_is_refused() {
        let err = flag(&["--controllers", "no-such-controller"]).unwrap_err();
        assert!(err.to_string().contains("no-such-controller"), "{err}");
    }
}
