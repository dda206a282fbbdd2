//! How the fleet benchmarks that create many objects and wait for all of them (`rollout`, `jobs`)
//! report: one line per run on stderr, a JSON entry with the runs and their medians per fleet
//! configuration, and a Markdown table of the medians on stdout.

use serde_json::{Value, json};

use super::fleet_usage::Usage;
use super::median;

/// What a benchmark creates and waits for, as its report names it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unit {
    /// One of them, capitalized as its kind: `Deployment`.
    pub one: &'static str,
    /// Many of them: `Deployments`.
    pub many: &'static str,
    /// The kind in JSON keys: `deployment` (`requests_per_deployment`).
    pub key: &'static str,
    /// What they all reached when the clock stops: `rolled out`.
    pub done: &'static str,
}

/// One measured run.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct RunResult {
    /// First create → every object reached the goal.
    pub seconds: f64,
    /// First create → last create answered.
    pub create_seconds: f64,
    /// What the fleet used meanwhile.
    #[serde(flatten)]
    pub usage: Usage,
}

/// A fleet configuration: how many workers, each with which client rate limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Budget {
    pub workers: usize,
    /// Every worker's --kube-api-qps.
    pub qps: f32,
    /// Every worker's --kube-api-burst.
    pub burst: u32,
}

/// Prints one run's line, and its requests by verb and resource per object, to stderr.
pub(super) fn print_run(unit: Unit, budget: Budget, run: usize, n: usize, result: &RunResult) {
    let usage = &result.usage;
    let per = n as f64;
    eprintln!(
        "workers={} qps={}/{} run={run}: all {} in {:.1}s (created in {:.1}s), {:.0} requests ({:.1}/{}), CPU coordinator {:.1}s workers {:.1?}s devcluster {:.1}s, peak RSS coordinator {:.0} MiB, workers {:?} MiB",
        budget.workers,
        budget.qps,
        budget.burst,
        unit.done,
        result.seconds,
        result.create_seconds,
        usage.requests,
        usage.requests / per,
        unit.one,
        usage.coordinator_cpu_seconds,
        usage.worker_cpu_seconds,
        usage.devcluster_cpu_seconds,
        usage.coordinator_peak_rss_mib,
        usage.worker_peak_rss_mib
    );
    for (verb, count) in &usage.requests_by_verb {
        eprintln!("    {verb}: {:.2}/{}", count / per, unit.one);
    }
    eprintln!(
        "  settled (Events written in the background included): {:.0} requests ({:.1}/{})",
        usage.settled_requests,
        usage.settled_requests / per,
        unit.one
    );
    for (verb, count) in &usage.settled_requests_by_verb {
        eprintln!("    {verb}: {:.2}/{}", count / per, unit.one);
    }
}

/// The JSON entry of one configuration: its budget, its runs and their medians; requests per object
/// divide by `n`.
pub(super) fn configuration(unit: Unit, budget: Budget, n: usize, runs: &[RunResult]) -> Value {
    let med = |f: &dyn Fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    let per = n as f64;
    let requests = med(&|r| r.usage.requests);
    let settled = med(&|r| r.usage.settled_requests);
    json!({
        "workers": budget.workers,
        "kube_api_qps": budget.qps,
        "kube_api_burst": budget.burst,
        "runs": runs,
        "median": {
            "seconds": med(&|r| r.seconds),
            "create_seconds": med(&|r| r.create_seconds),
            "requests": requests,
            format!("requests_per_{}", unit.key): requests / per,
            format!("settled_requests_per_{}", unit.key): settled / per,
            "requests_per_second": med(&|r| r.usage.requests / r.seconds),
            "requests_not_2xx": med(&|r| r.usage.requests_not_2xx),
            "coordinator_peak_rss_mib": med(&|r| r.usage.coordinator_peak_rss_mib),
            "worker_peak_rss_mib_max": med(&|r| r.usage.worker_peak_rss_mib_max()),
            "devcluster_peak_rss_mib": med(&|r| r.usage.devcluster_peak_rss_mib),
            "fleet_cpu_seconds": med(&|r| r.usage.fleet_cpu_seconds()),
            "coordinator_cpu_seconds": med(&|r| r.usage.coordinator_cpu_seconds),
            "devcluster_cpu_seconds": med(&|r| r.usage.devcluster_cpu_seconds),
        }
    })
}

/// Prints the Markdown table of the medians of `configurations` (entries of [`configuration`]).
pub(super) fn print_table(unit: Unit, configurations: &[Value]) {
    println!(
        "| workers | qps / burst | runs | all {} s (median) | API requests | requests / {} | settled requests / {} | requests/s | fleet CPU s | coordinator peak RSS MiB | worker peak RSS MiB (largest) |",
        unit.done, unit.one, unit.one
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in configurations {
        let m = &r["median"];
        let f = |key: &str| m[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {} | {} / {} | {} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} |",
            r["workers"],
            r["kube_api_qps"],
            r["kube_api_burst"],
            r["runs"].as_array().map_or(0, Vec::len),
            f("seconds"),
            f("requests"),
            f(&format!("requests_per_{}", unit.key)),
            f(&format!("settled_requests_per_{}", unit.key)),
            f("requests_per_second"),
            f("fleet_cpu_seconds"),
            f("coordinator_peak_rss_mib"),
            f("worker_peak_rss_mib_max"),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const JOBS: Unit = Unit {
        one: "Job",
        many: "Jobs",
        key: "job",
        done: "complete",
    };

    fn run(seconds: f64, requests: f64, settled_requests: f64) -> RunResult {
        RunResult {
            seconds,
            create_seconds: 0.5,
            usage: Usage {
                requests,
                requests_by_method: [("POST".to_owned(), requests)].into(),
                requests_by_verb: [("create pods".to_owned(), requests)].into(),
                requests_not_2xx: 0.0,
                settled_requests,
                settled_requests_by_verb: [("create pods".to_owned(), settled_requests)].into(),
                coordinator_peak_rss_mib: 40.0,
                worker_peak_rss_mib: vec![30.0, 50.0],
                devcluster_peak_rss_mib: f64::NAN,
                coordinator_cpu_seconds: 1.0,
                worker_cpu_seconds: vec![2.0, 3.0],
                devcluster_cpu_seconds: f64::NAN,
            },
        }
    }

    #[test]
    fn a_configuration_gives_medians_with_requests_per_object_named_by_its_kind() {
        let budget = Budget {
            workers: 2,
            qps: 200.0,
            burst: 300,
        };
        let runs = [
            run(4.0, 100.0, 110.0),
            run(2.0, 300.0, 330.0),
            run(3.0, 200.0, 220.0),
        ];
        let entry = configuration(JOBS, budget, 10, &runs);
        let median = &entry["median"];
        assert_eq!(median["seconds"], 3.0);
        assert_eq!(median["requests_per_job"], 20.0);
        assert_eq!(median["settled_requests_per_job"], 22.0);
        assert_eq!(median["worker_peak_rss_mib_max"], 50.0);
        assert_eq!(median["fleet_cpu_seconds"], 6.0);
        assert!(
            median["devcluster_cpu_seconds"].is_null(),
            "NaN is written as null"
        );
        assert_eq!(entry["runs"].as_array().unwrap().len(), 3);
        assert_eq!(entry["runs"][0]["requests_by_verb"]["create pods"], 100.0);
        assert_eq!(entry["workers"], 2);
    }
}
