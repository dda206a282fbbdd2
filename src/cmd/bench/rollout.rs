//! `flotilla bench rollout`: a whole fleet of real processes — devcluster (optionally with simulated
//! nodes), one coordinator, N workers running the built-in `deployment` and `replicaset` controllers —
//! rolls out many Deployments at once. Reports the time until every Deployment has all its replicas
//! updated (`--until updated`, the default: no nodes needed, the workload kube-controller-manager was
//! measured on) or Available (`--until available`, with simulated nodes), the API requests the
//! workers made (their `rest_client_requests_total`, and by verb and resource) — when the rollout is
//! done, and settled, once the Events written in the background are in — and the peak RSS of
//! coordinator and workers.
//!
//! Every run gets a fresh etcd, devcluster and fleet, so no run inherits another's objects, history
//! or warm caches.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::json;

use super::create_many::create_all;
use super::done_watch::DoneWatch;
use super::fleet_usage::{CpuMark, Usage};
use super::local_fleet::{self, LocalFleet};
use super::run_report::{self, Budget, RunResult, Unit};
use super::write_json;

/// The namespace the Deployments are created in (with the run's suffix on a cluster of the user's).
pub(super) const NAMESPACE: &str = "bench";

/// What the rollout benchmark creates and waits for, as its report names it.
const UNIT: Unit = Unit {
    one: "Deployment",
    many: "Deployments",
    key: "deployment",
    done: "rolled out",
};

/// Flags of `flotilla bench rollout`.
#[derive(clap::Args, Debug)]
pub struct RolloutArgs {
    /// Deployments per run.
    #[arg(long, default_value_t = 500)]
    deployments: usize,
    /// `spec.replicas` of every Deployment.
    #[arg(long, default_value_t = 4)]
    replicas: i32,
    /// Runs per configuration (unless the configuration says otherwise); the report gives medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Fleet configurations to measure, comma-separated, each `WORKERS@QPS/BURST` with an optional
    /// `xRUNS` suffix overriding --runs (e.g. `1@20/30x1`). QPS and burst are every worker's
    /// --kube-api-qps and --kube-api-burst. The default starts with kube-controller-manager's defaults.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1@20/30,1@200/300,2@200/300,4@200/300"
    )]
    configs: Vec<FleetShape>,
    /// --concurrent-deployment-syncs of every worker (kube-controller-manager's default: 5).
    #[arg(long, default_value_t = 5)]
    concurrent_deployment_syncs: u32,
    /// --concurrent-replicaset-syncs of every worker (kube-controller-manager's default: 5).
    #[arg(long, default_value_t = 5)]
    concurrent_replicaset_syncs: u32,
    /// Simulated nodes in the devcluster (each takes up to 1000 pods); `--until available` needs them.
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// When a Deployment counts as rolled out.
    #[arg(long, value_enum, default_value_t = Goal::Updated)]
    until: Goal,
    /// Give up on a run when the Deployments are not all Available within this long.
    #[arg(long, default_value = "20m", value_parser = flotilla_common::parse_duration)]
    timeout: Duration,
    /// Where to write the JSON result.
    #[arg(long, default_value = "benchmarks/rollout.json")]
    output: PathBuf,
    /// Run against the cluster of this kubeconfig instead of a fresh devcluster per run: the
    /// benchmark's namespaces get names unique to the run and the label `flotilla.dev/bench=<run>`,
    /// the fleet is scoped to that label, and the namespaces are deleted afterwards.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

/// When a Deployment counts as rolled out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Goal {
    /// Its controller observed it and every replica is updated: all pods of the new ReplicaSet exist.
    Updated,
    /// As `updated`, and every replica is available and the Available condition is True (pods must
    /// run, so the devcluster needs simulated nodes).
    Available,
}

/// One fleet configuration: how many workers, each with which client rate limit.
#[derive(Debug, Clone, Copy, PartialEq)]
struct FleetShape {
    workers: usize,
    qps: f32,
    burst: u32,
    /// Runs of this configuration; `None`: --runs.
    runs: Option<usize>,
}

impl FromStr for FleetShape {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?} is not WORKERS@QPS/BURST[xRUNS], e.g. 2@200/300 or 1@20/30x1");
        let (workers, rest) = s.split_once('@').ok_or_else(bad)?;
        let (qps, rest) = rest.split_once('/').ok_or_else(bad)?;
        let (burst, runs) = match rest.split_once('x') {
            Some((burst, runs)) => (burst, Some(runs.parse().map_err(|_| bad())?)),
            None => (rest, None),
        };
        let shape = FleetShape {
            workers: workers.parse().map_err(|_| bad())?,
            qps: qps.parse().map_err(|_| bad())?,
            burst: burst.parse().map_err(|_| bad())?,
            runs,
        };
        if shape.workers == 0 || shape.runs == Some(0) || !shape.qps.is_finite() || shape.qps < 0.0
        {
            return Err(bad());
        }
        Ok(shape)
    }
}

impl FleetShape {
    fn budget(&self) -> Budget {
        Budget {
            workers: self.workers,
            qps: self.qps,
            burst: self.burst,
        }
    }
}

/// Runs `flotilla bench rollout`.
pub(super) async fn run(args: RolloutArgs) -> anyhow::Result<()> {
    if args.until == Goal::Available && args.nodes == 0 && args.kubeconfig.is_none() {
        bail!("--until available needs pods that run: give --nodes");
    }
    let flotilla = std::env::current_exe()?;
    let mut report = Vec::new();
    for shape in &args.configs {
        let mut runs = Vec::new();
        for run in 0..shape.runs.unwrap_or(args.runs) {
            let result = one_run(&args, &flotilla, shape, run)
                .await
                .with_context(|| {
                    format!(
                        "{} worker(s) at qps {} / burst {}, run {run}",
                        shape.workers, shape.qps, shape.burst
                    )
                })?;
            run_report::print_run(UNIT, shape.budget(), run, args.deployments, &result);
            runs.push(result);
        }
        report.push(run_report::configuration(
            UNIT,
            shape.budget(),
            args.deployments,
            &runs,
        ));
    }
    let result = json!({
        "benchmark": "rollout",
        "deployments": args.deployments,
        "replicas": args.replicas,
        "nodes": args.nodes,
        "until": args.until,
        "concurrent_deployment_syncs": args.concurrent_deployment_syncs,
        "concurrent_replicaset_syncs": args.concurrent_replicaset_syncs,
        "results": report,
    });
    write_json(&args.output, &result)?;
    run_report::print_table(UNIT, &report);
    println!("\nJSON written to {}", args.output.display());
    Ok(())
}

/// One run on a fresh etcd, devcluster and fleet; every process is stopped before it returns. On
/// failure the logs are kept and the error names their directory.
async fn one_run(
    args: &RolloutArgs,
    flotilla: &Path,
    shape: &FleetShape,
    run: usize,
) -> anyhow::Result<RunResult> {
    let worker_flags = [
        "--kube-api-qps",
        &shape.qps.to_string(),
        "--kube-api-burst",
        &shape.burst.to_string(),
        "--concurrent-deployment-syncs",
        &args.concurrent_deployment_syncs.to_string(),
        "--concurrent-replicaset-syncs",
        &args.concurrent_replicaset_syncs.to_string(),
    ];
    let mut fleet = LocalFleet::start(
        flotilla,
        &local_fleet::FleetShape {
            name: format!("rollout-{}w-{}qps-{run}", shape.workers, shape.qps),
            workers: shape.workers,
            controllers: &["deployment", "replicaset"],
            worker_flags: worker_flags.map(String::from).to_vec(),
            nodes: args.nodes,
            namespace: NAMESPACE,
            cluster: args.kubeconfig.as_deref(),
        },
    )
    .await?;
    let measured = measure(args, &mut fleet).await;
    fleet.cleanup().await;
    match measured {
        Ok(result) => Ok(result),
        Err(err) => Err(err.context(format!("logs in {}", fleet.keep_logs().display()))),
    }
}

/// Creates the Deployments and waits for them.
async fn measure(args: &RolloutArgs, fleet: &mut LocalFleet) -> anyhow::Result<RunResult> {
    // The clock starts at the first create: from then on the controllers may see work.
    let deployments: Api<Deployment> = Api::namespaced(fleet.client.clone(), fleet.namespace());
    let mut watch = watch_deployments(deployments.clone(), args.replicas, args.until);
    let cpu = CpuMark::now(fleet)?;
    let start = Instant::now();
    create_deployments(&deployments, args.deployments, args.replicas).await?;
    let create_seconds = start.elapsed().as_secs_f64();

    watch
        .wait_for(args.deployments, fleet, args.timeout)
        .await?;
    let seconds = start.elapsed().as_secs_f64();
    // Read before anything stops, so they describe the rollout.
    let usage = Usage::read(fleet, &cpu).await?;
    Ok(RunResult {
        seconds,
        create_seconds,
        usage,
    })
}

/// A watch of `deployments` counting those rolled out to `replicas` (`goal`).
fn watch_deployments(deployments: Api<Deployment>, replicas: i32, goal: Goal) -> DoneWatch {
    DoneWatch::start(deployments, UNIT, move |d| rolled_out(d, replicas, goal))
}

/// Creates Deployments `roll-0` … `roll-{n-1}` of `replicas` replicas.
async fn create_deployments(
    deployments: &Api<Deployment>,
    n: usize,
    replicas: i32,
) -> anyhow::Result<()> {
    create_all(deployments, UNIT, n, |i| deployment_object(i, replicas)).await
}

/// Creates `n` Deployments of `replicas` in the fleet's namespace and waits until all are rolled out
/// (`goal`), checking meanwhile that every process of the fleet still runs.
///
/// # Errors
/// When a create fails, a process exits, or the rollout takes longer than `timeout`.
pub(super) async fn roll_out(
    fleet: &mut LocalFleet,
    n: usize,
    replicas: i32,
    goal: Goal,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(fleet.client.clone(), fleet.namespace());
    let mut watch = watch_deployments(deployments.clone(), replicas, goal);
    create_deployments(&deployments, n, replicas).await?;
    watch.wait_for(n, fleet, timeout).await
}

fn deployment_name(i: usize) -> String {
    format!("roll-{i}")
}

/// A Deployment of `replicas` pause pods with the API's defaults for everything else (RollingUpdate,
/// 25 % surge and unavailability, no minReadySeconds).
fn deployment_object(i: usize, replicas: i32) -> serde_json::Value {
    let name = deployment_name(i);
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    })
}

/// Whether `d` has finished rolling out `replicas` replicas: its controller observed the current
/// generation and every replica is updated; for [`Goal::Available`] also available, with the
/// Available condition True.
fn rolled_out(d: &Deployment, replicas: i32, goal: Goal) -> bool {
    let Some(status) = &d.status else {
        return false;
    };
    let observed = status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(1);
    let available = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Available" && c.status == "True");
    let updated = observed && status.updated_replicas == Some(replicas);
    match goal {
        Goal::Updated => updated,
        Goal::Available => updated && available && status.available_replicas == Some(replicas),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fleet_shapes_parse_with_and_without_a_run_count() {
        assert_eq!(
            "2@200/300".parse::<FleetShape>().unwrap(),
            FleetShape {
                workers: 2,
                qps: 200.0,
                burst: 300,
                runs: None
            }
        );
        assert_eq!("1@20/30x1".parse::<FleetShape>().unwrap().runs, Some(1));
        for bad in [
            "",
            "2",
            "2@200",
            "0@20/30",
            "1@20/30x0",
            "1@-1/30",
            "a@20/30",
        ] {
            assert!(bad.parse::<FleetShape>().is_err(), "{bad:?} parsed");
        }
    }

    fn deployment(status: serde_json::Value) -> Deployment {
        let mut object = deployment_object(0, 4);
        object["metadata"]["generation"] = json!(1);
        object["status"] = status;
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn a_deployment_is_rolled_out_only_when_available_with_every_replica_updated() {
        let done = json!({
            "observedGeneration": 1, "replicas": 4, "updatedReplicas": 4, "availableReplicas": 4,
            "conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True"}],
        });
        assert!(rolled_out(&deployment(done.clone()), 4, Goal::Available));
        assert!(!rolled_out(&deployment(done.clone()), 5, Goal::Available));

        let mut stale = done.clone();
        stale["observedGeneration"] = json!(0);
        assert!(!rolled_out(&deployment(stale), 4, Goal::Available));
        let mut not_updated = done.clone();
        not_updated["updatedReplicas"] = json!(3);
        assert!(!rolled_out(&deployment(not_updated), 4, Goal::Available));
        let mut unavailable = done.clone();
        unavailable["availableReplicas"] = json!(3);
        assert!(!rolled_out(
            &deployment(unavailable.clone()),
            4,
            Goal::Available
        ));
        assert!(
            rolled_out(&deployment(unavailable), 4, Goal::Updated),
            "updated needs no available replica"
        );
        let mut condition_false = done;
        condition_false["conditions"] = json!([{"type": "Available", "status": "False"}]);
        assert!(!rolled_out(
            &deployment(condition_false),
            4,
            Goal::Available
        ));
        assert!(!rolled_out(&deployment(json!(null)), 4, Goal::Available));
        assert!(!rolled_out(&deployment(json!(null)), 4, Goal::Updated));
    }
}
