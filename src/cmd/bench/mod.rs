//! `flotilla bench …`: benchmarks that write machine-readable results and print the table quoted in
//! BENCHMARKS.md. `dispatch` measures the fleet core alone (no-op reconciles, in-process);
//! `rollout` measures a whole fleet of processes rolling out Deployments against the devcluster;
//! `jobs` measures the fleet running many Jobs to completion on simulated nodes; `endpoints` the
//! EndpointSlice writes and latency while pods flip readiness; `idle` measures what
//! an idle fleet's processes cost; `scaleout` what more workers buy an I/O-bound controller; `memory`
//! what the coordinator's caches cost; `chaos` whether the fleet keeps its promises while workers,
//! leaders, links and etcd break on a seeded schedule; `bounds` what one controller's queue costs at
//! a million keys; `scale` the coordinator at 100,000 pods.

mod bounds;
mod chaos;
mod create_many;
mod dispatch;
mod done_watch;
mod endpoints;
mod fleet_usage;
mod idle;
mod in_process;
mod jobs;
mod local_fleet;
mod memory;
mod otlp_sink;
mod process_stats;
mod rollout;
mod run_report;
mod scale;
mod scaleout;

use std::path::Path;

/// Flags of `flotilla bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(clap::Subcommand, Debug)]
enum Bench {
    /// Fleet-core throughput and latency with no-op reconciles.
    Dispatch(dispatch::DispatchArgs),
    /// Time, API requests and memory to roll out Deployments with the built-in controllers.
    Rollout(rollout::RolloutArgs),
    /// Time, API requests, CPU and memory to run many Jobs to completion with the built-in `job`
    /// controller.
    Jobs(jobs::JobsArgs),
    /// API writes and latency of the built-in `endpointslice` controller while one Service's pods
    /// flip readiness.
    Endpoints(endpoints::EndpointsArgs),
    /// CPU of an idle coordinator and worker: fresh, and settled after a small rollout.
    Idle(idle::IdleArgs),
    /// Throughput of an I/O-bound controller with 1, 2, 4, 8 workers, plotted.
    Scaleout(scaleout::ScaleoutArgs),
    /// The coordinator's memory with a rollout's objects and many bare pods, and the fleet's effect on
    /// other clients' pod creates.
    Memory(memory::MemoryArgs),
    /// Deployments rolled out twice while workers and leaders are killed, links cut and etcd
    /// restarted on a seeded schedule; checks pod counts, overlapping reconciles, lost keys and
    /// maxSurge, and reports into RELIABILITY.md.
    Chaos(chaos::ChaosArgs),
    /// Time and memory of one controller's workqueue at a million keys.
    Bounds(bounds::BoundsArgs),
    /// The coordinator at 100,000 pods and 10,000 Deployments: memory per object, cold start, the
    /// peak of a forced relist, failover with a cold and a hot standby.
    Scale(scale::ScaleArgs),
}

/// Runs a benchmark.
///
/// # Errors
/// When the benchmark cannot set up its fleet, a run does not finish in its bound, or the result
/// cannot be written.
pub async fn run(args: Args) -> anyhow::Result<()> {
    // `bench dispatch` installs logging itself: with tracing on, the subscriber carries the exporter.
    if !matches!(args.bench, Bench::Dispatch(_)) {
        flotilla_common::init_logging(flotilla_common::LogFormat::Text);
    }
    match args.bench {
        Bench::Dispatch(args) => dispatch::run(args).await,
        Bench::Rollout(args) => rollout::run(args).await,
        Bench::Jobs(args) => jobs::run(args).await,
        Bench::Endpoints(args) => endpoints::run(args).await,
        Bench::Idle(args) => idle::run(args).await,
        Bench::Scaleout(args) => scaleout::run(args).await,
        Bench::Memory(args) => memory::run(args).await,
        Bench::Bounds(args) => bounds::run(args).await,
        Bench::Chaos(args) => chaos::run(args).await,
        Bench::Scale(args) => scale::run(args).await,
    }
}

/// The `p` quantile (0..=1) of an ascending slice, nearest rank; NaN when empty.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// The median (the upper one of an even count); NaN when empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// Writes `value` as pretty JSON to `path`, creating its directory.
fn write_json(path: &Path, value: &serde_json::Value) -> anyhow::Result<()> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(value)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_odd_count_is_the_middle_value() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 51.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
    }
}
