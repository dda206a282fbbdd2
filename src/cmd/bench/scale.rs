//! `flotilla bench scale`: the coordinator at the size of the clusters that outgrow
//! kube-controller-manager. On a fresh devcluster it builds N bare pods spread over namespaces and
//! M Deployments at 0 replicas (the fleet's `deployment` controller gives each its ReplicaSet; no pod
//! is created for them), with two coordinators and one worker (`deployment,replicaset`), then
//! measures:
//!
//! - the leader's resident memory before the objects, with the Deployments, and with the pods, whence
//!   the bytes each cached pod and each Deployment with its ReplicaSet costs;
//! - a cold start: both coordinators stopped, one started, the time until every informer synced (each
//!   kind's time too) and until its first dispatch;
//! - a forced relist: the leader's API link cut, etcd compacted past its watches, the link healed, so
//!   every informer is answered 410 Gone and lists again; the peak resident memory meanwhile
//!   (`VmHWM`, reset first), against the steady one;
//! - failover: `kill -9` of the leader to the new leader's first dispatch, `--failovers` times with a
//!   cold standby and as many with `--hot-standby`, p50 and p99; and how fast the new leader
//!   re-dispatches every key it re-enqueued.
//!
//! It prints a table, writes the readings as JSON and plots the leader's memory over the cold start
//! and the relist.
//!
//! With `--kubeconfig` it runs on that cluster instead: the objects go into namespaces with names
//! unique to the run and the label `flotilla.dev/bench=<run>`, the coordinators are scoped to that
//! label and talk to that cluster (their leases are still in an etcd the benchmark starts), and the
//! namespaces are deleted afterwards, whether the run succeeded or not. Every figure is measured but
//! the forced relist, which needs the devcluster's etcd: the table and the JSON
//! (`readings.not_measured`) say so, and its fields are null.

mod phases;
mod plot;
mod probe;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

use self::phases::Readings;
use super::chaos::fleet::{self, ChaosFleet};
use super::local_fleet::BenchScope;
use super::{percentile, write_json};

/// Flags of `flotilla bench scale`.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Bare pods, spread evenly over --namespaces.
    #[arg(long, default_value_t = 100_000)]
    pods: usize,
    /// Deployments at 0 replicas, spread evenly over --namespaces (each gets a ReplicaSet).
    #[arg(long, default_value_t = 10_000)]
    deployments: usize,
    /// Namespaces the objects are spread over.
    #[arg(long, default_value_t = 100)]
    namespaces: usize,
    /// Leader kills per standby mode (cold, then hot).
    #[arg(long, default_value_t = 5)]
    failovers: usize,
    /// --kube-api-qps (and burst) of the worker, so its first reconciles of every Deployment do not
    /// pace the benchmark.
    #[arg(long, default_value_t = 2000.0)]
    kube_api_qps: f32,
    /// Give up on any one phase after this long.
    #[arg(long, default_value = "10m", value_parser = flotilla_common::parse_duration)]
    timeout: Duration,
    /// Where to write the JSON readings.
    #[arg(long, default_value = "benchmarks/scale.json")]
    output: PathBuf,
    /// Where to plot the leader's memory over the cold start and the relist (SVG).
    #[arg(long, default_value = "benchmarks/scale.svg")]
    plot: PathBuf,
    /// Run against the cluster of this kubeconfig instead of a fresh devcluster: the benchmark's
    /// namespaces get names unique to the run and the label `flotilla.dev/bench=<run>`, the fleet is
    /// scoped to that label, and the namespaces are deleted afterwards. The forced relist is not
    /// measured (it compacts the devcluster's etcd).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

/// Runs `flotilla bench scale`.
pub(super) async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    if args.namespaces == 0 || args.pods < args.namespaces || args.failovers == 0 {
        bail!("--namespaces and --failovers must be positive, and --pods at least --namespaces");
    }
    let flotilla = std::env::current_exe()?;
    let qps = args.kube_api_qps.to_string();
    let mut scope = BenchScope::new("scale", args.kubeconfig.is_some());
    let mut fleet = ChaosFleet::start_on(
        &flotilla,
        fleet::Shape {
            name: "scale".to_owned(),
            coordinators: 2,
            workers: 1,
            nodes: 0,
            worker_flags: ["--kube-api-qps", &qps, "--kube-api-burst", &qps]
                .map(String::from)
                .to_vec(),
            coordinator_flags: scope.coordinator_flags(),
        },
        args.kubeconfig.as_deref(),
    )
    .await?;
    let measured = phases::measure(&args, &mut fleet, &mut scope).await;
    scope.cleanup(&fleet.client).await;
    let readings = match measured {
        Ok(readings) => readings,
        Err(err) => return Err(err.context(format!("logs in {}", fleet.keep_logs().display()))),
    };
    drop(fleet);
    report(&args, &readings, scope.selector().as_deref())
}

/// Prints the table quoted in BENCHMARKS.md and writes the JSON and the plot; `namespace_selector`
/// selects the run's namespaces on a given cluster (deleted by now), so the JSON names them.
fn report(args: &ScaleArgs, r: &Readings, namespace_selector: Option<&str>) -> anyhow::Result<()> {
    let quantiles = |v: &[f64]| {
        let mut sorted = v.to_vec();
        sorted.sort_by(f64::total_cmp);
        (percentile(&sorted, 0.5), percentile(&sorted, 0.99))
    };
    let (cold_p50, cold_p99) = quantiles(&r.failover_cold_s);
    let (hot_p50, hot_p99) = quantiles(&r.failover_hot_s);
    let bytes_per_pod =
        (r.rss_pods_mib - r.rss_deployments_mib) * 1024.0 * 1024.0 / args.pods as f64;
    let bytes_per_deployment = (r.rss_deployments_mib - r.rss_empty_mib) * 1024.0 * 1024.0
        / args.deployments.max(1) as f64;
    let cluster = args.kubeconfig.as_ref().map_or_else(
        || "a devcluster of its own".to_owned(),
        |k| format!("the cluster of {}", k.display()),
    );
    println!(
        "bench scale on {cluster}: {} pods in {} namespaces, {} Deployments (+ ReplicaSets) at 0 replicas",
        args.pods, args.namespaces, args.deployments
    );
    println!(
        "created in {:.1} s ({:.0} objects/s)",
        r.create_s,
        (args.pods + args.deployments) as f64 / r.create_s
    );
    println!("| figure | reading |");
    println!("|---|---|");
    println!(
        "| leader RSS: empty / with Deployments / with pods | {:.0} / {:.0} / {:.0} MiB |",
        r.rss_empty_mib, r.rss_deployments_mib, r.rss_pods_mib
    );
    println!("| bytes per cached pod | {bytes_per_pod:.0} |");
    println!("| bytes per Deployment with its ReplicaSet | {bytes_per_deployment:.0} |");
    println!(
        "| cold start to every informer synced | {:.2} s ({}) |",
        r.cold_start_s,
        r.kind_synced_s
            .iter()
            .map(|(k, s)| format!("{k} {s:.2} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| cold start to first dispatch | {:.2} s |",
        r.cold_first_dispatch_s
    );
    match (r.relist_steady_mib, r.relist_peak_mib, r.relist_s) {
        (Some(steady), Some(peak), Some(seconds)) => println!(
            "| forced relist: steady / peak RSS | {steady:.0} / {peak:.0} MiB ({:.2}×), relisted in {seconds:.2} s |",
            peak / steady
        ),
        _ => println!(
            "| forced relist: steady / peak RSS | not measured: {} |",
            r.not_measured
                .get(phases::RELIST.0)
                .map_or("no reading", String::as_str)
        ),
    }
    println!(
        "| failover, cold standby (kill -9 → first dispatch) | p50 {cold_p50:.2} s, p99 {cold_p99:.2} s (n={}) |",
        r.failover_cold_s.len()
    );
    println!(
        "| failover, hot standby | p50 {hot_p50:.2} s, p99 {hot_p99:.2} s (n={}) |",
        r.failover_hot_s.len()
    );
    println!(
        "| re-dispatch after a hot failover | {} keys at {:.0} keys/s (median) |",
        r.redispatch_keys,
        super::median(r.redispatch_keys_per_s.clone())
    );
    for (figure, why) in &r.not_measured {
        println!("{figure}: not measured: {why}");
    }
    write_json(
        &args.output,
        &serde_json::json!({
            "cluster": if args.kubeconfig.is_some() { "kubeconfig" } else { "devcluster" },
            "namespace_selector": namespace_selector,
            "pods": args.pods,
            "deployments": args.deployments,
            "namespaces": args.namespaces,
            "bytes_per_pod": bytes_per_pod,
            "bytes_per_deployment_with_replicaset": bytes_per_deployment,
            "failover_cold_p50_s": cold_p50,
            "failover_cold_p99_s": cold_p99,
            "failover_hot_p50_s": hot_p50,
            "failover_hot_p99_s": hot_p99,
            "readings": r,
        }),
    )?;
    plot::draw(&args.plot, &r.timeline, &r.marks)?;
    println!(
        "wrote {} and {}",
        args.output.display(),
        args.plot.display()
    );
    Ok(())
}
