//! The `replicaset` and `replicationcontroller` controllers on simulated nodes: pods are created up to
//! `spec.replicas` and become Ready, scaling up and down converges, orphans are adopted and pods whose
//! labels stop matching are released and replaced, a scale-down removes the pods that hurt least
//! (unscheduled, then not ready), and slow start stops at a quota rejection and reports it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, ReplicationController, ResourceQuota};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc, metric};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(60);

/// A coordinator and two workers running `controller`.
async fn fleet(cluster: &TestCluster, controller: &str) -> (Fleet, Vec<Proc>) {
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let mut procs = vec![fleet.coordinator("c0", &[])];
    for i in 0..2 {
        procs.push(fleet.worker(
            "flotilla",
            &format!("w{i}"),
            &["worker", "--controllers", controller],
        ));
    }
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;
    (fleet, procs)
}

fn template(app: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
    })
}

fn replica_set(name: &str, app: &str, replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": template(app),
        }
    }))
    .unwrap()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// The pods controlled by `uid` that are not being deleted.
async fn active_pods(pods: &Api<Pod>, uid: &str) -> Option<Vec<Pod>> {
    let list = pods.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && controller_uid(p) == Some(uid))
            .collect(),
    )
}

/// Waits until the ReplicaSet has exactly `n` active pods, all Ready, and says so in its status for its
/// current generation.
async fn converged(
    replica_sets: &Api<ReplicaSet>,
    pods: &Api<Pod>,
    name: &str,
    n: i32,
) -> Vec<Pod> {
    wait_for(
        CONVERGE,
        &format!("{name} to have {n} ready pods"),
        || async {
            let rs = replica_sets.get(name).await.ok()?;
            let status = rs.status.as_ref()?;
            let uid = rs.metadata.uid.as_deref()?;
            let active = active_pods(pods, uid).await?;
            let done = status.replicas == n
                && status.ready_replicas == Some(n)
                && status.observed_generation == rs.metadata.generation
                && active.len() == usize::try_from(n).ok()?
                && active.iter().all(is_ready);
            done.then_some(active)
        },
    )
    .await
}

async fn scale(replica_sets: &Api<ReplicaSet>, name: &str, replicas: i32) {
    replica_sets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replicaset_gets_ready_pods_and_scales_up_and_down() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, "replicaset").await;
    let ns = unique_namespace(&client, "rs").await;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    replica_sets
        .create(&PostParams::default(), &replica_set("web", "web", 5))
        .await
        .unwrap();
    let created = converged(&replica_sets, &pods, "web", 5).await;
    for pod in &created {
        let name = pod.metadata.name.as_deref().unwrap();
        assert!(
            name.starts_with("web-"),
            "{name} is not generated from web-"
        );
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.block_owner_deletion, Some(true), "{name}");
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["app"], "web");
    }

    scale(&replica_sets, "web", 8).await;
    converged(&replica_sets, &pods, "web", 8).await;

    scale(&replica_sets, "web", 2).await;
    let remaining = converged(&replica_sets, &pods, "web", 2).await;
    // The survivors were there before the scale-down: surplus goes, nothing is recreated in its place.
    let uid = replica_sets.get("web").await.unwrap().metadata.uid.unwrap();
    let again = active_pods(&pods, &uid).await.unwrap();
    assert_eq!(
        again.len(),
        2,
        "more than spec.replicas pods after convergence: {:?}",
        again.iter().map(|p| &p.metadata.name).collect::<Vec<_>>()
    );
    let mut before: Vec<_> = remaining.iter().map(|p| p.metadata.uid.clone()).collect();
    let mut after: Vec<_> = again.iter().map(|p| p.metadata.uid.clone()).collect();
    before.sort();
    after.sort();
    assert_eq!(before, after);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orphan_is_adopted_and_a_pod_that_stops_matching_is_released_and_replaced() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, "replicaset").await;
    let ns = unique_namespace(&client, "rs-claim").await;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let mut stray: Pod = serde_json::from_value(template("db")).unwrap();
    stray.metadata.name = Some("stray".into());
    pods.create(&PostParams::default(), &stray).await.unwrap();
    let rs = replica_sets
        .create(&PostParams::default(), &replica_set("db", "db", 2))
        .await
        .unwrap();
    let uid = rs.metadata.uid.unwrap();
    let owned = converged(&replica_sets, &pods, "db", 2).await;
    assert!(
        owned
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("stray")),
        "the orphan was not adopted"
    );

    pods.patch(
        "stray",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await
    .unwrap();
    wait_for(CONVERGE, "stray to be released", || async {
        let pod = pods.get("stray").await.ok()?;
        controller_uid(&pod).is_none().then_some(())
    })
    .await;
    let replaced = converged(&replica_sets, &pods, "db", 2).await;
    assert!(
        replaced
            .iter()
            .all(|p| p.metadata.name.as_deref() != Some("stray")),
        "the released pod still counts"
    );
    assert!(replaced.iter().all(|p| controller_uid(p) == Some(&uid)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replicationcontroller_gets_its_ready_pods() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, "replicationcontroller").await;
    let ns = unique_namespace(&client, "rc").await;
    let controllers: Api<ReplicationController> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let rc: ReplicationController = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "metadata": {"name": "legacy"},
        "spec": {"replicas": 3, "selector": {"app": "legacy"}, "template": template("legacy")}
    }))
    .unwrap();
    let uid = controllers
        .create(&PostParams::default(), &rc)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    wait_for(CONVERGE, "legacy to have 3 ready pods", || async {
        let rc = controllers.get("legacy").await.ok()?;
        let status = rc.status?;
        let active = active_pods(&pods, &uid).await?;
        (status.ready_replicas == Some(3) && active.len() == 3 && active.iter().all(is_ready))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_become_available_only_after_min_ready_seconds() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, "replicaset").await;
    let ns = unique_namespace(&client, "rs-min-ready").await;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let mut rs = replica_set("slow", "slow", 2);
    if let Some(spec) = rs.spec.as_mut() {
        spec.min_ready_seconds = Some(3);
    }
    replica_sets
        .create(&PostParams::default(), &rs)
        .await
        .unwrap();
    // The first status with both pods ready comes 3 s before they can be available.
    let status = wait_for(CONVERGE, "slow to have 2 ready pods", || async {
        let status = replica_sets.get("slow").await.ok()?.status?;
        (status.ready_replicas == Some(2)).then_some(status)
    })
    .await;
    assert_ne!(
        status.available_replicas,
        Some(2),
        "pods counted available before minReadySeconds"
    );
    // Nothing changes once the pods are ready: only the controller's own requeue makes them available.
    wait_for(CONVERGE, "slow to have 2 available pods", || async {
        let status = replica_sets.get("slow").await.ok()?.status?;
        (status.available_replicas == Some(2)).then_some(())
    })
    .await;
}

/// The pods of the namespace that count against a pod quota: not terminal, not being deleted.
fn charged(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Watches the namespace's pods from `rv` and records the most charged pods it ever held at once in
/// `peak`, until the watch ends or the returned task is aborted.
async fn track_peak(
    pods: &Api<Pod>,
    rv: &str,
    peak: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    let mut stream = pods
        .watch(&WatchParams::default().timeout(290), rv)
        .await
        .unwrap()
        .boxed();
    tokio::spawn(async move {
        let mut live: BTreeSet<String> = BTreeSet::new();
        while let Ok(Some(event)) = stream.try_next().await {
            match event {
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if charged(&pod) {
                        live.insert(name);
                    } else {
                        live.remove(&name);
                    }
                }
                WatchEvent::Deleted(pod) => {
                    live.remove(pod.metadata.name.as_deref().unwrap_or_default());
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(_) => return,
            }
            peak.fetch_max(live.len(), Ordering::SeqCst);
        }
    })
}

fn pod_quota(name: &str, pods: i32) -> ResourceQuota {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name},
        "spec": {"hard": {"pods": pods.to_string()}},
    }))
    .unwrap()
}

/// The ReplicaSet's `ReplicaFailure` condition as (status, reason, message).
fn replica_failure(rs: &ReplicaSet) -> Option<(String, String, String)> {
    rs.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "ReplicaFailure")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_start_stops_at_a_quota_rejection_and_the_set_completes_once_the_quota_grows() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, "replicaset").await;
    let ns = unique_namespace(&client, "rs-quota").await;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);

    quotas
        .create(&PostParams::default(), &pod_quota("three-pods", 3))
        .await
        .unwrap();
    // A real cluster's admission enforces a quota only once its controller has written the status.
    wait_for(CONVERGE, "the quota to report its limits", || async {
        let quota = quotas.get("three-pods").await.ok()?;
        quota.status?.hard?.contains_key("pods").then_some(())
    })
    .await;
    let start = pods.list(&ListParams::default()).await.unwrap();
    let peak = Arc::new(AtomicUsize::new(0));
    let rv = start.metadata.resource_version.unwrap_or_default();
    let watcher = track_peak(&pods, &rv, peak.clone()).await;

    let uid = replica_sets
        .create(&PostParams::default(), &replica_set("capped", "capped", 10))
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let message = wait_for(CONVERGE, "capped to report ReplicaFailure", || async {
        let rs = replica_sets.get("capped").await.ok()?;
        let (status, reason, message) = replica_failure(&rs)?;
        (status == "True" && reason == "FailedCreate").then_some(message)
    })
    .await;
    assert!(
        message.contains(
            "exceeded quota: three-pods, requested: pods=1, used: pods=3, limited: pods=3"
        ),
        "the condition does not carry the quota's refusal: {message}"
    );
    let ready = wait_for(CONVERGE, "capped's 3 admitted pods to be ready", || async {
        let rs = replica_sets.get("capped").await.ok()?;
        let active = active_pods(&pods, &uid).await?;
        let status = rs.status?;
        (status.replicas == 3 && status.ready_replicas == Some(3) && active.iter().all(is_ready))
            .then_some(active)
    })
    .await;
    assert_eq!(ready.len(), 3);
    let peak_while_capped = peak.load(Ordering::SeqCst);
    assert_eq!(
        peak_while_capped, 3,
        "the namespace held {peak_while_capped} pods at once under a quota of 3"
    );

    quotas
        .patch(
            "three-pods",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"pods": "10"}}})),
        )
        .await
        .unwrap();
    // Nothing about the ReplicaSet changed: the failed sync's rate-limited retry finds the room, so
    // allow for a few backoff doublings beyond the usual convergence time.
    let done = wait_for(
        CONVERGE * 2,
        "capped to have 10 ready pods and no ReplicaFailure",
        || async {
            let rs = replica_sets.get("capped").await.ok()?;
            let status = rs.status.as_ref()?;
            let active = active_pods(&pods, &uid).await?;
            let done = status.replicas == 10
                && status.ready_replicas == Some(10)
                && active.len() == 10
                && active.iter().all(is_ready)
                && replica_failure(&rs).is_none();
            done.then_some(active)
        },
    )
    .await;
    let kept: Vec<_> = ready.iter().map(|p| p.metadata.uid.clone()).collect();
    assert!(
        kept.iter()
            .all(|uid| done.iter().any(|p| &p.metadata.uid == uid)),
        "the pods admitted first were replaced"
    );
    watcher.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scale_down_removes_the_unscheduled_and_the_not_ready_pods_first() {
    let cluster = TestCluster::builder().with_nodes(4).start().await;
    let client = cluster.client();
    // The fourth node is down from the start: nothing is placed there, and a pod bound to it never
    // becomes Ready.
    let down = cluster.node_names()[3].clone();
    cluster.stop_node(&down);
    let (fleet, mut procs) = fleet(&cluster, "replicaset").await;
    let ns = unique_namespace(&client, "rs-rank").await;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let uid = replica_sets
        .create(&PostParams::default(), &replica_set("ranked", "ranked", 3))
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let originals = converged(&replica_sets, &pods, "ranked", 3).await;
    let mut original_uids: Vec<String> = originals
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    original_uids.sort();

    // Stop the controller so that it meets both orphans in one sync: 5 active pods for 3 replicas.
    for proc in procs.iter_mut().skip(1) {
        proc.kill9().await;
    }
    let mut unscheduled: Pod = serde_json::from_value(template("ranked")).unwrap();
    unscheduled.metadata.name = Some("unscheduled".into());
    if let Some(spec) = unscheduled.spec.as_mut() {
        spec.node_selector = Some([("flotilla.test/nowhere".to_owned(), "true".to_owned())].into());
    }
    let mut not_ready: Pod = serde_json::from_value(template("ranked")).unwrap();
    not_ready.metadata.name = Some("not-ready".into());
    if let Some(spec) = not_ready.spec.as_mut() {
        spec.node_name = Some(down.clone());
    }
    pods.create(&PostParams::default(), &unscheduled)
        .await
        .unwrap();
    pods.create(&PostParams::default(), &not_ready)
        .await
        .unwrap();
    procs.push(fleet.worker("flotilla", "w2", &["worker", "--controllers", "replicaset"]));

    wait_for(
        CONVERGE,
        "ranked to adopt and delete both orphans",
        || async {
            let unscheduled_gone = matches!(
                pods.get("unscheduled").await,
                Err(kube::Error::Api(status)) if status.code == 404
            );
            // Bound to a node that is down, it stays, marked for graceful deletion.
            let not_ready = pods.get("not-ready").await.ok()?;
            let doomed = not_ready.metadata.deletion_timestamp.is_some();
            (unscheduled_gone && doomed).then_some(())
        },
    )
    .await;
    let not_ready = pods.get("not-ready").await.unwrap();
    assert_eq!(
        controller_uid(&not_ready),
        Some(uid.as_str()),
        "the not-ready orphan was deleted without being adopted"
    );
    let survivors = converged(&replica_sets, &pods, "ranked", 3).await;
    let mut survivor_uids: Vec<String> = survivors
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    survivor_uids.sort();
    assert_eq!(
        survivor_uids, original_uids,
        "a Ready original was deleted instead of an orphan"
    );
}

/// The first probe of issue 17: a ReplicaSet whose 16 pods each carry 1.2 MB of container args. Its
/// item with the pods prefetched is 20 MB, past the 16 MiB message limit; sent in one batch it broke
/// the worker's stream about 8 times a second, forever, and nothing else was reconciled either. Now
/// the item goes without its pods (the worker reads them through the Cache service in pages), the
/// ReplicaSet converges, a small one beside it too, no stream breaks, and deleting it collects its pods.
#[tokio::test(flavor = "multi_thread")]
async fn a_replicaset_too_large_to_ship_with_its_pods_converges_without_breaking_a_stream() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, procs) = fleet(&cluster, "replicaset,garbagecollector").await;
    let ns = unique_namespace(&client, "rs-large").await;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let mut large = replica_set("large", "large", 16);
    let args = json!(["x".repeat(1_200_000)]);
    let spec = large.spec.as_mut().unwrap();
    let container = &mut spec
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    container.args = Some(serde_json::from_value(args).unwrap());
    replica_sets
        .create(&PostParams::default(), &large)
        .await
        .unwrap();
    replica_sets
        .create(&PostParams::default(), &replica_set("small", "small", 2))
        .await
        .unwrap();
    converged(&replica_sets, &pods, "large", 16).await;
    converged(&replica_sets, &pods, "small", 2).await;

    let coordinator = procs[0].metrics_text().await;
    assert!(
        metric(
            &coordinator,
            r#"flotilla_bad_input_total{reason="oversized_item_prefetch_from_cache"}"#
        ) >= 1.0,
        "the item went without its pods"
    );
    for worker in &procs[1..] {
        let text = worker.metrics_text().await;
        assert_eq!(
            metric(&text, "flotilla_worker_stream_breaks_total"),
            0.0,
            "{}: a stream broke",
            worker.name
        );
        assert_eq!(worker.http_status("/readyz").await, 200, "{}", worker.name);
    }

    let uid = replica_sets
        .get("large")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    replica_sets
        .delete("large", &kube::api::DeleteParams::background())
        .await
        .unwrap();
    wait_for(
        CONVERGE,
        "the large ReplicaSet's pods collected",
        || async { active_pods(&pods, &uid).await?.is_empty().then_some(()) },
    )
    .await;
}
