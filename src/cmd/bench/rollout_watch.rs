//! Following a rollout the way a controller would: one watch of the namespace's Deployments keeps the
//! set of those rolled out. Listing every Deployment four times a second instead cost the API server
//! more than the controllers being measured (500 Deployments serialized per list) and took the CPU
//! from them on a small machine.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::bail;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::ResourceExt;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::local_fleet::LocalFleet;
use super::rollout::{Goal, rolled_out};

/// How often a wait checks that the fleet's processes still run and reports progress.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How often a wait prints its progress.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The count of rolled-out Deployments, kept current by a watch; the watch stops when this is dropped.
pub(super) struct RolloutWatch {
    count: watch::Receiver<usize>,
    task: JoinHandle<()>,
}

impl RolloutWatch {
    /// Starts watching `deployments` (before they are created, so no initial list is large).
    pub(super) fn start(deployments: Api<Deployment>, replicas: i32, goal: Goal) -> Self {
        let (tx, count) = watch::channel(0);
        let task = tokio::spawn(async move {
            let mut done: HashSet<String> = HashSet::new();
            let mut events = watcher(deployments, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                        if rolled_out(&d, replicas, goal) {
                            done.insert(d.name_any());
                        } else {
                            done.remove(&d.name_any());
                        }
                    }
                    Ok(watcher::Event::Delete(d)) => {
                        done.remove(&d.name_any());
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                    Err(err) => {
                        tracing::warn!(error = %err, "the Deployments' watch failed; it restarts");
                    }
                }
                tx.send_replace(done.len());
            }
        });
        Self { count, task }
    }

    /// Waits until `n` Deployments are rolled out, checking every second that the fleet's processes
    /// run and printing progress every 10 s.
    ///
    /// # Errors
    /// When a process of the fleet exits, or `n` are not rolled out within `timeout`.
    pub(super) async fn wait_for(
        &mut self,
        n: usize,
        fleet: &mut LocalFleet,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut check = tokio::time::interval(CHECK_EVERY);
        let mut last_report = start;
        loop {
            let done = *self.count.borrow_and_update();
            if done >= n {
                return Ok(());
            }
            tokio::select! {
                changed = self.count.changed() => {
                    if changed.is_err() {
                        bail!("the Deployments' watch ended");
                    }
                }
                _ = check.tick() => {
                    fleet.check_running()?;
                    if Instant::now() > deadline {
                        bail!("only {done} of {n} Deployments were rolled out after {timeout:?}");
                    }
                    if last_report.elapsed() >= REPORT_EVERY {
                        eprintln!("  {done}/{n} rolled out after {:.0}s", start.elapsed().as_secs_f64());
                        last_report = Instant::now();
                    }
                }
            }
        }
    }
}

impl Drop for RolloutWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
