//! What `bench scale` reads of a coordinator process from outside: its `/metrics` (dispatches,
//! objects and completed lists per kind) and its memory in `/proc` (sampled over time, and the peak
//! since a reset).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::super::process_stats::{fetch_metrics, samples};
use crate::cmd::procs::Child;

/// One reading of a coordinator's metrics.
#[derive(Debug, Default, Clone)]
pub(super) struct Metrics {
    /// Items dispatched to workers since the process started, every controller.
    pub assigned: f64,
    /// Cached objects, by kind.
    pub objects: BTreeMap<String, f64>,
    /// Lists completed (initial and relists), by kind.
    pub lists_done: BTreeMap<String, f64>,
}

impl Metrics {
    /// Reads `coordinator`'s metrics.
    ///
    /// # Errors
    /// When they cannot be fetched (the process is not serving yet, or gone).
    pub async fn read(coordinator: &Child) -> anyhow::Result<Self> {
        let text = fetch_metrics(coordinator).await?;
        let by_kind = |metric: &str| {
            samples(&text, metric)
                .into_iter()
                .filter_map(|(labels, v)| {
                    let kind = labels.into_iter().find(|(k, _)| k == "kind")?.1;
                    Some((kind, v))
                })
                .collect::<BTreeMap<_, _>>()
        };
        Ok(Self {
            assigned: samples(&text, "flotilla_dispatch_assigned_total")
                .iter()
                .map(|(_, v)| v)
                .sum(),
            objects: by_kind("flotilla_informer_objects"),
            lists_done: by_kind("flotilla_informer_watches_total"),
        })
    }
}

/// Polls `coordinator`'s metrics every `every` until `done` holds of them, or fails after `bound`
/// naming `what`.
///
/// # Errors
/// When `done` does not hold within `bound`.
pub(super) async fn poll_until(
    coordinator: &Child,
    every: Duration,
    bound: Duration,
    what: &str,
    mut done: impl FnMut(&Metrics) -> bool,
) -> anyhow::Result<Metrics> {
    let deadline = Instant::now() + bound;
    loop {
        if let Ok(metrics) = Metrics::read(coordinator).await
            && done(&metrics)
        {
            return Ok(metrics);
        }
        if Instant::now() > deadline {
            anyhow::bail!("{what} did not happen within {bound:?}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Resets the peak resident set size of process `pid` (`VmHWM`) to its current one.
///
/// # Errors
/// When the kernel refuses (`/proc/<pid>/clear_refs`).
pub(super) fn reset_peak(pid: u32) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .with_context(|| format!("cannot reset the peak memory of process {pid}"))
}

/// Resident memory samples of processes, `(seconds since the sampler started, MiB)`, taken every
/// 50 ms by a task of its own until dropped.
pub(super) struct MemorySampler {
    started: Instant,
    pid: Arc<Mutex<Option<u32>>>,
    samples: Arc<Mutex<Vec<(f64, f64)>>>,
    stop: CancellationToken,
}

impl MemorySampler {
    /// A sampler following no process yet.
    pub fn start() -> Self {
        let started = Instant::now();
        let pid = Arc::new(Mutex::new(None::<u32>));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (task_pid, task_samples, task_stop) = (pid.clone(), samples.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tokio::select! {
                    () = task_stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(pid) = *task_pid.lock() else {
                    continue;
                };
                if let Some(mib) = rss_mib_of(pid) {
                    task_samples
                        .lock()
                        .push((started.elapsed().as_secs_f64(), mib));
                }
            }
        });
        Self {
            started,
            pid,
            samples,
            stop,
        }
    }

    /// Follows process `pid` from now on.
    pub fn follow(&self, pid: u32) {
        *self.pid.lock() = Some(pid);
    }

    /// Seconds since the sampler started.
    pub fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The samples so far.
    pub fn samples(&self) -> Vec<(f64, f64)> {
        self.samples.lock().clone()
    }
}

impl Drop for MemorySampler {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// `VmRSS` of process `pid` in MiB; `None` once it is gone.
fn rss_mib_of(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}
