//! `fleet-probe`: test controllers the fleet's end-to-end tests run as real worker processes.
//!
//! - `journal` appends one JSON line per reconcile of a ConfigMap labelled `flotilla.dev/probe=journal`
//!   to `--journal`, so a test can check that no key ever ran on two workers at once.
//! - `one-child` keeps exactly one child ConfigMap per ConfigMap labelled `flotilla.dev/probe=parent`,
//!   which only holds if the fleet gives read-your-writes.
//! - `rules` journals, to `--journal`, each reconcile of a Namespace labelled `flotilla.dev/probe=rules`
//!   with why it ran and what a named index listed for it: fan-out from Nodes, a ConfigMap field naming a
//!   cluster-scoped primary, a named index (see `rules.rs`).

mod journal;
mod one_child;
mod rules;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use flotilla_worker::{WorkerFlags, run_with_flags, select_controllers};

/// The label whose value picks the probe a ConfigMap is meant for.
pub const PROBE_LABEL: &str = "flotilla.dev/probe";

/// Flags: those of `flotilla worker` plus the probes' own.
#[derive(Parser)]
#[command(
    name = "fleet-probe",
    about = "Test controllers for the fleet's end-to-end tests"
)]
struct Cli {
    #[command(flatten)]
    worker: WorkerFlags,
    /// Controllers to run (`*`, `name`, `-name`): journal, one-child, rules.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    controllers: Vec<String>,
    /// The file the journal and rules controllers append to (required when either runs).
    #[arg(long)]
    journal: Option<PathBuf>,
    /// How long each journal reconcile takes, in milliseconds.
    #[arg(long, default_value_t = 5)]
    reconcile_ms: u64,
    /// How many journal items this worker reconciles at once.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    concurrent_journal_syncs: u32,
    /// How many one-child items this worker reconciles at once.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    concurrent_one_child_syncs: u32,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let selected = select_controllers(&cli.controllers, &["journal", "one-child", "rules"])?;
    let mut controllers = Vec::new();
    let open_journal = || -> anyhow::Result<Arc<journal::Journal>> {
        let path = cli
            .journal
            .as_deref()
            .context("--journal is required when the journal or rules controller runs")?;
        let journal = journal::Journal::open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        Ok(Arc::new(journal))
    };
    if selected.contains(&"journal") {
        let pause = Duration::from_millis(cli.reconcile_ms);
        controllers.push(
            journal::controller(open_journal()?, pause)
                .concurrency(cli.concurrent_journal_syncs)
                .into(),
        );
    }
    if selected.contains(&"rules") {
        controllers.push(rules::controller(open_journal()?).into());
    }
    if selected.contains(&"one-child") {
        controllers.push(
            one_child::controller()
                .concurrency(cli.concurrent_one_child_syncs)
                .into(),
        );
    }
    run_with_flags(&cli.worker, controllers).await
}
