//! The one-call entry points of worker binaries: parse the shared flags, set up logging, run until
//! SIGTERM.

use clap::{Args, FromArgMatches};
use flotilla_common::{ServiceIdentity, init_telemetry, shutdown_signal};
use flotilla_sdk::DynController;

use super::flags::{WorkerFlags, concurrency_arg, concurrency_flag, concurrency_value};
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
            &concurrency_flag(controller.name()),
            controller.concurrency_limit(),
        ));
    }
    let matches = command.get_matches();
    let flags = WorkerFlags::from_arg_matches(&matches)?;
    let controllers: Vec<DynController> = controllers
        .into_iter()
        .map(
            |c| match concurrency_value(&matches, &concurrency_flag(c.name())) {
                Some(n) => c.with_concurrency(n),
                None => c,
            },
        )
        .collect();
    // A custom controller binary is named after its controllers in traces.
    let mut names: Vec<&str> = controllers.iter().map(DynController::name).collect();
    names.sort_unstable();
    let service = names.join(",");
    run_as(&flags, controllers, &service).await
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
    run_as(flags, controllers, "flotilla-worker").await
}

/// [`run_with_flags`] with `service` as the `service.name` of its traces.
async fn run_as(
    flags: &WorkerFlags,
    controllers: Vec<DynController>,
    service: &str,
) -> anyhow::Result<()> {
    if flags.shared.check_config {
        flags.check(&controllers).await?;
        flags.shared.tracing.validate()?;
        println!("configuration ok");
        return Ok(());
    }
    let config = flags.to_config().await?;
    let identity = ServiceIdentity::new(service, &config.worker_id);
    let telemetry = init_telemetry(flags.shared.log_format, &flags.shared.tracing, &identity)?;
    flags.shared.tls.warn_if_plaintext();
    let result = run(config, controllers, shutdown_signal()).await;
    // The spans of the last reconciles go out before the process exits.
    telemetry.shutdown().await;
    result?;
    Ok(())
}
