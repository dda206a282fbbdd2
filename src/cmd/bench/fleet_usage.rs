//! What a fleet's processes used while a benchmark measured them: the workers' API requests (their
//! `rest_client_requests_total` by method, `flotilla_kube_requests_total` by verb and resource) when
//! the goal was reached and once settled, and the CPU seconds and peak RSS of the devcluster, the
//! coordinator and every worker.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::local_fleet::LocalFleet;
use super::process_stats::{cpu_seconds, fetch_metrics, peak_rss_mib, samples};

/// How long the workers' request counters must stand still to count as settled.
const SETTLE_QUIET: Duration = Duration::from_secs(2);

/// The longest wait for the counters to settle after the goal was reached.
const SETTLE_MAX: Duration = Duration::from_secs(120);

/// CPU seconds so far of the devcluster (NaN on a cluster of the user's), the coordinator and each
/// worker, in that order: taken when the clock starts, so [`Usage::read`] gives what the measured span
/// cost.
pub(super) struct CpuMark(Vec<f64>);

impl CpuMark {
    /// The fleet's CPU seconds now.
    ///
    /// # Errors
    /// When a process's `/proc` entry cannot be read (it exited).
    pub(super) fn now(fleet: &LocalFleet) -> anyhow::Result<Self> {
        let devcluster = fleet.devcluster().map_or(Ok(f64::NAN), cpu_seconds)?;
        std::iter::once(Ok(devcluster))
            .chain(
                std::iter::once(fleet.coordinator())
                    .chain(fleet.workers())
                    .map(cpu_seconds),
            )
            .collect::<anyhow::Result<_>>()
            .map(Self)
    }
}

/// What the fleet used from a [`CpuMark`] until the goal was reached, and its requests once settled.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Usage {
    /// `rest_client_requests_total` summed over the workers when the goal was reached.
    pub requests: f64,
    /// The same, by HTTP method.
    pub requests_by_method: BTreeMap<String, f64>,
    /// The same, by Kubernetes verb and resource (`create pods`, `update deployments/status`).
    pub requests_by_verb: BTreeMap<String, f64>,
    /// Requests that did not get a 2xx answer (conflicts, errors), summed over the workers.
    pub requests_not_2xx: f64,
    /// The requests once the workers stopped sending (Events are written in the background, after
    /// the reconcile that recorded them): what the work cost in the end.
    pub settled_requests: f64,
    /// The same, by Kubernetes verb and resource.
    pub settled_requests_by_verb: BTreeMap<String, f64>,
    pub coordinator_peak_rss_mib: f64,
    pub worker_peak_rss_mib: Vec<f64>,
    /// NaN (written as null) on a cluster of the user's.
    pub devcluster_peak_rss_mib: f64,
    /// CPU seconds (user + system) from the [`CpuMark`] until the goal was reached.
    pub coordinator_cpu_seconds: f64,
    pub worker_cpu_seconds: Vec<f64>,
    /// NaN (written as null) on a cluster of the user's.
    pub devcluster_cpu_seconds: f64,
}

impl Usage {
    /// Reads CPU, request counters and peak memory now — the caller calls it the moment the goal is
    /// reached, before anything stops — then waits for the counters to settle (at most
    /// [`SETTLE_MAX`]).
    ///
    /// # Errors
    /// When a process's `/proc` entry or `/metrics` cannot be read.
    pub(super) async fn read(fleet: &LocalFleet, since: &CpuMark) -> anyhow::Result<Self> {
        let now = CpuMark::now(fleet)?;
        let cpu: Vec<f64> = now.0.iter().zip(&since.0).map(|(a, b)| a - b).collect();
        let counted = count_requests(fleet).await?;
        let mut worker_peak_rss_mib = Vec::new();
        for worker in fleet.workers() {
            worker_peak_rss_mib.push(peak_rss_mib(worker)?);
        }
        let coordinator_peak_rss_mib = peak_rss_mib(fleet.coordinator())?;
        let devcluster_peak_rss_mib = fleet.devcluster().map_or(Ok(f64::NAN), peak_rss_mib)?;
        let settled = settle(fleet, counted.total()).await?;
        Ok(Self {
            requests: counted.total(),
            requests_by_method: counted.by_method,
            requests_by_verb: counted.by_verb,
            requests_not_2xx: counted.not_2xx,
            settled_requests: settled.total(),
            settled_requests_by_verb: settled.by_verb,
            coordinator_peak_rss_mib,
            worker_peak_rss_mib,
            devcluster_peak_rss_mib,
            devcluster_cpu_seconds: cpu[0],
            coordinator_cpu_seconds: cpu[1],
            worker_cpu_seconds: cpu[2..].to_vec(),
        })
    }

    /// CPU seconds of the coordinator and every worker together.
    pub(super) fn fleet_cpu_seconds(&self) -> f64 {
        self.coordinator_cpu_seconds + self.worker_cpu_seconds.iter().sum::<f64>()
    }

    /// The largest peak RSS of a worker (0 with none).
    pub(super) fn worker_peak_rss_mib_max(&self) -> f64 {
        self.worker_peak_rss_mib.iter().copied().fold(0.0, f64::max)
    }
}

/// The workers' requests, summed over them.
#[derive(Debug, Default)]
struct Counted {
    /// `rest_client_requests_total` by HTTP method.
    by_method: BTreeMap<String, f64>,
    /// `flotilla_kube_requests_total` by `<verb> <resource>`.
    by_verb: BTreeMap<String, f64>,
    /// Requests without a 2xx answer.
    not_2xx: f64,
}

impl Counted {
    fn total(&self) -> f64 {
        self.by_method.values().sum()
    }
}

/// Reads every worker's request counters.
async fn count_requests(fleet: &LocalFleet) -> anyhow::Result<Counted> {
    let mut counted = Counted::default();
    for worker in fleet.workers() {
        let text = fetch_metrics(worker).await?;
        for (labels, value) in samples(&text, "rest_client_requests_total") {
            let method = label(&labels, "method");
            if !label(&labels, "code").starts_with('2') {
                counted.not_2xx += value;
            }
            *counted.by_method.entry(method).or_insert(0.0) += value;
        }
        for (labels, value) in samples(&text, "flotilla_kube_requests_total") {
            let verb = format!("{} {}", label(&labels, "verb"), label(&labels, "resource"));
            *counted.by_verb.entry(verb).or_insert(0.0) += value;
        }
    }
    Ok(counted)
}

fn label(labels: &[(String, String)], name: &str) -> String {
    labels
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// The workers' requests once they stopped changing for [`SETTLE_QUIET`] (at most [`SETTLE_MAX`]
/// after the goal; the Events recorded last are still being written until then).
async fn settle(fleet: &LocalFleet, mut last_total: f64) -> anyhow::Result<Counted> {
    let deadline = Instant::now() + SETTLE_MAX;
    loop {
        tokio::time::sleep(SETTLE_QUIET).await;
        let counted = count_requests(fleet).await?;
        if counted.total() == last_total || Instant::now() >= deadline {
            return Ok(counted);
        }
        last_total = counted.total();
    }
}
