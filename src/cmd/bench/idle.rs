//! `flotilla bench idle`: what an idle fleet costs. One coordinator and one worker running
//! `deployment,replicaset,garbagecollector` on a fresh devcluster; their CPU is measured over a window
//! twice: fresh (nothing to reconcile), and settled after a small rollout (every Deployment rolled
//! out, then a pause for the last status writes). An idle process should cost only its lease renewals
//! and the protocol's keep-alives.

use std::time::{Duration, Instant};

use serde_json::json;

use super::local_fleet::{FleetShape, LocalFleet};
use super::process_stats::cpu_seconds;
use super::rollout::{Goal, NAMESPACE, roll_out};
use super::{median, write_json};

/// Replicas of each Deployment of the small rollout.
const REPLICAS: i32 = 3;

/// Flags of `flotilla bench idle`.
#[derive(clap::Args, Debug)]
pub struct IdleArgs {
    /// How long each measurement window lasts.
    #[arg(long, default_value = "60s", value_parser = flotilla_common::parse_duration)]
    window: Duration,
    /// Deployments (3 replicas each) rolled out before the settled window.
    #[arg(long, default_value_t = 10)]
    deployments: usize,
    /// Pause between the last Deployment rolled out and the settled window.
    #[arg(long, default_value = "5s", value_parser = flotilla_common::parse_duration)]
    settle: Duration,
    /// Runs; the report gives medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Where to write the JSON result.
    #[arg(long, default_value = "benchmarks/idle.json")]
    output: std::path::PathBuf,
    /// Run against the cluster of this kubeconfig instead of a fresh devcluster per run: the
    /// benchmark's namespaces get names unique to the run and the label `flotilla.dev/bench=<run>`,
    /// the fleet is scoped to that label, and the namespaces are deleted afterwards.
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
}

/// One run: the share of one core each process used in each window.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct RunResult {
    fresh_coordinator_pct: f64,
    fresh_worker_pct: f64,
    settled_coordinator_pct: f64,
    settled_worker_pct: f64,
}

/// Runs `flotilla bench idle`.
pub(super) async fn run(args: IdleArgs) -> anyhow::Result<()> {
    let flotilla = std::env::current_exe()?;
    let mut runs = Vec::new();
    for run in 0..args.runs {
        let mut fleet = LocalFleet::start(
            &flotilla,
            &FleetShape {
                name: format!("idle-{run}"),
                workers: 1,
                controllers: &["deployment", "replicaset", "garbagecollector"],
                worker_flags: Vec::new(),
                nodes: 1,
                namespace: NAMESPACE,
                cluster: args.kubeconfig.as_deref(),
            },
        )
        .await?;
        let measured = one_run(&args, &mut fleet).await;
        fleet.cleanup().await;
        let result = match measured {
            Ok(result) => result,
            Err(err) => {
                return Err(err.context(format!("logs in {}", fleet.keep_logs().display())));
            }
        };
        eprintln!(
            "run {run}: fresh coordinator {:.2} % worker {:.2} %; settled coordinator {:.2} % worker {:.2} % of a core",
            result.fresh_coordinator_pct,
            result.fresh_worker_pct,
            result.settled_coordinator_pct,
            result.settled_worker_pct
        );
        runs.push(result);
    }
    let med = |f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    let medians = RunResult {
        fresh_coordinator_pct: med(|r| r.fresh_coordinator_pct),
        fresh_worker_pct: med(|r| r.fresh_worker_pct),
        settled_coordinator_pct: med(|r| r.settled_coordinator_pct),
        settled_worker_pct: med(|r| r.settled_worker_pct),
    };
    write_json(
        &args.output,
        &json!({
            "benchmark": "idle",
            "window_seconds": args.window.as_secs_f64(),
            "deployments": args.deployments,
            "runs": runs,
            "median": medians,
        }),
    )?;
    println!("| window | coordinator, % of a core | worker, % of a core |");
    println!("|---|---:|---:|");
    println!(
        "| fresh fleet, {:.0} s | {:.2} | {:.2} |",
        args.window.as_secs_f64(),
        medians.fresh_coordinator_pct,
        medians.fresh_worker_pct
    );
    println!(
        "| settled after {} Deployments, {:.0} s | {:.2} | {:.2} |",
        args.deployments,
        args.window.as_secs_f64(),
        medians.settled_coordinator_pct,
        medians.settled_worker_pct
    );
    println!(
        "\nmedians of {} runs; JSON written to {}",
        args.runs,
        args.output.display()
    );
    Ok(())
}

async fn one_run(args: &IdleArgs, fleet: &mut LocalFleet) -> anyhow::Result<RunResult> {
    let (fresh_coordinator_pct, fresh_worker_pct) = window(fleet, args.window).await?;
    roll_out(
        fleet,
        args.deployments,
        REPLICAS,
        Goal::Available,
        Duration::from_secs(120),
    )
    .await?;
    tokio::time::sleep(args.settle).await;
    let (settled_coordinator_pct, settled_worker_pct) = window(fleet, args.window).await?;
    Ok(RunResult {
        fresh_coordinator_pct,
        fresh_worker_pct,
        settled_coordinator_pct,
        settled_worker_pct,
    })
}

/// The coordinator's and the worker's CPU over `length`, in percent of one core.
async fn window(fleet: &mut LocalFleet, length: Duration) -> anyhow::Result<(f64, f64)> {
    let coordinator = cpu_seconds(fleet.coordinator())?;
    let worker = cpu_seconds(&fleet.workers()[0])?;
    let start = Instant::now();
    tokio::time::sleep(length).await;
    fleet.check_running()?;
    let elapsed = start.elapsed().as_secs_f64();
    let pct = |before: f64, after: f64| (after - before) / elapsed * 100.0;
    Ok((
        pct(coordinator, cpu_seconds(fleet.coordinator())?),
        pct(worker, cpu_seconds(&fleet.workers()[0])?),
    ))
}
