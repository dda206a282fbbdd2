//! `flotilla worker`: a worker process running the built-in controllers that `--controllers` enables.

use flotilla_worker::WorkerFlags;
use flotilla_worker::builtin::{BuiltinConcurrency, builtin_controllers};

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
