//! Following a benchmark's objects the way a controller would: one watch of the namespace's objects of
//! a kind keeps the set of those that reached the goal (Deployments rolled out, Jobs complete).
//! Listing every object four times a second instead cost the API server more than the controllers
//! being measured (500 Deployments serialized per list) and took the CPU from them on a small machine.

use std::collections::HashSet;
use std::fmt::Debug;
use std::time::Duration;

use anyhow::bail;
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::local_fleet::LocalFleet;
use super::run_report::Unit;

/// How often a wait checks that the fleet's processes still run and reports progress.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// How often a wait prints its progress.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The count of objects that reached the goal, kept current by a watch; the watch stops when this is
/// dropped.
pub(super) struct DoneWatch {
    count: watch::Receiver<usize>,
    task: JoinHandle<()>,
    unit: Unit,
}

impl DoneWatch {
    /// Starts watching `objects` (before they are created, so no initial list is large); an object
    /// counts while `done` holds for its latest state.
    pub(super) fn start<K>(
        objects: Api<K>,
        unit: Unit,
        done: impl Fn(&K) -> bool + Send + 'static,
    ) -> Self
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let (tx, count) = watch::channel(0);
        let task = tokio::spawn(async move {
            let mut reached: HashSet<String> = HashSet::new();
            let mut events = watcher(objects, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        if done(&o) {
                            reached.insert(o.name_any());
                        } else {
                            reached.remove(&o.name_any());
                        }
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        reached.remove(&o.name_any());
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                    Err(err) => {
                        tracing::warn!(error = %err, kind = unit.many, "the watch failed; it restarts");
                    }
                }
                tx.send_replace(reached.len());
            }
        });
        Self { count, task, unit }
    }

    /// How many reached the goal now.
    pub(super) fn count(&self) -> usize {
        *self.count.borrow()
    }

    /// Waits until `n` objects reached the goal, checking every second that the fleet's processes
    /// run and printing progress every 10 s.
    ///
    /// # Errors
    /// When a process of the fleet exits, or `n` do not reach the goal within `timeout`.
    pub(super) async fn wait_for(
        &mut self,
        n: usize,
        fleet: &mut LocalFleet,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let Unit {
            many, done: goal, ..
        } = self.unit;
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
                        bail!("the {many}' watch ended");
                    }
                }
                _ = check.tick() => {
                    fleet.check_running()?;
                    if Instant::now() > deadline {
                        bail!("only {done} of {n} {many} were {goal} after {timeout:?}");
                    }
                    if last_report.elapsed() >= REPORT_EVERY {
                        eprintln!("  {done}/{n} {goal} after {:.0}s", start.elapsed().as_secs_f64());
                        last_report = Instant::now();
                    }
                }
            }
        }
    }
}

impl Drop for DoneWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
