//! The surge check of `bench chaos`: one watch of the namespace's pods, and on every event the count
//! of its Deployment's live pods (neither terminating nor finished) against `replicas + maxSurge`.
//! A pod belongs to the Deployment of its controlling ReplicaSet, whose name is the Deployment's plus
//! `-<pod-template-hash>` (how the deployment controller names them).
//!
//! The watch goes to the API server directly, never through a cut link; when it breaks (etcd
//! restarted) it relists, and the check runs again on the relisted state.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

/// Violations kept with their description (the count goes on beyond).
const KEEP: usize = 20;

/// What the watch found so far.
#[derive(Debug, Default, Clone)]
pub(super) struct SurgeReport {
    /// Pod events checked.
    pub events: u64,
    /// Events after which some Deployment had more live pods than allowed.
    pub violations: u64,
    /// The first ones, described.
    pub examples: Vec<String>,
    /// The most live pods one Deployment had at once.
    pub max_live: usize,
}

/// The running watch; stops when dropped.
pub(super) struct SurgeWatch {
    report: Arc<Mutex<SurgeReport>>,
    task: JoinHandle<()>,
}

impl Drop for SurgeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SurgeWatch {
    /// Starts watching `pods`; every Deployment may have `limit` live pods.
    pub(super) fn start(pods: Api<Pod>, limit: usize) -> Self {
        let report: Arc<Mutex<SurgeReport>> = Arc::default();
        let task = tokio::spawn({
            let report = report.clone();
            async move {
                let mut state = State::default();
                let mut listing: Option<Vec<Pod>> = None;
                let mut events = watcher(pods, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                while let Some(event) = events.next().await {
                    let Ok(event) = event else { continue };
                    let touched = match event {
                        watcher::Event::Init => {
                            listing = Some(Vec::new());
                            continue;
                        }
                        watcher::Event::InitApply(pod) => {
                            if let Some(l) = listing.as_mut() {
                                l.push(pod);
                            }
                            continue;
                        }
                        watcher::Event::InitDone => {
                            state = State::default();
                            let mut touched = HashSet::new();
                            for pod in listing.take().unwrap_or_default() {
                                touched.extend(state.apply(&pod, false));
                            }
                            touched
                        }
                        watcher::Event::Apply(pod) => {
                            state.apply(&pod, false).into_iter().collect()
                        }
                        watcher::Event::Delete(pod) => {
                            state.apply(&pod, true).into_iter().collect()
                        }
                    };
                    let mut r = report
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    r.events += 1;
                    for deployment in touched {
                        let live = state.live(&deployment);
                        r.max_live = r.max_live.max(live);
                        if live > limit {
                            r.violations += 1;
                            if r.examples.len() < KEEP {
                                let example = format!(
                                    "pod event {}: {deployment} has {live} live pods, more than {limit}",
                                    r.events
                                );
                                r.examples.push(example);
                            }
                        }
                    }
                }
            }
        });
        Self { report, task }
    }

    /// What it found so far.
    pub(super) fn report(&self) -> SurgeReport {
        self.report
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The live pods of each Deployment, by uid.
#[derive(Default)]
struct State {
    live: HashMap<String, HashSet<String>>,
}

impl State {
    /// Applies one pod's latest state (`deleted`: it is gone); returns its Deployment, if it has one.
    fn apply(&mut self, pod: &Pod, deleted: bool) -> Option<String> {
        let uid = pod.metadata.uid.clone()?;
        let deployment = deployment_of(pod)?;
        let set = self.live.entry(deployment.clone()).or_default();
        if !deleted && is_live(pod) {
            set.insert(uid);
        } else {
            set.remove(&uid);
        }
        Some(deployment)
    }

    fn live(&self, deployment: &str) -> usize {
        self.live.get(deployment).map_or(0, HashSet::len)
    }
}

/// Neither terminating nor finished.
fn is_live(pod: &Pod) -> bool {
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    pod.metadata.deletion_timestamp.is_none() && !finished
}

/// The Deployment of `pod`: its controlling ReplicaSet's name without the `-<pod-template-hash>`.
fn deployment_of(pod: &Pod) -> Option<String> {
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "ReplicaSet")?;
    let (deployment, _hash) = owner.name.rsplit_once('-')?;
    Some(deployment.to_owned())
}

/// `replicas + maxSurge` for the default strategy (maxSurge 25 %, rounded up).
pub(super) fn default_limit(replicas: i32) -> usize {
    let replicas = usize::try_from(replicas).unwrap_or(0);
    replicas + replicas.div_ceil(4)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, rs: &str, terminating: bool) -> Pod {
        let mut meta = json!({
            "name": uid, "uid": uid,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": "x", "controller": true}],
        });
        if terminating {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({"metadata": meta})).unwrap()
    }

    #[test]
    fn live_pods_count_per_deployment_across_its_replicasets() {
        let mut s = State::default();
        assert_eq!(
            s.apply(&pod("a", "roll-1-abc", false), false).as_deref(),
            Some("roll-1")
        );
        s.apply(&pod("b", "roll-1-def", false), false);
        s.apply(&pod("c", "roll-10-abc", false), false);
        assert_eq!(s.live("roll-1"), 2);
        s.apply(&pod("a", "roll-1-abc", true), false);
        assert_eq!(s.live("roll-1"), 1, "a terminating pod does not count");
        s.apply(&pod("b", "roll-1-def", false), true);
        assert_eq!(s.live("roll-1"), 0);
        assert_eq!(s.live("roll-10"), 1);
    }

    #[test]
    fn the_default_surge_is_a_quarter_rounded_up() {
        assert_eq!(default_limit(3), 4);
        assert_eq!(default_limit(4), 5);
        assert_eq!(default_limit(5), 7);
        assert_eq!(default_limit(1), 2);
    }
}
