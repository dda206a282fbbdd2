//! The workload of `bench chaos`: Deployments `chaos-0` … created, rolled out, then given a template
//! change and rolled out again; and what "converged" means at the end — every Deployment Available
//! with every replica of the changed template, and exactly `replicas` live pods of one template each.
//!
//! The benchmark's own requests go to the API server directly; a request that fails while etcd
//! restarts is retried.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The template annotation the second rollout sets.
pub(super) const ROLLOUT_ANNOTATION: &str = "flotilla.dev/chaos-rollout";

/// Requests in flight at once.
const CONCURRENCY: usize = 32;

/// How long one request is retried (etcd restarting answers with errors for a second or two).
const RETRY_FOR: Duration = Duration::from_secs(60);

/// The benchmark's Deployments, kept current by a watch (stops when dropped).
pub(super) struct Deployments {
    pub api: Api<Deployment>,
    pub store: Store<Deployment>,
    task: JoinHandle<()>,
}

impl Drop for Deployments {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Deployments {
    pub(super) fn watch(api: Api<Deployment>) -> Self {
        let (store, writer) = reflector::store();
        let stream = reflector::reflector(writer, watcher(api.clone(), watcher::Config::default()))
            .default_backoff();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while stream.next().await.is_some() {}
        });
        Self { api, store, task }
    }

    /// How many of them rolled out `replicas` of template `round` (1: as created; 2: changed).
    pub(super) fn rolled_out(&self, replicas: i32, round: u32) -> usize {
        self.store
            .state()
            .iter()
            .filter(|d| is_rolled_out(d, replicas, round))
            .count()
    }
}

/// The name of the `i`-th Deployment.
pub(super) fn name(i: usize) -> String {
    format!("chaos-{i}")
}

/// Creates Deployments `0..n` of `replicas` pause pods with the API's defaults (RollingUpdate, 25 %
/// surge and unavailability); one that exists already (a retried create) counts as created.
///
/// # Errors
/// When one cannot be created within [`RETRY_FOR`].
pub(super) async fn create(api: &Api<Deployment>, n: usize, replicas: i32) -> anyhow::Result<()> {
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| async move {
            let name = name(i);
            let object: Deployment = serde_json::from_value(json!({
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
            }))?;
            retry(&format!("create Deployment {name}"), || async {
                match api.create(&PostParams::default(), &object).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(err) => Err(err),
                }
            })
            .await
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Changes the template of Deployments `0..n` (sets [`ROLLOUT_ANNOTATION`] to `2`).
///
/// # Errors
/// When one cannot be changed within [`RETRY_FOR`].
pub(super) async fn change_templates(api: &Api<Deployment>, n: usize) -> anyhow::Result<()> {
    let patch =
        json!({"spec": {"template": {"metadata": {"annotations": {ROLLOUT_ANNOTATION: "2"}}}}});
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let patch = patch.clone();
            async move {
                let name = name(i);
                retry(&format!("change Deployment {name}"), || async {
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                })
                .await?;
                Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

async fn retry<T, F, Fut>(what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(err) if Instant::now() < deadline => {
                tracing::debug!(error = %err, "{what} failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(err) => return Err(err).with_context(|| format!("cannot {what}")),
        }
    }
}

/// Whether `d` rolled out `replicas` of template `round`: observed, every replica updated and
/// available, no other replica left, Available.
pub(super) fn is_rolled_out(d: &Deployment, replicas: i32, round: u32) -> bool {
    let changed = d
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .is_some_and(|a| a.contains_key(ROLLOUT_ANNOTATION));
    if changed != (round == 2) {
        return false;
    }
    let Some(s) = &d.status else {
        return false;
    };
    let available = s
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Available" && c.status == "True");
    s.observed_generation.is_some()
        && s.observed_generation == d.meta().generation
        && s.replicas == Some(replicas)
        && s.updated_replicas == Some(replicas)
        && s.available_replicas == Some(replicas)
        && s.ready_replicas == Some(replicas)
        && available
}

/// What the pods say at the end: for every Deployment exactly `replicas` live pods, all of one
/// template, none of another Deployment's. Returns the problems found (none when converged) and the
/// live pods counted.
pub(super) fn pod_problems(pods: &[Pod], n: usize, replicas: i32) -> (Vec<String>, usize) {
    let mut by_deployment: BTreeMap<String, (usize, BTreeSet<String>)> = BTreeMap::new();
    let mut live = 0;
    for pod in pods {
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if terminating || finished {
            continue;
        }
        live += 1;
        let labels = pod.labels();
        let app = labels.get("app").cloned().unwrap_or_default();
        let hash = labels.get("pod-template-hash").cloned().unwrap_or_default();
        let slot = by_deployment.entry(app).or_default();
        slot.0 += 1;
        slot.1.insert(hash);
    }
    let want = usize::try_from(replicas).unwrap_or(0);
    let mut problems = Vec::new();
    for i in 0..n {
        let name = name(i);
        match by_deployment.remove(&name) {
            Some((count, hashes)) if count == want && hashes.len() == 1 => {}
            Some((count, hashes)) => problems.push(format!(
                "{name}: {count} live pods of {} templates",
                hashes.len()
            )),
            None if want == 0 => {}
            None => problems.push(format!("{name}: no live pod")),
        }
    }
    for (app, (count, _)) in by_deployment {
        problems.push(format!(
            "{count} live pods of no benchmark Deployment ({app:?})"
        ));
    }
    (problems, live)
}

/// Lists the pods of `api` (retried).
pub(super) async fn list_pods(api: &Api<Pod>) -> anyhow::Result<Vec<Pod>> {
    Ok(retry("list pods", || async {
        api.list(&ListParams::default()).await
    })
    .await?
    .items)
}

/// Every object of `api` by `namespace/name`, with its resourceVersion (retried).
pub(super) async fn resource_versions<K>(api: &Api<K>) -> anyhow::Result<HashMap<String, u64>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = retry("list objects", || async {
        api.list(&ListParams::default()).await
    })
    .await?;
    Ok(list
        .items
        .iter()
        .map(|o| {
            let key = format!(
                "{}/{}",
                o.meta().namespace.clone().unwrap_or_default(),
                o.meta().name.clone().unwrap_or_default()
            );
            let rv = o
                .meta()
                .resource_version
                .as_deref()
                .unwrap_or_default()
                .parse()
                .unwrap_or(0);
            (key, rv)
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn deployment(round: u32, status: serde_json::Value) -> Deployment {
        let mut template =
            json!({"metadata": {"labels": {"app": "chaos-0"}}, "spec": {"containers": []}});
        if round == 2 {
            template["metadata"]["annotations"] = json!({ROLLOUT_ANNOTATION: "2"});
        }
        serde_json::from_value(json!({
            "metadata": {"name": "chaos-0", "generation": 2},
            "spec": {"selector": {}, "template": template},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_deployment_is_rolled_out_only_with_every_replica_of_its_template_available() {
        let done = json!({
            "observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3,
            "readyReplicas": 3, "conditions": [{"type": "Available", "status": "True"}],
        });
        assert!(is_rolled_out(&deployment(2, done.clone()), 3, 2));
        assert!(!is_rolled_out(&deployment(2, done.clone()), 3, 1));
        assert!(is_rolled_out(&deployment(1, done.clone()), 3, 1));
        let mut surplus = done.clone();
        surplus["replicas"] = json!(4);
        assert!(!is_rolled_out(&deployment(2, surplus), 3, 2));
        let mut stale = done;
        stale["observedGeneration"] = json!(1);
        assert!(!is_rolled_out(&deployment(2, stale), 3, 2));
    }

    fn pod(app: &str, hash: &str, terminating: bool) -> Pod {
        let mut meta = json!({"name": "p", "labels": {"app": app, "pod-template-hash": hash}});
        if terminating {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({"metadata": meta})).unwrap()
    }

    #[test]
    fn pods_converge_at_exactly_the_replicas_of_one_template() {
        let good = vec![
            pod("chaos-0", "a", false),
            pod("chaos-0", "a", false),
            pod("chaos-0", "b", true),
        ];
        assert_eq!(pod_problems(&good, 1, 2), (vec![], 2));
        let mixed = vec![pod("chaos-0", "a", false), pod("chaos-0", "b", false)];
        assert_eq!(pod_problems(&mixed, 1, 2).0.len(), 1);
        assert_eq!(pod_problems(&good, 2, 2).0, vec!["chaos-1: no live pod"]);
    }
}
