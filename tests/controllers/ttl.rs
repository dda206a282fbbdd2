//! The `ttl` controller: every Node of a small cluster gets annotation
//! `node.alpha.kubernetes.io/ttl: "0"`, as kube-controller-manager's ttl-controller writes it
//! (kcm-v1.32/daemonset fixtures: "0" within a second of registration), and a Node whose annotation
//! someone changes gets it back. The size table and its hysteresis are unit-tested beside the
//! controller.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::random_suffix;
use crate::support::wait::wait_for;

const TTL: &str = "node.alpha.kubernetes.io/ttl";
const CONVERGE: Duration = Duration::from_secs(20);

async fn ttl_of(nodes: &Api<Node>, name: &str) -> Option<String> {
    let node = nodes.get_opt(name).await.ok()??;
    node.metadata.annotations?.get(TTL).cloned()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_node_of_a_small_cluster_gets_a_ttl_of_zero() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "ttl", 1).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let names: Vec<String> = (0..3)
        .map(|i| format!("ttl-{}-{i}", random_suffix(5)))
        .collect();
    for name in &names {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    for name in &names {
        wait_for(CONVERGE, &format!("{name} annotated ttl 0"), || async {
            (ttl_of(&nodes, name).await.as_deref() == Some("0")).then_some(())
        })
        .await;
    }

    // Someone else's value is put back.
    let patch = json!({"metadata": {"annotations": {TTL: "42"}}});
    nodes
        .patch(&names[0], &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for(CONVERGE, "the ttl annotation set back to 0", || async {
        (ttl_of(&nodes, &names[0]).await.as_deref() == Some("0")).then_some(())
    })
    .await;
    for name in &names {
        nodes.delete(name, &DeleteParams::default()).await.unwrap();
    }
}
