//! The `deployment` controller (with `replicaset`) on simulated nodes: a Deployment becomes Available,
//! scales, rolls out within maxSurge / maxUnavailable (checked on every pod event), rolls back onto its
//! old ReplicaSet, pauses and resumes, recreates without overlap, reports a stuck rollout past its
//! progress deadline, and many Deployments converge while a worker dies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(90);
const REVISION: &str = "deployment.kubernetes.io/revision";
const HASH: &str = "pod-template-hash";

fn template(app: &str, image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": image}]}
    })
}

fn deployment(name: &str, replicas: i32, image: &str, strategy: Value) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template(name, image),
            "strategy": strategy,
        }
    }))
    .unwrap()
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

async fn patch(deployments: &Api<Deployment>, name: &str, body: Value) {
    deployments
        .patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap();
}

async fn set_image(deployments: &Api<Deployment>, name: &str, image: &str) {
    let body = json!({"spec": {"template": template(name, image)}});
    patch(deployments, name, body).await;
}

fn count(n: Option<i32>) -> i32 {
    n.unwrap_or(0)
}

fn condition_reason<'a>(d: &'a Deployment, type_: &str) -> Option<(&'a str, &'a str)> {
    d.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_deref().unwrap_or_default()))
}

/// The ReplicaSets the Deployment controls.
async fn owned(replica_sets: &Api<ReplicaSet>, uid: &str) -> Vec<ReplicaSet> {
    replica_sets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|rs| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect()
}

/// Waits until the rollout of the current generation is complete: every replica updated and available,
/// no old pod left, Available and Progressing=NewReplicaSetAvailable, only the new ReplicaSet sized.
async fn rolled_out(
    deployments: &Api<Deployment>,
    replica_sets: &Api<ReplicaSet>,
    name: &str,
    replicas: i32,
) -> (Deployment, ReplicaSet) {
    wait_for(
        CONVERGE,
        &format!("{name} to be rolled out with {replicas} available replicas"),
        || async {
            let d = deployments.get(name).await.ok()?;
            let s = d.status.as_ref()?;
            let done = s.observed_generation == d.metadata.generation
                && count(s.replicas) == replicas
                && count(s.updated_replicas) == replicas
                && count(s.available_replicas) == replicas
                && count(s.unavailable_replicas) == 0
                && condition_reason(&d, "Available") == Some(("True", "MinimumReplicasAvailable"))
                && condition_reason(&d, "Progressing") == Some(("True", "NewReplicaSetAvailable"));
            if !done {
                return None;
            }
            let uid = d.metadata.uid.clone()?;
            let rss = owned(replica_sets, &uid).await;
            let sized: Vec<&ReplicaSet> = rss
                .iter()
                .filter(|rs| rs.spec.as_ref().and_then(|s| s.replicas) != Some(0))
                .collect();
            let [new] = sized.as_slice() else { return None };
            let new = (*new).clone();
            Some((d, new))
        },
    )
    .await
}

fn name_of(rs: &ReplicaSet) -> String {
    rs.metadata.name.clone().unwrap_or_default()
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// What must hold for the pods of one Deployment (by its `app` label) at every pod event.
#[derive(Debug, Clone, Default)]
struct Rules {
    /// At most this many running (not terminating, not finished) pods.
    max_pods: Option<usize>,
    /// At least this many running pods that are Ready.
    min_available: Option<usize>,
    /// No two templates' pods exist at once (any phase but finished, terminating included).
    one_template: bool,
}

/// Watches the pods of a namespace and checks [`Rules`] on every event; violations are kept for the
/// test to assert on.
struct PodMonitor {
    rules: Arc<Mutex<BTreeMap<String, Rules>>>,
    violations: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PodMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Failed" | "Succeeded"))
}

fn running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !finished(pod)
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

impl PodMonitor {
    /// Starts watching; returns once the initial list is in, so no later event is missed.
    async fn start(client: &kube::Client, namespace: &str) -> Self {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let rules: Arc<Mutex<BTreeMap<String, Rules>>> = Arc::default();
        let violations: Arc<Mutex<Vec<String>>> = Arc::default();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn({
            let rules = rules.clone();
            let violations = violations.clone();
            async move {
                let mut ready_tx = Some(ready_tx);
                let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
                let mut listing: Option<BTreeMap<String, Pod>> = None;
                let mut events = 0usize;
                // Errors back off: when the cluster stops at the end of a test while this task is
                // still busy with a backlog of events (its abort waits for it to yield), an
                // immediate retry against the closed port would fail without ever yielding, and
                // the task would spin forever and hang the runtime's shutdown.
                let mut stream = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                while let Some(event) = stream.next().await {
                    let Ok(event) = event else { continue };
                    let key = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
                    match event {
                        watcher::Event::Init => listing = Some(BTreeMap::new()),
                        watcher::Event::InitApply(pod) => {
                            if let Some(l) = listing.as_mut() {
                                l.insert(key(&pod), pod);
                            }
                        }
                        watcher::Event::InitDone => {
                            pods = listing.take().unwrap_or_default();
                            if let Some(tx) = ready_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        watcher::Event::Apply(pod) => {
                            pods.insert(key(&pod), pod);
                        }
                        watcher::Event::Delete(pod) => {
                            pods.remove(&key(&pod));
                        }
                    }
                    if listing.is_some() {
                        continue;
                    }
                    events += 1;
                    let rules = rules.lock().unwrap().clone();
                    let mut found = check(&pods, &rules, events);
                    if !found.is_empty() {
                        violations.lock().unwrap().append(&mut found);
                    }
                }
            }
        });
        crate::support::wait::within(Duration::from_secs(30), "the pod watch to list", ready_rx)
            .await
            .unwrap();
        Self {
            rules,
            violations,
            task,
        }
    }

    fn set(&self, app: &str, rules: Rules) {
        self.rules.lock().unwrap().insert(app.to_owned(), rules);
    }

    fn clear(&self, app: &str) {
        self.rules.lock().unwrap().remove(app);
    }

    #[track_caller]
    fn assert_clean(&self) {
        let violations = self.violations.lock().unwrap();
        assert!(
            violations.is_empty(),
            "{} violations, first ones: {:#?}",
            violations.len(),
            &violations[..violations.len().min(10)]
        );
    }
}

fn check(
    pods: &BTreeMap<String, Pod>,
    rules: &BTreeMap<String, Rules>,
    event: usize,
) -> Vec<String> {
    let mut found = Vec::new();
    for (app, rule) in rules {
        let mine: Vec<&Pod> = pods
            .values()
            .filter(|p| label(p, "app") == Some(app))
            .collect();
        let live = mine.iter().filter(|p| running(p)).count();
        let available = mine.iter().filter(|p| running(p) && ready(p)).count();
        if let Some(max) = rule.max_pods
            && live > max
        {
            found.push(format!(
                "event {event}: {app} has {live} pods, more than {max}"
            ));
        }
        if let Some(min) = rule.min_available
            && available < min
        {
            found.push(format!(
                "event {event}: {app} has {available} available pods, fewer than {min}"
            ));
        }
        if rule.one_template {
            let hashes: BTreeSet<&str> = mine
                .iter()
                .filter(|p| !finished(p))
                .filter_map(|p| label(p, HASH))
                .collect();
            if hashes.len() > 1 {
                found.push(format!(
                    "event {event}: {app} has pods of templates {hashes:?} at once"
                ));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_scales_rolls_out_within_its_bounds_rolls_back_and_pauses() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "deployment,replicaset", 2).await;
    let ns = unique_namespace(&client, "deploy").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let monitor = PodMonitor::start(&client, &ns).await;

    // 25% of 5: surge 2 (rounded up), unavailable 1 (rounded down).
    let web = deployment("web", 5, "nginx:1", rolling(json!("25%"), json!("25%")));
    monitor.set(
        "web",
        Rules {
            max_pods: Some(7),
            ..Rules::default()
        },
    );
    deployments
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    let (d, first) = rolled_out(&deployments, &replica_sets, "web", 5).await;
    let hash = first.metadata.labels.as_ref().unwrap()[HASH].clone();
    assert_eq!(name_of(&first), format!("web-{hash}"));
    let rs_spec = first.spec.as_ref().unwrap();
    assert_eq!(rs_spec.selector.match_labels.as_ref().unwrap()[HASH], hash);
    let rs_template_labels = rs_spec
        .template
        .as_ref()
        .unwrap()
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(rs_template_labels[HASH], hash);
    let owner = &first.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.block_owner_deletion),
        ("Deployment", Some(true))
    );
    assert_eq!(annotation(&first.metadata, REVISION), Some("1"));
    assert_eq!(annotation(&d.metadata, REVISION), Some("1"));

    monitor.clear("web");
    patch(&deployments, "web", json!({"spec": {"replicas": 10}})).await;
    rolled_out(&deployments, &replica_sets, "web", 10).await;
    patch(&deployments, "web", json!({"spec": {"replicas": 2}})).await;
    rolled_out(&deployments, &replica_sets, "web", 2).await;
    patch(&deployments, "web", json!({"spec": {"replicas": 8}})).await;
    let (_, before) = rolled_out(&deployments, &replica_sets, "web", 8).await;
    assert_eq!(
        name_of(&before),
        name_of(&first),
        "scaling must not create a ReplicaSet"
    );

    // A rolling update at 8 replicas: surge 2, unavailable 2.
    let bounds = Rules {
        max_pods: Some(10),
        min_available: Some(6),
        one_template: false,
    };
    monitor.set("web", bounds.clone());
    set_image(&deployments, "web", "nginx:2").await;
    let (d, second) = rolled_out(&deployments, &replica_sets, "web", 8).await;
    assert_ne!(name_of(&second), name_of(&first));
    assert_eq!(annotation(&second.metadata, REVISION), Some("2"));
    assert_eq!(annotation(&d.metadata, REVISION), Some("2"));
    monitor.assert_clean();

    // Rollback by re-applying the first template: the first ReplicaSet comes back with revision 3.
    set_image(&deployments, "web", "nginx:1").await;
    let (d, back) = rolled_out(&deployments, &replica_sets, "web", 8).await;
    assert_eq!(
        back.metadata.uid, first.metadata.uid,
        "the old ReplicaSet must be re-used"
    );
    assert_eq!(annotation(&back.metadata, REVISION), Some("3"));
    assert_eq!(
        annotation(&back.metadata, "deployment.kubernetes.io/revision-history"),
        Some("1")
    );
    assert_eq!(annotation(&d.metadata, REVISION), Some("3"));
    let uid = d.metadata.uid.clone().unwrap();
    assert_eq!(
        owned(&replica_sets, &uid).await.len(),
        2,
        "a rollback must not create a ReplicaSet"
    );
    monitor.assert_clean();
    monitor.clear("web");

    // Paused: a new template creates nothing; resumed: it rolls out.
    patch(&deployments, "web", json!({"spec": {"paused": true}})).await;
    wait_for(CONVERGE, "web to report DeploymentPaused", || async {
        let d = deployments.get("web").await.ok()?;
        (condition_reason(&d, "Progressing") == Some(("Unknown", "DeploymentPaused"))).then_some(())
    })
    .await;
    set_image(&deployments, "web", "nginx:3").await;
    wait_for(CONVERGE, "web to observe its paused generation", || async {
        let d = deployments.get("web").await.ok()?;
        (d.status?.observed_generation == d.metadata.generation).then_some(())
    })
    .await;
    assert_eq!(
        owned(&replica_sets, &uid).await.len(),
        2,
        "a paused Deployment created a ReplicaSet"
    );
    monitor.set("web", bounds);
    patch(&deployments, "web", json!({"spec": {"paused": false}})).await;
    let (_, third) = rolled_out(&deployments, &replica_sets, "web", 8).await;
    assert_eq!(owned(&replica_sets, &uid).await.len(), 3);
    assert_eq!(annotation(&third.metadata, REVISION), Some("4"));
    monitor.assert_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn recreate_never_overlaps_and_a_stuck_rollout_exceeds_its_deadline() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "deployment,replicaset", 2).await;
    let ns = unique_namespace(&client, "deploy-recreate").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let monitor = PodMonitor::start(&client, &ns).await;

    let re = deployment("re", 3, "nginx:1", json!({"type": "Recreate"}));
    deployments
        .create(&PostParams::default(), &re)
        .await
        .unwrap();
    let (_, first) = rolled_out(&deployments, &replica_sets, "re", 3).await;
    monitor.set(
        "re",
        Rules {
            max_pods: Some(3),
            one_template: true,
            ..Rules::default()
        },
    );
    set_image(&deployments, "re", "nginx:2").await;
    let (_, second) = rolled_out(&deployments, &replica_sets, "re", 3).await;
    assert_ne!(first.metadata.uid, second.metadata.uid);
    monitor.assert_clean();

    let mut stuck = deployment("stuck", 2, "nginx:1", rolling(json!(1), json!(0)));
    stuck.spec.as_mut().unwrap().progress_deadline_seconds = Some(3);
    deployments
        .create(&PostParams::default(), &stuck)
        .await
        .unwrap();
    rolled_out(&deployments, &replica_sets, "stuck", 2).await;
    // The new pods crash-loop (the simulator's kubelet restarts a container whose image ends in
    // `:fail`): Running, never Ready, so the rollout makes no progress.
    set_image(&deployments, "stuck", "nginx:fail").await;
    let d = wait_for(
        CONVERGE,
        "stuck to exceed its progress deadline",
        || async {
            let d = deployments.get("stuck").await.ok()?;
            (condition_reason(&d, "Progressing") == Some(("False", "ProgressDeadlineExceeded")))
                .then_some(d)
        },
    )
    .await;
    // No unavailability allowed: the old pods keep serving.
    assert_eq!(count(d.status.as_ref().unwrap().available_replicas), 2);
    assert_eq!(
        condition_reason(&d, "Available"),
        Some(("True", "MinimumReplicasAvailable"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_deployments_converge_while_a_worker_dies() {
    const N: usize = 200;
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, mut procs) = Fleet::of_controllers(&cluster, "deployment,replicaset", 3).await;
    let ns = unique_namespace(&client, "deploy-many").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let monitor = PodMonitor::start(&client, &ns).await;
    for i in 0..N {
        // 3 replicas, default strategy: surge 1 (25% rounded up).
        monitor.set(
            &format!("d{i}"),
            Rules {
                max_pods: Some(4),
                ..Rules::default()
            },
        );
    }

    let created = futures::stream::iter(0..N)
        .map(|i| {
            let deployments = deployments.clone();
            async move {
                let mut d = deployment(&format!("d{i}"), 3, "nginx:1", Value::Null);
                d.spec.as_mut().unwrap().strategy = None;
                deployments
                    .create(&PostParams::default(), &d)
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(16);
    let mut created = std::pin::pin!(created);
    let mut done = 0;
    let mut killed = false;
    while let Some(result) = created.try_next().await.transpose() {
        result.unwrap();
        done += 1;
        if done == N / 2 && !killed {
            // Mid-way: a worker dies with whatever it holds.
            procs[2].kill9().await;
            killed = true;
        }
    }

    wait_for(
        Duration::from_secs(420),
        "every Deployment to be available with 600 pods",
        || async {
            let list = deployments.list(&ListParams::default()).await.ok()?;
            let available = list
                .items
                .iter()
                .filter(|d| {
                    let s = d.status.as_ref();
                    s.is_some_and(|s| {
                        count(s.available_replicas) == 3 && count(s.updated_replicas) == 3
                    }) && condition_reason(d, "Available")
                        == Some(("True", "MinimumReplicasAvailable"))
                })
                .count();
            let running = pods
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .filter(|p| running(p))
                .count();
            (available == N && running == 3 * N).then_some(())
        },
    )
    .await;
    let all = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 3 * N, "pods left over beside the 600 wanted");
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        replica_sets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        N
    );
    monitor.assert_clean();
}
