//! Mapping rules and named indexes on a real fleet, with the `rules` probe of `fleet-probe`: its
//! primary kind is cluster-scoped (Namespaces labelled `flotilla.dev/probe=rules`), a Node event
//! reconciles every one of them (fan-out), a ConfigMap in another namespace naming one in `data.target`
//! reconciles it (a namespaced object naming a cluster-scoped primary), and each reconcile lists from
//! the named index `rules-target` exactly the ConfigMaps naming its Namespace — through a create, a
//! retarget and a delete, so the coordinator's index follows every change.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::json;

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::{random_suffix, unique_namespace};
use crate::support::wait::wait_for;

/// One line of the rules journal.
#[derive(Debug, Clone, Deserialize)]
struct Line {
    key: String,
    reason: String,
    indexed: Vec<String>,
}

/// Every complete line of the journal.
fn read(path: &Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits for a line after the first `from` lines that `wanted` accepts; returns it.
async fn journalled(
    journal: &Path,
    from: usize,
    what: &str,
    wanted: impl Fn(&Line) -> bool,
) -> Line {
    wait_for(Duration::from_secs(60), what, || async {
        read(journal).into_iter().skip(from).find(|l| wanted(l))
    })
    .await
}

/// A test namespace the probe reconciles.
async fn probed_namespace(client: &kube::Client, prefix: &str) -> String {
    let name = unique_namespace(client, prefix).await;
    let patch = json!({"metadata": {"labels": {"flotilla.dev/probe": "rules"}}});
    Api::<Namespace>::all(client.clone())
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("label the namespace for the probe");
    name
}

/// Changes a Node: annotates the first one there is, or creates one (devcluster without simulated
/// nodes has none). Returns its name.
async fn touch_a_node(client: &kube::Client) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    let existing = nodes.list(&ListParams::default().limit(1)).await.unwrap();
    if let Some(name) = existing.items.first().and_then(|n| n.metadata.name.clone()) {
        let patch =
            json!({"metadata": {"annotations": {"flotilla.dev/rules-probe": random_suffix(8)}}});
        nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("annotate a node");
        return name;
    }
    let node: Node = serde_json::from_value(
        json!({"metadata": {"name": format!("rules-{}", random_suffix(6))}}),
    )
    .unwrap();
    let created = nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create a node");
    created.metadata.name.expect("a named node")
}

#[tokio::test(flavor = "multi_thread")]
async fn fan_out_a_cross_scope_field_reference_and_a_named_index_reach_a_cluster_scoped_primary() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let a = probed_namespace(&client, "rules-a").await;
    let b = probed_namespace(&client, "rules-b").await;
    let source = unique_namespace(&client, "rules-src").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("rules.jsonl");
    let _c0 = fleet.coordinator("c0", &[]);
    let _w0 = fleet.worker(
        "fleet-probe",
        "w0",
        &[
            "--controllers",
            "rules",
            "--journal",
            &journal.display().to_string(),
        ],
    );
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    for ns in [&a, &b] {
        journalled(
            &journal,
            0,
            &format!("the initial reconcile of {ns}"),
            |l| &l.key == ns,
        )
        .await;
    }

    // Fan-out: one Node event reconciles every primary.
    let from = read(&journal).len();
    let node = touch_a_node(&client).await;
    for ns in [&a, &b] {
        journalled(
            &journal,
            from,
            &format!("{ns} reconciled for node {node}"),
            |l| &l.key == ns && l.reason.starts_with("object_changed v1/nodes "),
        )
        .await;
    }

    // A ConfigMap of another namespace names `a`: `a` runs for its event and the named index lists it.
    let from = read(&journal).len();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &source);
    let reference: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "ref"}, "data": {"target": a}}))
            .unwrap();
    configmaps
        .create(&PostParams::default(), &reference)
        .await
        .expect("create the referencing configmap");
    let ref_key = format!("{source}/ref");
    let line = journalled(
        &journal,
        from,
        &format!("{a} reconciled for {ref_key}"),
        |l| l.key == a && l.reason == format!("object_changed v1/configmaps {ref_key}"),
    )
    .await;
    assert_eq!(line.indexed, std::slice::from_ref(&ref_key), "{line:?}");

    // Retargeted to `b`: both run (the old object named `a`, the new one names `b`), and the index
    // moved the ConfigMap from `a` to `b`.
    let from = read(&journal).len();
    configmaps
        .patch(
            "ref",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"target": b}})),
        )
        .await
        .expect("retarget the configmap");
    journalled(
        &journal,
        from,
        &format!("{a} reconciled with nothing indexed"),
        |l| l.key == a && l.indexed.is_empty(),
    )
    .await;
    journalled(
        &journal,
        from,
        &format!("{b} reconciled with {ref_key} indexed"),
        |l| l.key == b && l.indexed == [ref_key.clone()],
    )
    .await;

    // Deleted: `b` runs once more and the index no longer lists it.
    let from = read(&journal).len();
    configmaps
        .delete("ref", &DeleteParams::default())
        .await
        .expect("delete the configmap");
    journalled(
        &journal,
        from,
        &format!("{b} reconciled after {ref_key} went"),
        |l| l.key == b && l.indexed.is_empty(),
    )
    .await;
}
