//! `flotilla bench memory`: what the coordinator's caches cost, and whether a running fleet slows the
//! API server's other clients. One coordinator and one worker (`deployment,replicaset,garbagecollector`)
//! on a fresh devcluster: the coordinator's resident memory when ready, after a rollout (Deployments,
//! ReplicaSets, pods), and after many more bare pods spread over namespaces — whence the bytes each
//! cached pod costs. The same pods are first created on a devcluster with no fleet, so the creates per
//! second with and without the fleet's watches compare like with like.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::local_fleet::{FleetShape, LocalFleet};
use super::process_stats::{cpu_seconds, peak_rss_mib, rss_mib};
use super::rollout::{Goal, NAMESPACE, roll_out};
use super::{median, write_json};

/// Pod creates in flight at once from the benchmark's own (unlimited) client.
const CREATE_CONCURRENCY: usize = 32;

/// Flags of `flotilla bench memory`.
#[derive(clap::Args, Debug)]
pub struct MemoryArgs {
    /// Deployments of the rollout measured first.
    #[arg(long, default_value_t = 500)]
    deployments: usize,
    /// `spec.replicas` of every Deployment.
    #[arg(long, default_value_t = 4)]
    replicas: i32,
    /// Bare pods created after the rollout.
    #[arg(long, default_value_t = 20_000)]
    pods: usize,
    /// Namespaces the bare pods are spread over.
    #[arg(long, default_value_t = 20)]
    namespaces: usize,
    /// Pause before each memory reading, for the last events to be processed.
    #[arg(long, default_value = "10s", value_parser = flotilla_common::parse_duration)]
    settle: Duration,
    /// Runs; the report gives medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Give up on a run's rollout or cache fill after this long.
    #[arg(long, default_value = "10m", value_parser = flotilla_common::parse_duration)]
    timeout: Duration,
    /// Where to write the JSON result.
    #[arg(long, default_value = "benchmarks/memory.json")]
    output: std::path::PathBuf,
    /// Run against the cluster of this kubeconfig instead of a fresh devcluster per run: the
    /// benchmark's namespaces get names unique to the run and the label `flotilla.dev/bench=<run>`,
    /// the fleet is scoped to that label, and the namespaces are deleted afterwards.
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
}

/// One run's readings.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct RunResult {
    /// Coordinator RSS once the fleet is ready, MiB.
    coordinator_ready_mib: f64,
    /// Coordinator RSS after the rollout, MiB.
    coordinator_rollout_mib: f64,
    /// Coordinator RSS with the bare pods cached too, MiB.
    coordinator_pods_mib: f64,
    /// Coordinator peak RSS over the run, MiB.
    coordinator_peak_mib: f64,
    /// The worker's peak RSS, MiB.
    worker_peak_mib: f64,
    /// (RSS with the pods − RSS after the rollout) / pods.
    bytes_per_pod: f64,
    /// Pod creates per second on a devcluster with no fleet.
    creates_per_s_alone: f64,
    /// Pod creates per second while the fleet runs.
    creates_per_s_with_fleet: f64,
    /// The API server's CPU per pod create with no fleet, ms (devcluster only; NaN on a cluster of
    /// the user's): with the next, where the fleet's cost to the API server's other clients goes.
    api_cpu_ms_per_create_alone: f64,
    /// The API server's CPU per pod create while the fleet runs, ms — its watches included.
    api_cpu_ms_per_create_with_fleet: f64,
    /// The coordinator's CPU seconds from ready to the end of the run.
    coordinator_cpu_seconds: f64,
    /// The worker's CPU seconds from ready to the end of the run.
    worker_cpu_seconds: f64,
}

/// Runs `flotilla bench memory`.
pub(super) async fn run(args: MemoryArgs) -> anyhow::Result<()> {
    if args.namespaces == 0 || args.replicas <= 0 {
        bail!("--namespaces and --replicas must be positive");
    }
    let flotilla = std::env::current_exe()?;
    let mut runs = Vec::new();
    for run in 0..args.runs {
        let shape = FleetShape {
            name: format!("memory-{run}"),
            workers: 1,
            controllers: &["deployment", "replicaset", "garbagecollector"],
            // The rollout's pace is not what is measured here: a raised budget keeps runs short.
            worker_flags: [
                "--kube-api-qps",
                "1000",
                "--kube-api-burst",
                "1000",
                "--concurrent-deployment-syncs",
                "50",
                "--concurrent-replicaset-syncs",
                "50",
            ]
            .map(String::from)
            .to_vec(),
            nodes: 0,
            namespace: NAMESPACE,
            cluster: args.kubeconfig.as_deref(),
        };
        let alone = {
            let mut alone = LocalFleet::start_cluster_only(&flotilla, &shape).await?;
            let created = create_bare_pods(&mut alone, &args).await;
            alone.cleanup().await;
            match created {
                Ok(creates) => creates,
                Err(err) => {
                    return Err(err.context(format!("logs in {}", alone.keep_logs().display())));
                }
            }
        };
        let mut fleet = LocalFleet::start(&flotilla, &shape).await?;
        let measured = one_run(&args, &mut fleet, alone).await;
        fleet.cleanup().await;
        let result = match measured {
            Ok(result) => result,
            Err(err) => {
                return Err(err.context(format!("logs in {}", fleet.keep_logs().display())));
            }
        };
        eprintln!(
            "run {run}: coordinator {:.0} MiB ready, {:.0} MiB after the rollout, {:.0} MiB with {} pods \
             ({:.0} bytes per pod); pod creates/s {:.0} alone, {:.0} with the fleet; API server CPU per \
             create {:.2} ms alone, {:.2} ms with the fleet; CPU s coordinator {:.1}, worker {:.1}",
            result.coordinator_ready_mib,
            result.coordinator_rollout_mib,
            result.coordinator_pods_mib,
            args.pods,
            result.bytes_per_pod,
            result.creates_per_s_alone,
            result.creates_per_s_with_fleet,
            result.api_cpu_ms_per_create_alone,
            result.api_cpu_ms_per_create_with_fleet,
            result.coordinator_cpu_seconds,
            result.worker_cpu_seconds,
        );
        runs.push(result);
    }
    let med = |f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    let medians = RunResult {
        coordinator_ready_mib: med(|r| r.coordinator_ready_mib),
        coordinator_rollout_mib: med(|r| r.coordinator_rollout_mib),
        coordinator_pods_mib: med(|r| r.coordinator_pods_mib),
        coordinator_peak_mib: med(|r| r.coordinator_peak_mib),
        worker_peak_mib: med(|r| r.worker_peak_mib),
        bytes_per_pod: med(|r| r.bytes_per_pod),
        creates_per_s_alone: med(|r| r.creates_per_s_alone),
        creates_per_s_with_fleet: med(|r| r.creates_per_s_with_fleet),
        api_cpu_ms_per_create_alone: med(|r| r.api_cpu_ms_per_create_alone),
        api_cpu_ms_per_create_with_fleet: med(|r| r.api_cpu_ms_per_create_with_fleet),
        coordinator_cpu_seconds: med(|r| r.coordinator_cpu_seconds),
        worker_cpu_seconds: med(|r| r.worker_cpu_seconds),
    };
    write_json(
        &args.output,
        &json!({
            "benchmark": "memory",
            "deployments": args.deployments,
            "replicas": args.replicas,
            "pods": args.pods,
            "namespaces": args.namespaces,
            "runs": runs,
            "median": medians,
        }),
    )?;
    println!(
        "| coordinator RSS ready | after {} Deployments × {} | with {} more pods | bytes per cached pod | coordinator peak | worker peak | pod creates/s alone | with the fleet | slowdown | API CPU ms/create alone | with the fleet | coordinator CPU s | worker CPU s |",
        args.deployments, args.replicas, args.pods
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {:.0} MiB | {:.0} MiB | {:.0} MiB | {:.0} | {:.0} MiB | {:.0} MiB | {:.0} | {:.0} | {:.1} % | {:.2} | {:.2} | {:.1} | {:.1} |",
        medians.coordinator_ready_mib,
        medians.coordinator_rollout_mib,
        medians.coordinator_pods_mib,
        medians.bytes_per_pod,
        medians.coordinator_peak_mib,
        medians.worker_peak_mib,
        medians.creates_per_s_alone,
        medians.creates_per_s_with_fleet,
        (1.0 - medians.creates_per_s_with_fleet / medians.creates_per_s_alone) * 100.0,
        medians.api_cpu_ms_per_create_alone,
        medians.api_cpu_ms_per_create_with_fleet,
        medians.coordinator_cpu_seconds,
        medians.worker_cpu_seconds,
    );
    println!(
        "\nmedians of {} runs; JSON written to {}",
        args.runs,
        args.output.display()
    );
    Ok(())
}

async fn one_run(
    args: &MemoryArgs,
    fleet: &mut LocalFleet,
    alone: Creates,
) -> anyhow::Result<RunResult> {
    tokio::time::sleep(args.settle).await;
    let coordinator_ready_mib = rss_mib(fleet.coordinator())?;
    let coordinator_cpu_ready = cpu_seconds(fleet.coordinator())?;
    let worker_cpu_ready = cpu_seconds(&fleet.workers()[0])?;

    roll_out(
        fleet,
        args.deployments,
        args.replicas,
        Goal::Updated,
        args.timeout,
    )
    .await?;
    tokio::time::sleep(args.settle).await;
    let coordinator_rollout_mib = rss_mib(fleet.coordinator())?;

    let with_fleet = create_bare_pods(fleet, args).await?;
    let expected = args.pods + args.deployments * usize::try_from(args.replicas)?;
    wait_for_cached_pods(fleet, expected, args.timeout).await?;
    tokio::time::sleep(args.settle).await;
    let coordinator_pods_mib = rss_mib(fleet.coordinator())?;
    fleet.check_running()?;
    Ok(RunResult {
        coordinator_ready_mib,
        coordinator_rollout_mib,
        coordinator_pods_mib,
        coordinator_peak_mib: peak_rss_mib(fleet.coordinator())?,
        worker_peak_mib: peak_rss_mib(&fleet.workers()[0])?,
        bytes_per_pod: (coordinator_pods_mib - coordinator_rollout_mib) * 1024.0 * 1024.0
            / args.pods as f64,
        creates_per_s_alone: alone.per_second,
        creates_per_s_with_fleet: with_fleet.per_second,
        api_cpu_ms_per_create_alone: alone.api_cpu_ms_each,
        api_cpu_ms_per_create_with_fleet: with_fleet.api_cpu_ms_each,
        coordinator_cpu_seconds: cpu_seconds(fleet.coordinator())? - coordinator_cpu_ready,
        worker_cpu_seconds: cpu_seconds(&fleet.workers()[0])? - worker_cpu_ready,
    })
}

/// What creating the bare pods took.
#[derive(Debug, Clone, Copy)]
struct Creates {
    /// Pod creates per second.
    per_second: f64,
    /// The API server's CPU per create, ms; NaN when it is not a process of ours.
    api_cpu_ms_each: f64,
}

/// The API server's CPU seconds so far, or NaN on a cluster of the user's.
fn api_cpu_seconds(fleet: &LocalFleet) -> anyhow::Result<f64> {
    fleet.devcluster().map_or(Ok(f64::NAN), cpu_seconds)
}

/// Creates the namespaces `pods-0` … and `args.pods` bare pods spread over them.
async fn create_bare_pods(fleet: &mut LocalFleet, args: &MemoryArgs) -> anyhow::Result<Creates> {
    let mut namespaces = Vec::with_capacity(args.namespaces);
    for i in 0..args.namespaces {
        namespaces.push(fleet.create_namespace(&format!("pods-{i}")).await?);
    }
    let client = fleet.client.clone();
    let api_cpu_start = api_cpu_seconds(fleet)?;
    let start = Instant::now();
    futures::stream::iter(0..args.pods)
        .map(|i| {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespaces[i % namespaces.len()]);
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("bare-{i}"), "labels": {"bench": "memory"}},
                    "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
                }))?;
                pods.create(&PostParams::default(), &pod)
                    .await
                    .with_context(|| format!("cannot create pod bare-{i}"))
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    let elapsed = start.elapsed().as_secs_f64();
    Ok(Creates {
        per_second: args.pods as f64 / elapsed,
        api_cpu_ms_each: (api_cpu_seconds(fleet)? - api_cpu_start) * 1000.0 / args.pods as f64,
    })
}

/// Waits until the leader's pod informer caches `expected` pods.
async fn wait_for_cached_pods(
    fleet: &mut LocalFleet,
    expected: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let status = fleet.status().await?;
        let cached = status
            .informers
            .iter()
            .find(|i| i.kind == "v1/pods")
            .map_or(0, |i| i.objects);
        if cached >= expected as u64 {
            return Ok(());
        }
        fleet.check_running()?;
        if Instant::now() > deadline {
            bail!("the coordinator cached {cached} of {expected} pods after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
