//! `flotilla bench endpoints`: one Service over N pods on a fresh devcluster (or `--kubeconfig`), a
//! fleet of W workers running the built-in `endpointslice` controller, and P pods a second flipping
//! readiness, as a kubelet's probe would report it. Reports, per run:
//! - the EndpointSlice writes per flip (every write the slices' watch sees while flipping, divided
//!   by the flips: upstream's reconciler rewrites only the slice that holds the pod, so 1.0 is the
//!   floor);
//! - the time from a pod's status write to the first slice write that shows the pod's new readiness
//!   (p50, p99);
//! - flips never seen in a slice within `--settle` after the last flip (must be 0).
//!
//! A flip writes the pod's `Ready` and `ContainersReady` conditions through the status subresource,
//! the way a kubelet does. On devcluster the node simulator reports a pod Ready once and never
//! again, so the flips stick. Every run gets a fresh etcd, devcluster and fleet.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::create_many::create_all;
use super::local_fleet::{FleetShape, LocalFleet};
use super::run_report::Unit;
use super::{median, percentile, write_json};

/// The namespace of the Service and its pods (with the run's suffix on a cluster of the user's).
const NAMESPACE: &str = "bench-endpoints";

/// The Service, and the `app` label of its pods.
const SERVICE: &str = "web";

/// What the benchmark creates, as errors name it.
const PODS: Unit = Unit {
    one: "Pod",
    many: "Pods",
    key: "pod",
    done: "ready",
};

/// Flags of `flotilla bench endpoints`.
#[derive(clap::Args, Debug)]
pub struct EndpointsArgs {
    /// Pods behind the Service.
    #[arg(long, default_value_t = 5000)]
    pods: usize,
    /// Pods flipping readiness per second.
    #[arg(long, default_value_t = 10)]
    flips_per_second: u32,
    /// How long pods flip.
    #[arg(long, default_value = "30s", value_parser = flotilla_common::parse_duration)]
    duration: Duration,
    /// How long to wait after the last flip for every flip to show in a slice.
    #[arg(long, default_value = "30s", value_parser = flotilla_common::parse_duration)]
    settle: Duration,
    /// Runs; the report gives medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Workers of the fleet.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// --kube-api-qps of every worker (kube-controller-manager's default: 20).
    #[arg(long, default_value_t = 20.0)]
    kube_api_qps: f32,
    /// --kube-api-burst of every worker (kube-controller-manager's default: 30).
    #[arg(long, default_value_t = 30)]
    kube_api_burst: u32,
    /// --max-endpoints-per-slice of every worker (kube-controller-manager's default: 100).
    #[arg(long, default_value_t = 100)]
    max_endpoints_per_slice: u32,
    /// Simulated nodes (each takes up to 1000 pods). Ignored with --kubeconfig.
    #[arg(long, default_value_t = 6)]
    nodes: usize,
    /// Give up on a run when the pods are not all in the slices within this long.
    #[arg(long, default_value = "10m", value_parser = flotilla_common::parse_duration)]
    timeout: Duration,
    /// Where to write the JSON result.
    #[arg(long, default_value = "benchmarks/endpoints.json")]
    output: PathBuf,
    /// Run against the cluster of this kubeconfig instead of a fresh devcluster per run (see `bench
    /// jobs`); a kube-controller-manager there writes the same slices unless its endpointslice
    /// controller is off.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

impl EndpointsArgs {
    /// # Errors
    /// When a count is not positive or the pods cannot run.
    fn validate(&self) -> anyhow::Result<()> {
        if self.pods == 0 || self.runs == 0 || self.workers == 0 || self.flips_per_second == 0 {
            bail!("--pods, --runs, --workers and --flips-per-second must be 1 or more");
        }
        if self.duration.is_zero() {
            bail!("--duration must be longer than zero");
        }
        if !self.kube_api_qps.is_finite() || self.kube_api_qps < 0.0 {
            bail!("--kube-api-qps must be a number of 0 or more");
        }
        if self.kubeconfig.is_none() && self.nodes * 1000 < self.pods {
            bail!(
                "{} pods need at least {} simulated nodes (1000 pods each)",
                self.pods,
                self.pods.div_ceil(1000)
            );
        }
        Ok(())
    }
}

/// What one run measured.
#[derive(Debug, Clone, serde::Serialize)]
struct Flips {
    /// Readiness flips written.
    flips: usize,
    /// EndpointSlice writes seen while flipping and settling.
    slice_writes: usize,
    /// Seconds from each flip to the slice write showing it, ascending.
    #[serde(skip)]
    latencies: Vec<f64>,
    /// Flips no slice showed by the end of `--settle`.
    unseen: usize,
    /// Slices holding the pods once they were all ready.
    slices: usize,
}

impl Flips {
    fn writes_per_flip(&self) -> f64 {
        self.slice_writes as f64 / self.flips.max(1) as f64
    }
}

/// Runs `flotilla bench endpoints`.
pub(super) async fn run(args: EndpointsArgs) -> anyhow::Result<()> {
    args.validate()?;
    let flotilla = std::env::current_exe()?;
    let mut runs = Vec::new();
    for run in 0..args.runs {
        let flips = one_run(&args, &flotilla, run)
            .await
            .with_context(|| format!("{} worker(s), run {run}", args.workers))?;
        println!(
            "run {run}: {} flips, {} slice writes ({:.2} per flip), flip → slice p50 {:.0} ms, p99 {:.0} ms, {} unseen, {} slices",
            flips.flips,
            flips.slice_writes,
            flips.writes_per_flip(),
            percentile(&flips.latencies, 0.5) * 1e3,
            percentile(&flips.latencies, 0.99) * 1e3,
            flips.unseen,
            flips.slices,
        );
        runs.push(flips);
    }
    let summary = json!({
        "writes_per_flip": median(runs.iter().map(Flips::writes_per_flip).collect()),
        "p50_ms": median(runs.iter().map(|r| percentile(&r.latencies, 0.5) * 1e3).collect()),
        "p99_ms": median(runs.iter().map(|r| percentile(&r.latencies, 0.99) * 1e3).collect()),
        "unseen": runs.iter().map(|r| r.unseen).sum::<usize>(),
    });
    println!(
        "\nmedian of {} runs, {} pods, {} worker(s): {:.2} slice writes per flip, p50 {:.0} ms, p99 {:.0} ms, {} flips unseen",
        args.runs,
        args.pods,
        args.workers,
        summary["writes_per_flip"].as_f64().unwrap_or(f64::NAN),
        summary["p50_ms"].as_f64().unwrap_or(f64::NAN),
        summary["p99_ms"].as_f64().unwrap_or(f64::NAN),
        summary["unseen"],
    );
    let result = json!({
        "benchmark": "endpoints",
        "pods": args.pods,
        "flips_per_second": args.flips_per_second,
        "duration_seconds": args.duration.as_secs_f64(),
        "workers": args.workers,
        "kube_api_qps": args.kube_api_qps,
        "kube_api_burst": args.kube_api_burst,
        "max_endpoints_per_slice": args.max_endpoints_per_slice,
        "runs": runs,
        "median": summary,
    });
    write_json(&args.output, &result)?;
    println!("JSON written to {}", args.output.display());
    if runs.iter().any(|r| r.unseen > 0) {
        bail!(
            "some flips never showed in a slice; see {}",
            args.output.display()
        );
    }
    Ok(())
}

/// One run on a fresh fleet; every process is stopped before it returns.
async fn one_run(args: &EndpointsArgs, flotilla: &Path, run: usize) -> anyhow::Result<Flips> {
    let worker_flags = [
        "--kube-api-qps".to_owned(),
        args.kube_api_qps.to_string(),
        "--kube-api-burst".to_owned(),
        args.kube_api_burst.to_string(),
        "--max-endpoints-per-slice".to_owned(),
        args.max_endpoints_per_slice.to_string(),
    ];
    let mut fleet = LocalFleet::start(
        flotilla,
        &FleetShape {
            name: format!("endpoints-{}w-{run}", args.workers),
            workers: args.workers,
            controllers: &["endpointslice"],
            worker_flags: worker_flags.to_vec(),
            nodes: args.nodes,
            namespace: NAMESPACE,
            cluster: args.kubeconfig.as_deref(),
        },
    )
    .await?;
    let measured = measure(args, &mut fleet).await;
    fleet.cleanup().await;
    match measured {
        Ok(flips) => Ok(flips),
        Err(err) => Err(err.context(format!("logs in {}", fleet.keep_logs().display()))),
    }
}

/// Flips not yet seen in a slice: the pod's name → the readiness written and when.
type Pending = Arc<Mutex<HashMap<String, (bool, Instant)>>>;

/// Creates the Service and its pods, waits until every pod is a ready endpoint, then flips.
async fn measure(args: &EndpointsArgs, fleet: &mut LocalFleet) -> anyhow::Result<Flips> {
    let namespace = fleet.namespace().to_owned();
    let services: Api<Service> = Api::namespaced(fleet.client.clone(), &namespace);
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": SERVICE},
        "spec": {"selector": {"app": SERVICE}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))?;
    services
        .create(&PostParams::default(), &service)
        .await
        .context("cannot create the Service")?;
    let pods: Api<Pod> = Api::namespaced(fleet.client.clone(), &namespace);
    create_all(&pods, PODS, args.pods, pod_object).await?;
    let slices: Api<EndpointSlice> = Api::namespaced(fleet.client.clone(), &namespace);
    let of_service = ListParams::default().labels(&format!("kubernetes.io/service-name={SERVICE}"));
    let started = Instant::now();
    let slice_count = loop {
        let list = slices.list(&of_service).await?;
        if ready_endpoints(&list.items) == args.pods {
            break list.items.len();
        }
        if started.elapsed() > args.timeout {
            bail!(
                "{} of {} pods ready in the slices after {:?}",
                ready_endpoints(&list.items),
                args.pods,
                args.timeout
            );
        }
        fleet.check_running()?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    let pending: Pending = Arc::default();
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let writes = Arc::new(Mutex::new(0usize));
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(watch_slices(
        slices.clone(),
        of_service,
        listed_tx,
        pending.clone(),
        latencies.clone(),
        writes.clone(),
    ));
    // The first flip waits for the watch's initial list, so no write is missed.
    if !matches!(
        tokio::time::timeout(Duration::from_secs(60), listed).await,
        Ok(Ok(()))
    ) {
        watch.abort();
        bail!("the EndpointSlice watch did not list the slices within 60 s");
    }

    let mut ready = vec![true; args.pods];
    let period = Duration::from_secs_f64(1.0 / f64::from(args.flips_per_second));
    let mut tick = tokio::time::interval(period);
    let flips_end = Instant::now() + args.duration;
    let mut flips = 0usize;
    while Instant::now() < flips_end {
        tick.tick().await;
        let i = (flips * 7919) % args.pods;
        ready[i] = !ready[i];
        let name = pod_name(i);
        pending
            .lock()
            .map_err(|_| anyhow::anyhow!("the pending flips' lock is poisoned"))?
            .insert(name.clone(), (ready[i], Instant::now()));
        pods.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(readiness(ready[i])),
        )
        .await
        .with_context(|| format!("cannot flip pod {name}"))?;
        flips += 1;
    }
    let settle_end = Instant::now() + args.settle;
    while Instant::now() < settle_end && !pending.lock().is_ok_and(|p| p.is_empty()) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watch.abort();
    let unseen = pending.lock().map_or(usize::MAX, |p| p.len());
    let mut latencies = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    latencies.sort_by(f64::total_cmp);
    let slice_writes = writes.lock().map_or(0, |w| *w);
    Ok(Flips {
        flips,
        slice_writes,
        latencies,
        unseen,
        slices: slice_count,
    })
}

/// Follows the Service's slices: says on `listed` when the initial list is in, counts every write
/// after it, and for each endpoint of a pending flip whose readiness now shows, records the time
/// since the flip.
async fn watch_slices(
    slices: Api<EndpointSlice>,
    of_service: ListParams,
    listed_tx: tokio::sync::oneshot::Sender<()>,
    pending: Pending,
    latencies: Arc<Mutex<Vec<f64>>>,
    writes: Arc<Mutex<usize>>,
) {
    let config =
        watcher::Config::default().labels(of_service.label_selector.as_deref().unwrap_or(""));
    let mut stream = std::pin::pin!(watcher(slices, config));
    let mut listed = false;
    let mut listed_tx = Some(listed_tx);
    while let Some(event) = stream.next().await {
        let slice = match event {
            Ok(watcher::Event::InitDone) => {
                listed = true;
                if let Some(tx) = listed_tx.take() {
                    let _ = tx.send(());
                }
                continue;
            }
            Ok(watcher::Event::Apply(slice) | watcher::Event::Delete(slice)) if listed => slice,
            Ok(_) => continue,
            Err(err) => {
                tracing::warn!(error = %err, "the EndpointSlice watch failed; it retries");
                continue;
            }
        };
        if let Ok(mut w) = writes.lock() {
            *w += 1;
        }
        let (Ok(mut pending), Ok(mut latencies)) = (pending.lock(), latencies.lock()) else {
            return;
        };
        for endpoint in &slice.endpoints {
            let Some(name) = endpoint.target_ref.as_ref().and_then(|t| t.name.as_deref()) else {
                continue;
            };
            let shown = endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(true);
            if let Some(&(want, at)) = pending.get(name)
                && want == shown
            {
                latencies.push(at.elapsed().as_secs_f64());
                pending.remove(name);
            }
        }
    }
}

/// How many endpoints of `slices` are ready.
fn ready_endpoints(slices: &[EndpointSlice]) -> usize {
    slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .count()
}

fn pod_name(i: usize) -> String {
    format!("{SERVICE}-{i}")
}

/// Pod `web-{i}`, labelled for the Service, listening on 8080.
fn pod_object(i: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(i), "labels": {"app": SERVICE}},
        "spec": {"containers": [{
            "name": "web",
            "image": "registry.k8s.io/pause:3.10",
            "ports": [{"containerPort": 8080}],
        }]},
    })
}

/// A status merge patch setting the pod's `Ready` and `ContainersReady` conditions, as a kubelet
/// reports a readiness probe's result (a merge patch replaces the list, so the others are restated).
fn readiness(ready: bool) -> Value {
    let status = if ready { "True" } else { "False" };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let condition = |type_: &str, status: &str| json!({"type": type_, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    json!({"status": {"conditions": [
        condition("PodReadyToStartContainers", "True"),
        condition("Initialized", "True"),
        condition("Ready", status),
        condition("ContainersReady", status),
        condition("PodScheduled", "True"),
    ]}})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: EndpointsArgs,
    }

    fn args(flags: &[&str]) -> EndpointsArgs {
        Cli::try_parse_from(std::iter::once("endpoints").chain(flags.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn the_defaults_run_and_impossible_counts_are_refused() {
        assert!(args(&[]).validate().is_ok());
        for bad in [
            &["--pods", "0"][..],
            &["--workers", "0"],
            &["--flips-per-second", "0"],
            &["--duration", "0s"],
            &["--pods", "5000", "--nodes", "4"],
        ] {
            assert!(args(bad).validate().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_flip_restates_every_condition_and_sets_ready_and_containers_ready() {
        let patch = readiness(false);
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        let status = |t: &str| {
            conditions.iter().find(|c| c["type"] == t).unwrap()["status"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(status("Ready"), "False");
        assert_eq!(status("ContainersReady"), "False");
        assert_eq!(status("PodScheduled"), "True");
        assert_eq!(readiness(true)["status"]["conditions"][2]["status"], "True");
    }
}
