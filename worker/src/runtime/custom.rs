//! The one-call entry points of worker binaries: parse the shared flags, set up logging, run until
//! SIGTERM.

use clap::{Args, FromArgMatches};
use flotilla_common::{init_logging, shutdown_signal};
use flotilla_sdk::DynController;

use super::flags::{WorkerFlags, concurrency_arg, concurrency_value};
use super::worker::run;

/// Runs `controllers` as a worker binary: parses the flags of `flotilla worker` (without
/// `--controllers`) plus `--concurrent-<name>-syncs` for each controller, and runs until SIGINT or
/// SIGTERM, then shuts down gracefully.
///
/// # Errors
/// Start-up failures (bad flags exit the process with clap's usage message instead).
pub async fn run_custom(controllers: Vec<DynController>) -> anyhow::Result<()> {
    // The about text comes after the flags, which would otherwise lend theirs to the command.
    let mut command = WorkerFlags::augment_args(clap::Command::new("controller"))
        .about("A Flotilla worker running custom controllers");
    for controller in &controllers {
        command = command.arg(concurrency_arg(
            controller.name(),
            controller.concurrency_limit(),
        ));
    }
    let matches = command.get_matches();
    let flags = WorkerFlags::from_arg_matches(&matches)?;
    let controllers = controllers
        .into_iter()
        .map(|c| match concurrency_value(&matches, c.name()) {
            Some(n) => c.with_concurrency(n),
            None => c,
        })
        .collect();
    run_with_flags(&flags, controllers).await
}

/// Runs `controllers` with already parsed `flags` until SIGINT or SIGTERM (for binaries with flags of
/// their own, like `flotilla worker` and `fleet-probe`). With `--check-config` it only checks them
/// ([`WorkerFlags::check`]) and prints `configuration ok`.
///
/// # Errors
/// Start-up failures.
pub async fn run_with_flags(
    flags: &WorkerFlags,
    controllers: Vec<DynController>,
) -> anyhow::Result<()> {
    if flags.check_config {
        flags.check(&controllers).await?;
        println!("configuration ok");
        return Ok(());
    }
    init_logging(flags.log_format);
    let config = flags.to_config().await?;
    run(config, controllers, shutdown_signal()).await?;
    Ok(())
}
