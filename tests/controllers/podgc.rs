//! The `podgc` controller: with `--terminated-pod-gc-threshold 3`, the two oldest of five
//! terminated pods are deleted and the rest kept; pods bound to a Node that is deleted are marked
//! Failed with kube-controller-manager's `DisruptionTarget` condition and force-deleted, but only
//! after the 40 s quarantine, while a pod on a live simulated node stays.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::{random_suffix, unique_namespace};
use crate::support::wait::wait_for;
use crate::support::watch::{RawWatch, event_name, event_type};

/// One pass every 20 s, plus the cache's and the fleet's delays.
const PASS: Duration = Duration::from_secs(60);
/// The 40 s quarantine of a missing node, then up to one more pass.
const ORPHANS: Duration = Duration::from_secs(120);

/// A coordinator and a worker running the pod GC with `threshold`.
async fn fleet(cluster: &TestCluster, threshold: &str) -> (Fleet, Vec<Proc>) {
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let procs = vec![
        fleet.coordinator("c0", &[]),
        fleet.worker(
            "flotilla",
            "w0",
            &[
                "worker",
                "--controllers",
                "podgc",
                "--terminated-pod-gc-threshold",
                threshold,
            ],
        ),
    ];
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    (fleet, procs)
}

/// A pod bound to `node`, or, without one, a pod no scheduler binds (its scheduler does not exist),
/// so its status is the test's to write on any cluster.
fn pod(name: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
    });
    match node {
        Some(node) => spec["nodeName"] = json!(node),
        None => spec["schedulerName"] = json!("flotilla-test-no-scheduler"),
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn terminated_pods_beyond_the_threshold_are_deleted_oldest_first() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, "3").await;
    let ns = unique_namespace(&client, "podgc").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // Created in name order, so the oldest are also first by name (the tie-break of equal
    // creation seconds).
    for name in ["term-1", "term-2", "term-3", "term-4", "term-5", "waiting"] {
        pods.create(&PostParams::default(), &pod(name, None))
            .await
            .unwrap();
    }
    for (name, phase) in [
        ("term-1", "Succeeded"),
        ("term-2", "Succeeded"),
        ("term-3", "Succeeded"),
        ("term-4", "Failed"),
        ("term-5", "Succeeded"),
    ] {
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
    }

    wait_for(PASS, "term-1 and term-2 to be deleted", || async {
        let one = pods.get_opt("term-1").await.ok()?;
        let two = pods.get_opt("term-2").await.ok()?;
        (one.is_none() && two.is_none()).then_some(())
    })
    .await;
    let left: BTreeSet<String> = pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(
        left,
        ["term-3", "term-4", "term-5", "waiting"]
            .map(String::from)
            .into(),
        "the threshold's three newest terminated pods and the pending one stay"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_of_a_deleted_node_are_marked_failed_and_force_deleted_after_the_quarantine() {
    let cluster = TestCluster::builder().with_nodes(1).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, "12500").await;
    let ns = unique_namespace(&client, "podgc").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let nodes: Api<Node> = Api::all(client.clone());

    // A Node no kubelet runs, named uniquely as a cluster-scoped object of a test must be.
    let doomed = format!("podgc-gone-{}", random_suffix(6));
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": doomed}})).unwrap(),
        )
        .await
        .unwrap();
    for name in ["orphan-1", "orphan-2"] {
        pods.create(&PostParams::default(), &pod(name, Some(&doomed)))
            .await
            .unwrap();
    }
    // A pod on a live simulated node (devcluster only) must stay.
    let live = cluster.node_names().first().cloned();
    if let Some(node) = &live {
        pods.create(&PostParams::default(), &pod("alive", Some(node)))
            .await
            .unwrap();
    }

    let mut watch =
        RawWatch::open(&client, &format!("/api/v1/namespaces/{ns}/pods?watch=true")).await;
    nodes
        .delete(&doomed, &DeleteParams::default())
        .await
        .unwrap();
    let deleted_at = Instant::now();

    // What each orphan went through: its last status before it was deleted.
    let mut last_status: BTreeMap<String, Value> = BTreeMap::new();
    let mut gone = BTreeSet::new();
    while gone.len() < 2 {
        let event = watch
            .next_matching(ORPHANS, "the orphans' deletion", |e| {
                matches!(event_type(e), "MODIFIED" | "DELETED")
            })
            .await;
        let name = event_name(&event).to_owned();
        if name == "alive" {
            // Its simulated kubelet reports it Running; only the pod GC would delete it.
            assert_ne!(
                event_type(&event),
                "DELETED",
                "the pod on a live node was deleted"
            );
            continue;
        }
        last_status.insert(name.clone(), event["object"]["status"].clone());
        if event_type(&event) == "DELETED" {
            gone.insert(name);
        }
    }
    // The quarantine starts when a pass first misses the node: after its deletion, or, if a pass ran
    // in the moment between the pods' binding and the node reaching the cache, a little before.
    let waited = deleted_at.elapsed();
    assert!(
        waited >= Duration::from_secs(35),
        "orphans deleted {waited:?} after their node, within the 40 s quarantine"
    );
    for name in ["orphan-1", "orphan-2"] {
        let status = &last_status[name];
        assert_eq!(status["phase"], "Failed", "{name}: {status}");
        let condition = status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionTarget"))
            .unwrap_or_else(|| panic!("{name} has no DisruptionTarget condition: {status}"));
        assert_eq!(condition["status"], "True");
        assert_eq!(condition["reason"], "DeletionByPodGC");
        assert_eq!(condition["message"], "PodGC: node no longer exists");
    }
    if live.is_some() {
        let alive = pods.get("alive").await.unwrap();
        assert!(alive.metadata.deletion_timestamp.is_none());
    }
}
