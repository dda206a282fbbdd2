//! `flotilla bench jobs`: a whole fleet of real processes — devcluster with simulated nodes, one
//! coordinator, N workers running the built-in `job` controller — runs many Jobs to completion at
//! once. Reports the time from the first create until every Job has the Complete condition, the API
//! requests the workers made (their `rest_client_requests_total`, and by verb and resource) — when
//! the last Job completed, and settled, once the Events written in the background are in — and the
//! CPU seconds and peak RSS of the devcluster, the coordinator and every worker.
//!
//! On devcluster the node simulator runs a pod of restartPolicy Never and reports it Succeeded about
//! a second later (`flotilla devcluster --job-pod-duration`), so the time is the controller's and the
//! API server's, not the work's. With `--kubeconfig` the benchmark runs against that cluster's nodes
//! as `bench rollout` does (see `local_fleet`), and the pods run busybox's `true`.
//!
//! Every run gets a fresh etcd, devcluster and fleet, so no run inherits another's objects, history
//! or warm caches.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use serde_json::json;

use super::create_many::create_all;
use super::done_watch::DoneWatch;
use super::fleet_usage::{CpuMark, Usage};
use super::local_fleet::{FleetShape, LocalFleet};
use super::run_report::{self, Budget, RunResult, Unit};
use super::write_json;

/// The namespace the Jobs are created in (with the run's suffix on a cluster of the user's).
const NAMESPACE: &str = "bench-jobs";

/// What the jobs benchmark creates and waits for, as its report names it.
const UNIT: Unit = Unit {
    one: "Job",
    many: "Jobs",
    key: "job",
    done: "complete",
};

/// The image of the Jobs' pods: the node simulator ignores it; a real node runs its `true`.
const IMAGE: &str = "registry.k8s.io/busybox:1.36";

/// Flags of `flotilla bench jobs`.
#[derive(clap::Args, Debug)]
pub struct JobsArgs {
    /// Jobs per run.
    #[arg(long, default_value_t = 100)]
    jobs: usize,
    /// `spec.completions` of every Job: pods that must succeed.
    #[arg(long, default_value_t = 5)]
    completions: i32,
    /// `spec.parallelism` of every Job: pods at once [default: --completions, so every pod of a Job
    /// starts at once].
    #[arg(long)]
    parallelism: Option<i32>,
    /// Runs; the report gives medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Workers of the fleet.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// --kube-api-qps of every worker (kube-controller-manager's default: 20; raise it with
    /// --kube-api-burst to measure the fleet with a larger API budget).
    #[arg(long, default_value_t = 20.0)]
    kube_api_qps: f32,
    /// --kube-api-burst of every worker (kube-controller-manager's default: 30).
    #[arg(long, default_value_t = 30)]
    kube_api_burst: u32,
    /// --concurrent-job-syncs of every worker (kube-controller-manager's default: 5).
    #[arg(long, default_value_t = 5)]
    concurrent_job_syncs: u32,
    /// Simulated nodes in the devcluster (each takes up to 1000 pods); pods need at least one.
    /// Ignored with --kubeconfig.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Give up on a run when the Jobs are not all complete within this long.
    #[arg(long, default_value = "20m", value_parser = flotilla_common::parse_duration)]
    timeout: Duration,
    /// Where to write the JSON result.
    #[arg(long, default_value = "benchmarks/jobs.json")]
    output: PathBuf,
    /// Run against the cluster of this kubeconfig instead of a fresh devcluster per run: the
    /// benchmark's namespace gets a name unique to the run and the label `flotilla.dev/bench=<run>`,
    /// the fleet is scoped to that label, and the namespace is deleted afterwards. A
    /// kube-controller-manager running there reconciles the same Jobs unless its job controller is
    /// off.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

impl JobsArgs {
    /// `--parallelism`, or `--completions` when not given.
    fn parallelism(&self) -> i32 {
        self.parallelism.unwrap_or(self.completions)
    }

    fn budget(&self) -> Budget {
        Budget {
            workers: self.workers,
            qps: self.kube_api_qps,
            burst: self.kube_api_burst,
        }
    }

    /// # Errors
    /// When a count is not positive, the rate limit is not a number of 0 or more, or pods could not
    /// run.
    fn validate(&self) -> anyhow::Result<()> {
        if self.jobs == 0 || self.runs == 0 || self.workers == 0 {
            bail!("--jobs, --runs and --workers must be 1 or more");
        }
        if self.completions < 1 || self.parallelism() < 1 {
            bail!("--completions and --parallelism must be 1 or more");
        }
        if !self.kube_api_qps.is_finite() || self.kube_api_qps < 0.0 {
            bail!("--kube-api-qps must be a number of 0 or more");
        }
        if self.nodes == 0 && self.kubeconfig.is_none() {
            bail!("the Jobs' pods need nodes to run on: give --nodes 1 or more");
        }
        Ok(())
    }
}

/// Runs `flotilla bench jobs`.
pub(super) async fn run(args: JobsArgs) -> anyhow::Result<()> {
    args.validate()?;
    let flotilla = std::env::current_exe()?;
    let budget = args.budget();
    let mut runs = Vec::new();
    // The fewest Jobs seen Complete at the end of a run: every run waits for all, so this is --jobs.
    let mut complete = usize::MAX;
    for run in 0..args.runs {
        let (result, done) = one_run(&args, &flotilla, run).await.with_context(|| {
            format!(
                "{} worker(s) at qps {} / burst {}, run {run}",
                budget.workers, budget.qps, budget.burst
            )
        })?;
        run_report::print_run(UNIT, budget, run, args.jobs, &result);
        complete = complete.min(done);
        runs.push(result);
    }
    let mut configuration = run_report::configuration(UNIT, budget, args.jobs, &runs);
    configuration["complete"] = json!(complete);
    let report = vec![configuration];
    let result = json!({
        "benchmark": "jobs",
        "jobs": args.jobs,
        "completions": args.completions,
        "parallelism": args.parallelism(),
        "nodes": args.kubeconfig.is_none().then_some(args.nodes),
        "concurrent_job_syncs": args.concurrent_job_syncs,
        "results": report,
    });
    write_json(&args.output, &result)?;
    run_report::print_table(UNIT, &report);
    println!(
        "\n{complete} of {} Jobs complete in every run; JSON written to {}",
        args.jobs,
        args.output.display()
    );
    Ok(())
}

/// One run on a fresh etcd, devcluster and fleet (or the user's cluster); every process is stopped
/// before it returns. Returns the result and how many Jobs were Complete at the end. On failure the
/// logs are kept and the error names their directory.
async fn one_run(
    args: &JobsArgs,
    flotilla: &Path,
    run: usize,
) -> anyhow::Result<(RunResult, usize)> {
    let worker_flags = [
        "--kube-api-qps",
        &args.kube_api_qps.to_string(),
        "--kube-api-burst",
        &args.kube_api_burst.to_string(),
        "--concurrent-job-syncs",
        &args.concurrent_job_syncs.to_string(),
    ];
    let mut fleet = LocalFleet::start(
        flotilla,
        &FleetShape {
            name: format!("jobs-{}w-{}qps-{run}", args.workers, args.kube_api_qps),
            workers: args.workers,
            // The job controller creates the pods itself: no other controller is involved.
            controllers: &["job"],
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

/// Creates the Jobs and waits until every one is Complete.
async fn measure(args: &JobsArgs, fleet: &mut LocalFleet) -> anyhow::Result<(RunResult, usize)> {
    let jobs: Api<Job> = Api::namespaced(fleet.client.clone(), fleet.namespace());
    let mut watch = DoneWatch::start(jobs.clone(), UNIT, complete);
    // The clock starts at the first create: from then on the controller may see work.
    let cpu = CpuMark::now(fleet)?;
    let start = Instant::now();
    let (completions, parallelism) = (args.completions, args.parallelism());
    create_all(&jobs, UNIT, args.jobs, |i| {
        job_object(i, completions, parallelism)
    })
    .await?;
    let create_seconds = start.elapsed().as_secs_f64();

    watch.wait_for(args.jobs, fleet, args.timeout).await?;
    let seconds = start.elapsed().as_secs_f64();
    // Read before anything stops, so they describe the Jobs' run.
    let usage = Usage::read(fleet, &cpu).await?;
    let result = RunResult {
        seconds,
        create_seconds,
        usage,
    };
    Ok((result, watch.count()))
}

/// A NonIndexed Job `job-{i}` of `completions` pods, `parallelism` at a time, restartPolicy Never,
/// with the API's defaults for everything else (backoffLimit 6, no deadline).
fn job_object(i: usize, completions: i32, parallelism: i32) -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": format!("job-{i}")},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "work", "image": IMAGE, "command": ["true"]}],
            }},
        },
    })
}

/// Whether `job` has the condition Complete, True: every completion succeeded and its controller
/// finished with it.
fn complete(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Complete" && c.status == "True")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: JobsArgs,
    }

    fn args(flags: &[&str]) -> JobsArgs {
        Cli::try_parse_from(std::iter::once("jobs").chain(flags.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn parallelism_defaults_to_the_completions() {
        let defaults = args(&[]);
        assert_eq!((defaults.jobs, defaults.completions), (100, 5));
        assert_eq!(defaults.parallelism(), 5);
        assert_eq!(args(&["--completions", "2"]).parallelism(), 2);
        assert_eq!(
            args(&["--completions", "4", "--parallelism", "1"]).parallelism(),
            1
        );
        assert!(defaults.validate().is_ok());
    }

    #[test]
    fn counts_that_cannot_run_are_refused() {
        for bad in [
            &["--jobs", "0"][..],
            &["--completions", "0"],
            &["--parallelism", "0"],
            &["--workers", "0"],
            &["--nodes", "0"],
            &["--kube-api-qps", "NaN"],
        ] {
            assert!(args(bad).validate().is_err(), "{bad:?} accepted");
        }
        assert!(
            args(&["--nodes", "0", "--kubeconfig", "/k"])
                .validate()
                .is_ok(),
            "a cluster of the user's brings its own nodes"
        );
    }

    #[test]
    fn the_job_object_parses_with_its_completions_and_parallelism() {
        let job: Job = serde_json::from_value(job_object(7, 5, 2)).unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("job-7"));
        let spec = job.spec.unwrap();
        assert_eq!((spec.completions, spec.parallelism), (Some(5), Some(2)));
        assert_eq!(
            spec.template.spec.unwrap().restart_policy.as_deref(),
            Some("Never")
        );
    }

    fn job(conditions: serde_json::Value) -> Job {
        let mut object = job_object(0, 1, 1);
        object["status"] = json!({ "conditions": conditions });
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn a_job_counts_only_with_the_complete_condition_true() {
        assert!(complete(&job(json!([
            {"type": "SuccessCriteriaMet", "status": "True"},
            {"type": "Complete", "status": "True"},
        ]))));
        assert!(!complete(&job(json!([
            {"type": "SuccessCriteriaMet", "status": "True"}
        ]))));
        assert!(!complete(&job(
            json!([{"type": "Complete", "status": "False"}])
        )));
        assert!(!complete(&job(
            json!([{"type": "Failed", "status": "True"}])
        )));
        assert!(!complete(&job(json!(null))));
        assert!(!complete(
            &serde_json::from_value(job_object(0, 1, 1)).unwrap()
        ));
    }
}
