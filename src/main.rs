//! The `flotilla` binary: one executable, one subcommand per role.

mod cmd;

use clap::{Parser, Subcommand};

/// Flotilla: a Kubernetes controller manager that scales out.
#[derive(Parser)]
#[command(name = "flotilla", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the local Kubernetes API on etcd (test and demo fixture).
    Devcluster(cmd::devcluster::Args),
    /// Simulate nodes against any Kubernetes API (kwok-like).
    Simnodes(cmd::simnodes::Args),
    /// Campaign for leadership of a fleet; while leading, run informers, the workqueue and dispatch.
    Coordinator(cmd::coordinator::Args),
    /// Show the fleet as its leader sees it.
    Status(cmd::status::Args),
    /// Take items from the leader and reconcile them with the built-in controllers.
    Worker(cmd::worker::Args),
    /// Print the RBAC rules a fleet's workers and coordinators need for the given controllers.
    Rbac(cmd::rbac::Args),
    /// Print the `--controllers` flag kube-controller-manager needs to run beside a fleet of these
    /// controllers, so no controller runs in both.
    KcmFlags(cmd::kcm_flags::Args),
    /// The local demo: etcd, devcluster, 2 coordinators and 3 workers running the greeting example.
    Up(cmd::up::Args),
    /// Benchmarks that write machine-readable results.
    Bench(cmd::bench::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Devcluster(args) => cmd::devcluster::run(args).await,
            Command::Simnodes(args) => cmd::simnodes::run(args).await,
            Command::Coordinator(args) => cmd::coordinator::run(args).await,
            Command::Status(args) => cmd::status::run(args).await,
            Command::Worker(args) => cmd::worker::run(args).await,
            Command::Rbac(args) => cmd::rbac::run(args).await,
            Command::KcmFlags(args) => cmd::kcm_flags::run(args),
            Command::Up(args) => cmd::up::run(args).await,
            Command::Bench(args) => cmd::bench::run(args).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
