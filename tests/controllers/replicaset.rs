//! The `replicaset` and `replicationcontroller` controllers on simulated nodes: pods are created up to
//! `spec.replicas` and become Ready, scaling up and down converges, orphans are adopted and pods whose
//! labels stop matching are released and replaced.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
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
