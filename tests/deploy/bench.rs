//! `flotilla bench jobs` and `flotilla bench endpoints` end to end, as a user runs them: the binary
//! starts its own etcd, devcluster with simulated nodes, coordinator and worker (or, with
//! `FLOTILLA_TEST_KUBECONFIG`, its fleet on that cluster), runs 3 Jobs of 2 pods to completion — or
//! flips the readiness of a Service's pods — and writes a report that parses and says so. `flotilla
//! bench chaos` runs a short fault schedule on a devcluster of its own and finds no violation, and
//! `flotilla bench scale` measures a small cluster, on a devcluster of its own and on one given by a
//! kubeconfig.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use serde_json::Value;

use super::binaries::{binary, describe};
use crate::support::cluster::{KUBECONFIG_ENV, TestCluster, is_external};

/// The longest a small run may take: start-up, the Jobs (a second or two), and the counters settling.
/// The benchmark's own `--timeout` is shorter, so a stuck run fails with its logs named.
const RUN_BOUND: Duration = Duration::from_secs(180);

/// Runs `flotilla <args>` (with `--kubeconfig` when the tests run against a cluster) within
/// [`RUN_BOUND`].
async fn run_bench(mut args: Vec<String>) -> std::process::Output {
    if let Some(kubeconfig) = std::env::var_os(KUBECONFIG_ENV) {
        args.push("--kubeconfig".to_owned());
        args.push(kubeconfig.to_string_lossy().into_owned());
    }
    run_flotilla(args).await
}

/// Runs `flotilla <args>` as given within [`RUN_BOUND`].
async fn run_flotilla(args: Vec<String>) -> std::process::Output {
    let mut command = tokio::process::Command::new(binary("flotilla"));
    command.args(&args).kill_on_drop(true);
    match tokio::time::timeout(RUN_BOUND, command.output()).await {
        Ok(output) => output.unwrap(),
        Err(_) => panic!(
            "`flotilla {}` still runs after {RUN_BOUND:?}",
            args.join(" ")
        ),
    }
}

#[tokio::test]
async fn bench_jobs_runs_every_job_to_completion_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let output_path = dir.path().join("jobs.json");
    let mut args: Vec<String> = [
        "bench",
        "jobs",
        "--jobs",
        "3",
        "--completions",
        "2",
        "--runs",
        "1",
        "--timeout",
        "90s",
        "--output",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    args.push(output_path.display().to_string());
    let output = run_bench(args).await;
    assert!(output.status.success(), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("3 of 3 Jobs complete in every run"),
        "{}",
        describe(&output)
    );

    // The table's one row: workers, budget, runs, then numbers.
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| 1 |"))
        .unwrap_or_else(|| panic!("no result row\n{}", describe(&output)));
    let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
    assert_eq!(cells.len(), 11, "{row}");
    assert_eq!(cells[1], "20.0 / 30", "KCM's default budget: {row}");
    for cell in &cells[3..] {
        assert!(
            cell.parse::<f64>().is_ok(),
            "{cell:?} of {row} is no number"
        );
    }

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&output_path).unwrap()).unwrap();
    assert_eq!(report["benchmark"], "jobs");
    assert_eq!(report["jobs"], 3);
    assert_eq!(report["completions"], 2);
    assert_eq!(report["parallelism"], 2, "defaults to the completions");
    let result = &report["results"][0];
    assert_eq!(result["complete"], 3, "{report:#}");
    assert_eq!(result["workers"], 1);
    assert_eq!(result["runs"].as_array().map(Vec::len), Some(1));
    let median = &result["median"];
    assert!(median["seconds"].as_f64().unwrap() > 0.0, "{report:#}");
    assert!(
        median["requests_per_job"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    assert!(median["fleet_cpu_seconds"].as_f64().is_some(), "{report:#}");
    assert!(
        median["coordinator_peak_rss_mib"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    let run = &result["runs"][0];
    assert_eq!(run["worker_peak_rss_mib"].as_array().map(Vec::len), Some(1));
    if !is_external() {
        // Alone on its devcluster the fleet's job controller made every pod: 3 Jobs × 2, no more.
        assert_eq!(run["requests_by_verb"]["create pods"], 6.0, "{report:#}");
        assert!(run["devcluster_peak_rss_mib"].as_f64().unwrap() > 0.0);
    }
}

#[tokio::test]
async fn bench_endpoints_sees_every_flip_in_a_slice_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let output_path = dir.path().join("endpoints.json");
    let mut args: Vec<String> = [
        "bench",
        "endpoints",
        "--pods",
        "200",
        "--nodes",
        "1",
        "--flips-per-second",
        "5",
        "--duration",
        "3s",
        "--runs",
        "1",
        "--timeout",
        "90s",
        "--output",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    args.push(output_path.display().to_string());
    let output = run_bench(args).await;
    assert!(output.status.success(), "{}", describe(&output));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&output_path).unwrap()).unwrap();
    assert_eq!(report["benchmark"], "endpoints");
    let run = &report["runs"][0];
    let flips = run["flips"].as_u64().unwrap();
    assert!(flips >= 10, "3 s at 5 a second: {report:#}");
    assert_eq!(run["unseen"], 0, "every flip shows in a slice: {report:#}");
    assert!(
        report["median"]["p99_ms"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    // 200 pods need two slices of 100 at least (more when pods became ready in batches).
    assert!(run["slices"].as_u64().unwrap() >= 2, "{report:#}");
    if !is_external() {
        // Alone on its devcluster only the fleet writes the slices, at most once per flip: the
        // minimal-change reconciler rewrites the one slice holding the pod, and coalesced flips
        // share a write.
        let writes = run["slice_writes"].as_u64().unwrap();
        assert!(writes >= 1 && writes <= flips, "{report:#}");
    }
}

/// `flotilla bench chaos` at CI size: 30 Deployments rolled out twice by 2 coordinators and 2
/// workers while, over 24 s of a fixed seed's schedule, workers and leaders are killed, links cut
/// and etcd restarted; every invariant holds. It restarts its own etcd and devcluster's links, so it
/// runs on the devcluster only.
#[tokio::test]
async fn bench_chaos_survives_kills_cuts_and_an_etcd_restart_with_no_violation() {
    if is_external() {
        eprintln!(
            "skipped: bench chaos restarts its own etcd, which a given cluster does not have"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let output_path = dir.path().join("chaos.json");
    let reliability = dir.path().join("RELIABILITY.md");
    std::fs::write(
        &reliability,
        "# Reliability\n\n## Chaos\n\n<!-- old -->\n\n## Fuzzing\n\nkept\n",
    )
    .unwrap();
    let mut args: Vec<String> = [
        "bench",
        "chaos",
        "--deployments",
        "30",
        "--workers",
        "2",
        "--coordinators",
        "2",
        "--nodes",
        "1",
        "--duration",
        "24s",
        "--worker-kill-interval",
        "5s",
        "--leader-kill-interval",
        "10s",
        "--cut-interval",
        "4s",
        "--cut-duration",
        "2s",
        "--seed",
        "20",
        "--timeout",
        "90s",
        "--output",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    args.push(output_path.display().to_string());
    args.push("--reliability".to_owned());
    args.push(reliability.display().to_string());
    let output = run_bench(args).await;
    assert!(output.status.success(), "{}", describe(&output));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&output_path).unwrap()).unwrap();
    let faults = &report["faults"];
    assert_eq!(
        faults["worker_kills"], 4,
        "kills at 5, 10, 15, 20 s: {report:#}"
    );
    assert!(faults["leader_kills"].as_u64().unwrap() >= 1, "{report:#}");
    assert_eq!(faults["cuts"], 5, "cuts at 4 … 20 s: {report:#}");
    assert_eq!(faults["etcd_restarts"], 1, "{report:#}");
    let invariants = report["invariants"].as_array().unwrap();
    assert_eq!(invariants.len(), 4, "{report:#}");
    for invariant in invariants {
        assert_eq!(invariant["violations"], 0, "{invariant:#}");
    }
    let markdown = std::fs::read_to_string(&reliability).unwrap();
    assert!(markdown.contains("--seed 20"), "{markdown}");
    assert!(!markdown.contains("<!-- old -->"), "{markdown}");
    assert!(markdown.ends_with("## Fuzzing\n\nkept\n"), "{markdown}");
}

/// `flotilla bench scale` at CI size with `pods` pods over `namespaces` namespaces, 20 Deployments,
/// one failover per standby mode, writing its report and plot to the given paths.
fn scale_args(pods: &str, namespaces: &str, output: &Path, plot: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "bench",
        "scale",
        "--pods",
        pods,
        "--deployments",
        "20",
        "--namespaces",
        namespaces,
        "--failovers",
        "1",
        "--timeout",
        "60s",
        "--output",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    args.push(output.display().to_string());
    args.push("--plot".to_owned());
    args.push(plot.display().to_string());
    args
}

/// What every `bench scale` report must show, on any cluster: each kind listed on the cold start, one
/// failover of each standby mode ended in a dispatch by the new leader, and that leader re-dispatched
/// every Deployment and ReplicaSet.
fn assert_cold_start_and_failovers(report: &Value) {
    let readings = &report["readings"];
    let synced = readings["kind_synced_s"].as_object().unwrap();
    for kind in ["apps/v1/deployments", "apps/v1/replicasets", "v1/pods"] {
        assert!(
            synced[kind].as_f64().is_some_and(|s| s > 0.0),
            "{kind} listed on the cold start: {report:#}"
        );
    }
    for mode in ["failover_cold_s", "failover_hot_s"] {
        let times = readings[mode].as_array().unwrap();
        assert_eq!(times.len(), 1, "{mode}: {report:#}");
        assert!(times[0].as_f64().unwrap() > 0.0, "{mode}: {report:#}");
    }
    assert!(
        readings["redispatch_keys"].as_u64().unwrap() >= 40,
        "every Deployment and ReplicaSet re-dispatched by the new leader: {report:#}"
    );
}

/// `flotilla bench scale` at CI size: 300 pods and 20 Deployments over 3 namespaces, one failover per
/// standby mode. Every figure is measured: each kind listed on the cold start, the forced relist
/// listed every kind again, and each failover ended in a dispatch by the new leader. It compacts the
/// devcluster's etcd and cuts the leader's API link, so it runs on the devcluster only.
#[tokio::test]
async fn bench_scale_measures_cold_start_relist_and_failover_and_plots_them() {
    if is_external() {
        eprintln!(
            "skipped: bench scale compacts its own etcd, which a given cluster does not let it"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let output_path = dir.path().join("scale.json");
    let plot_path = dir.path().join("scale.svg");
    let args = scale_args("300", "3", &output_path, &plot_path);
    let output = run_bench(args).await;
    assert!(output.status.success(), "{}", describe(&output));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&output_path).unwrap()).unwrap();
    let readings = &report["readings"];
    assert_cold_start_and_failovers(&report);
    assert!(
        readings["relist_peak_mib"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    let svg = std::fs::read_to_string(&plot_path).unwrap();
    assert!(svg.contains("<svg") && svg.contains("relist"), "{svg}");
}

/// `flotilla bench scale --kubeconfig` at CI size: 200 pods and 20 Deployments over 2 namespaces, one
/// failover per standby mode, on a cluster the benchmark does not own — a devcluster the test starts
/// and names by its kubeconfig, or the cluster of `FLOTILLA_TEST_KUBECONFIG`. Every figure that needs
/// nothing of the cluster is measured; the forced relist, which needs the devcluster's etcd, is named
/// as not measured, with null fields; the run's namespaces are gone (or going) afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn bench_scale_on_a_given_cluster_measures_all_but_the_relist_and_cleans_up() {
    let cluster = TestCluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let output_path = dir.path().join("scale.json");
    let plot_path = dir.path().join("scale.svg");
    let mut args = scale_args("200", "2", &output_path, &plot_path);
    args.push("--kubeconfig".to_owned());
    args.push(cluster.kubeconfig_path().display().to_string());
    let output = run_flotilla(args).await;
    assert!(output.status.success(), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("forced relist: not measured: needs the devcluster's etcd"),
        "{}",
        describe(&output)
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&output_path).unwrap()).unwrap();
    assert_eq!(report["cluster"], "kubeconfig", "{report:#}");
    for figure in ["bytes_per_pod", "bytes_per_deployment_with_replicaset"] {
        assert!(
            report[figure].as_f64().is_some_and(f64::is_finite),
            "{figure}: {report:#}"
        );
    }
    let readings = &report["readings"];
    for rss in ["rss_empty_mib", "rss_deployments_mib", "rss_pods_mib"] {
        assert!(readings[rss].as_f64().unwrap() > 0.0, "{rss}: {report:#}");
    }
    assert_cold_start_and_failovers(&report);
    assert_eq!(
        readings["not_measured"]["forced relist"], "needs the devcluster's etcd",
        "{report:#}"
    );
    for relist in ["relist_steady_mib", "relist_peak_mib", "relist_s"] {
        assert!(readings[relist].is_null(), "{relist}: {report:#}");
    }

    let selector = report["namespace_selector"].as_str().unwrap();
    let left = Api::<Namespace>::all(cluster.client())
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap();
    assert!(
        left.items
            .iter()
            .all(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the run's namespaces are deleted: {:?}",
        left.items
            .iter()
            .map(|ns| ns.metadata.name.clone())
            .collect::<Vec<_>>()
    );
}
