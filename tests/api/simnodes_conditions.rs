//! The node simulator's conditions and pod ranges: a node made to report memory pressure and an
//! unavailable network over `POST /flotilla/v1/nodes/{name}/conditions` reports them at once with
//! kubelet's reasons (transitioning only what flipped), and clears them the same way; nodes
//! registered without a pod range (`assign_pod_cidrs: false`) keep their pods Pending until the Node
//! gets a `spec.podCIDR`, then give them IPs from it. Needs devcluster (the routes are its own, and
//! the simulator would otherwise add nodes to a real cluster).

use std::time::Duration;

use flotilla_devcluster::SimConfig;
use serde_json::{Value, json};

use super::common::{SOON, create, get_ok, pod, pods};
use crate::support::cluster::TestCluster;
use crate::support::namespace::unique_namespace;
use crate::support::raw;
use crate::support::wait::wait_for;

const NODE: &str = "/api/v1/nodes/sim-node-0";

async fn simulated(prefix: &str, sim: SimConfig) -> Option<(TestCluster, kube::Client, String)> {
    if std::env::var_os(crate::support::cluster::KUBECONFIG_ENV).is_some() {
        eprintln!("skipped: the node simulator test {prefix} needs devcluster");
        return None;
    }
    let cluster = TestCluster::builder().with_sim_config(sim).start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, prefix).await;
    Some((cluster, client, ns))
}

fn one_node(assign_pod_cidrs: bool) -> SimConfig {
    SimConfig {
        nodes: 1,
        assign_pod_cidrs,
        ..SimConfig::default()
    }
}

fn condition(node: &Value, kind: &str) -> Value {
    node["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == kind))
        .cloned()
        .unwrap_or(Value::Null)
}

async fn set_conditions(client: &kube::Client, node: &str, body: Value) -> raw::Reply {
    raw::request(
        client,
        http::Method::POST,
        &format!("/flotilla/v1/nodes/{node}/conditions"),
        Some("application/json"),
        serde_json::to_vec(&body).unwrap(),
    )
    .await
}

#[tokio::test]
async fn a_node_reports_pressure_and_an_unavailable_network_when_told_and_clears_them() {
    let Some((_cluster, client, _ns)) = simulated("sim-pressure", one_node(true)).await else {
        return;
    };
    let before = get_ok(&client, NODE).await;
    let disk_since = condition(&before, "DiskPressure")["lastTransitionTime"].clone();
    assert_eq!(condition(&before, "NetworkUnavailable"), Value::Null);

    let reply = set_conditions(
        &client,
        "sim-node-0",
        json!({"MemoryPressure": true, "NetworkUnavailable": true}),
    )
    .await
    .expect_ok(200);
    assert_eq!(
        reply,
        json!({"node": "sim-node-0", "conditions": {"MemoryPressure": true, "DiskPressure": false,
            "PIDPressure": false, "NetworkUnavailable": true}})
    );
    let node = wait_for(SOON, "MemoryPressure=True on the node", || async {
        let node = get_ok(&client, NODE).await;
        (condition(&node, "MemoryPressure")["status"] == "True").then_some(node)
    })
    .await;
    let memory = condition(&node, "MemoryPressure");
    assert_eq!(memory["reason"], "KubeletHasInsufficientMemory");
    assert_eq!(
        memory["message"],
        "kubelet has insufficient memory available"
    );
    let network = condition(&node, "NetworkUnavailable");
    assert_eq!(
        (&network["status"], &network["reason"]),
        (&json!("True"), &json!("NoRouteCreated"))
    );
    assert_eq!(condition(&node, "Ready")["status"], "True");
    assert_eq!(
        condition(&node, "Ready")["message"],
        "kubelet is posting ready status"
    );
    assert_eq!(
        condition(&node, "DiskPressure")["lastTransitionTime"],
        disk_since,
        "only what flipped transitions"
    );

    set_conditions(&client, "sim-node-0", json!({"MemoryPressure": false}))
        .await
        .expect_ok(200);
    let node = wait_for(SOON, "MemoryPressure=False again", || async {
        let node = get_ok(&client, NODE).await;
        (condition(&node, "MemoryPressure")["status"] == "False").then_some(node)
    })
    .await;
    assert_eq!(
        condition(&node, "MemoryPressure")["reason"],
        "KubeletHasSufficientMemory"
    );
    assert_eq!(condition(&node, "NetworkUnavailable")["status"], "True");

    set_conditions(&client, "sim-node-0", json!({"Ready": false}))
        .await
        .expect_status(400, "BadRequest");
    set_conditions(&client, "nope", json!({"DiskPressure": true}))
        .await
        .expect_status(404, "NotFound");
}

#[tokio::test]
async fn without_their_own_pod_range_nodes_keep_pods_pending_until_the_node_gets_one() {
    let Some((_cluster, client, ns)) = simulated("sim-cidr", one_node(false)).await else {
        return;
    };
    let node = get_ok(&client, NODE).await;
    assert_eq!(node["spec"]["podCIDR"], Value::Null, "left to node-ipam");
    create(&client, &pods(&ns), &pod("waits")).await;
    let path = format!("{}/waits", pods(&ns));
    wait_for(SOON, "the pod to be bound", || async {
        let pod = get_ok(&client, &path).await;
        pod["spec"]["nodeName"].is_string().then_some(())
    })
    .await;
    // Absence can only be shown by waiting: several start attempts (100 ms, then every second).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let pod = get_ok(&client, &path).await;
    assert_eq!(pod["status"]["phase"], "Pending", "{pod}");
    assert_eq!(pod["status"]["podIP"], Value::Null);

    // What node-ipam does.
    raw::patch(
        &client,
        NODE,
        "application/merge-patch+json",
        &json!({"spec": {"podCIDR": "10.244.5.0/24", "podCIDRs": ["10.244.5.0/24"]}}),
    )
    .await
    .expect_ok(200);
    let running = wait_for(
        SOON,
        "the pod to run with an IP of the node's range",
        || async {
            let pod = get_ok(&client, &path).await;
            (pod["status"]["phase"] == "Running").then_some(pod)
        },
    )
    .await;
    let ip = running["status"]["podIP"].as_str().unwrap_or_default();
    assert!(ip.starts_with("10.244.5."), "{ip}");
}
