//! The `disruption` controller on simulated nodes, against what kube-controller-manager v1.32
//! writes (`kube-fixtures/kcm-v1.32/disruption/`). With the `replicaset` controller: a ReplicaSet
//! of 3 under a PodDisruptionBudget of `minAvailable: 2` gets fixture 07's status (all Ready: one
//! disruption allowed); `disruptionsAllowed` follows a pod turning unready and ready again; one
//! eviction is allowed and the next refused with 429 (08, 11); the budget recovers once the
//! replacement is Ready (16); the controller writes no Event (17). With the `deployment`
//! controller: `maxUnavailable: 50%` scales over the Deployment's replicas, and `minAvailable: 50%`
//! over a custom resource's `/scale`, whatever number of pods exists.
//!
//! On devcluster the simulated kubelet reports pods Ready 2 s after binding (long enough for the
//! refused eviction to meet the exhausted budget) and the test plays the kubelet to turn a pod
//! unready; on a real cluster (`FLOTILLA_TEST_KUBECONFIG`) that step and the custom resource are
//! skipped.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::raw;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(30);

fn replica_set() -> ReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }))
    .unwrap()
}

fn budget() -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web-pdb"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .unwrap()
}

/// (currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed, condition status, reason) of
/// the budget's status once it observed generation 1.
type Counts = (i32, i32, i32, i32, String, String);

fn counts(pdb: &PodDisruptionBudget) -> Option<Counts> {
    let status = pdb.status.as_ref()?;
    if status.observed_generation != Some(1) {
        return None;
    }
    let condition = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed")?;
    assert_eq!(condition.message, "", "as upstream, the message is empty");
    assert_eq!(condition.observed_generation, Some(1));
    Some((
        status.current_healthy,
        status.desired_healthy,
        status.expected_pods,
        status.disruptions_allowed,
        condition.status.clone(),
        condition.reason.clone(),
    ))
}

fn want(healthy: i32, desired: i32, expected: i32, allowed: i32) -> Counts {
    let (status, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    (
        healthy,
        desired,
        expected,
        allowed,
        status.into(),
        reason.into(),
    )
}

/// Waits until budget `name`'s status holds `wanted` and lists no disrupted pod.
async fn settled(
    pdbs: &Api<PodDisruptionBudget>,
    name: &str,
    wanted: Counts,
    what: &str,
) -> PodDisruptionBudget {
    let what = format!("{what}: status {wanted:?}");
    wait_for(CONVERGE, &what, || async {
        let pdb = pdbs.get(name).await.ok()?;
        let no_disrupted = pdb
            .status
            .as_ref()
            .is_some_and(|s| s.disrupted_pods.as_ref().is_none_or(|d| d.is_empty()));
        (counts(&pdb).as_ref() == Some(&wanted) && no_disrupted).then_some(pdb)
    })
    .await
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn ready_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
        .collect()
}

/// Sets the pod's Ready condition (the kubelet's part, played by the test).
async fn set_ready(pods: &Api<Pod>, name: &str, ready: bool) {
    let value = if ready { "True" } else { "False" };
    let patch = json!({"status": {"conditions": [
        {"type": "Ready", "status": value}, {"type": "ContainersReady", "status": value}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// A client that answers a 429 at once: kube's clients retry 429s by default (15 times, backing
/// off), as they should for throttling, but a refused eviction is the answer under test.
async fn without_retries(cluster: &TestCluster) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(cluster.kubeconfig_path()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

fn eviction(ns: &str, pod: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}})
}

#[tokio::test]
async fn a_budget_over_a_replica_set_follows_readiness_allows_one_eviction_and_recovers() {
    let sim = flotilla_devcluster::SimConfig {
        pod_ready_delay: Duration::from_secs(2),
        ..flotilla_devcluster::SimConfig::default()
    };
    let cluster = TestCluster::builder().with_sim_config(sim).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "replicaset,disruption", 2).await;
    let ns = unique_namespace(&client, "disruption").await;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    replica_sets
        .create(&PostParams::default(), &replica_set())
        .await
        .unwrap();
    // As in the recording, the budget comes once the ReplicaSet's pods exist (a budget over no pod
    // gets a `NoPods` Event).
    wait_for(CONVERGE, "ReplicaSet web's 3 pods", || async {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?;
        (list.items.len() == 3).then_some(())
    })
    .await;
    let created = pdbs
        .create(&PostParams::default(), &budget())
        .await
        .unwrap();
    let status = created.status.unwrap_or_default();
    assert_eq!(
        (
            status.current_healthy,
            status.desired_healthy,
            status.expected_pods,
            status.disruptions_allowed
        ),
        (0, 0, 0, 0),
        "fixture 02: a new budget's status is all zeros"
    );

    // Fixture 07: all three Ready, one disruption allowed.
    settled(
        &pdbs,
        "web-pdb",
        want(3, 2, 3, 1),
        "web-pdb to allow one disruption over 3 ready pods",
    )
    .await;

    if cluster.is_devcluster() {
        let name = ready_pods(&pods).await[0].name_any();
        set_ready(&pods, &name, false).await;
        settled(
            &pdbs,
            "web-pdb",
            want(2, 2, 3, 0),
            "web-pdb to allow none with a pod unready",
        )
        .await;
        set_ready(&pods, &name, true).await;
        settled(
            &pdbs,
            "web-pdb",
            want(3, 2, 3, 1),
            "web-pdb to allow one again",
        )
        .await;
    }

    // Fixtures 08 and 11: the first eviction is allowed, the next refused.
    let ready = ready_pods(&pods).await;
    let (first, second) = (ready[0].name_any(), ready[1].name_any());
    let path = |pod: &str| format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction");
    let allowed = raw::post(&client, &path(&first), &eviction(&ns, &first)).await;
    assert_eq!(
        allowed.expect_ok(201),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    );
    let once = without_retries(&cluster).await;
    let refused = raw::post(&once, &path(&second), &eviction(&ns, &second)).await;
    let body = refused.expect_status(429, "TooManyRequests");
    assert_eq!(
        body["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(body["details"]["causes"][0]["reason"], "DisruptionBudget");

    // Fixture 16: the evicted pod goes, its replacement turns Ready, one disruption is allowed
    // again and the eviction's record is gone.
    settled(
        &pdbs,
        "web-pdb",
        want(3, 2, 3, 1),
        "web-pdb to recover after the eviction",
    )
    .await;
    let remaining: Vec<String> = ready_pods(&pods)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(
        !remaining.contains(&first),
        "{first} was evicted: {remaining:?}"
    );
    assert!(
        remaining.contains(&second),
        "{second} was kept: {remaining:?}"
    );

    // Fixture 17: the disruption controller wrote no Event about the budget.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let about_budget: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("PodDisruptionBudget"))
        .collect();
    assert!(about_budget.is_empty(), "{about_budget:?}");
}

/// A namespaced custom resource `Widget` with a scale subresource, served at once by devcluster.
async fn widget_kind(client: &kube::Client) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.disruption.flotilla.dev"},
        "spec": {
            "group": "disruption.flotilla.dev",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
            }],
        },
    });
    raw::post(
        client,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd,
    )
    .await
    .expect_ok(201);
}

#[tokio::test]
async fn percentages_and_max_unavailable_scale_over_deployments_and_custom_resources() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let (_fleet, _procs) =
        Fleet::of_controllers(&cluster, "deployment,replicaset,disruption", 2).await;
    let ns = unique_namespace(&client, "disruption-scale").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // maxUnavailable 50% of a Deployment's 2 replicas (its ReplicaSet's pods count as the
    // Deployment's): 1 may be unavailable; at 3 replicas, 2 (rounded up).
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &crate::support::objects::deployment("api", 2),
        )
        .await
        .unwrap();
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "api-pdb"},
        "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "api"}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &budget).await.unwrap();
    settled(
        &pdbs,
        "api-pdb",
        want(2, 1, 2, 1),
        "api-pdb over 2 replicas",
    )
    .await;
    let scale = json!({"spec": {"replicas": 3}});
    deployments
        .patch("api", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    settled(
        &pdbs,
        "api-pdb",
        want(3, 1, 3, 2),
        "api-pdb over 3 replicas",
    )
    .await;

    if !cluster.is_devcluster() {
        return; // The rest adds a CRD, which a shared cluster should not get from a test.
    }
    // minAvailable 50% of a Widget's 3 replicas, read from its /scale: 2 must be healthy, whatever
    // number of pods exists.
    widget_kind(&client).await;
    let widgets = format!("/apis/disruption.flotilla.dev/v1/namespaces/{ns}/widgets");
    let widget = json!({"apiVersion": "disruption.flotilla.dev/v1", "kind": "Widget",
                        "metadata": {"name": "w"}, "spec": {"replicas": 3}});
    let widget = wait_for(CONVERGE, "the Widget kind to be served", || async {
        let reply = raw::post(&client, &widgets, &widget).await;
        (reply.status == 201).then(|| reply.json())
    })
    .await;
    let owned = |i: usize| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("w-{i}"), "labels": {"app": "widget"}, "ownerReferences": [{
                "apiVersion": "disruption.flotilla.dev/v1", "kind": "Widget", "name": "w",
                "uid": widget["metadata"]["uid"], "controller": true}]},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
        }))
        .unwrap()
    };
    for i in 0..2 {
        pods.create(&PostParams::default(), &owned(i))
            .await
            .unwrap();
    }
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "widget-pdb"},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "widget"}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &budget).await.unwrap();
    settled(
        &pdbs,
        "widget-pdb",
        want(2, 2, 3, 0),
        "widget-pdb with 2 of 3 pods",
    )
    .await;
    pods.create(&PostParams::default(), &owned(2))
        .await
        .unwrap();
    settled(
        &pdbs,
        "widget-pdb",
        want(3, 2, 3, 1),
        "widget-pdb with 3 of 3 pods",
    )
    .await;
}
