//! The node simulator standing in for the scheduler's volume check: a pod that mounts a missing
//! PersistentVolumeClaim stays unbound and Pending with `PodScheduled=False` / `Unschedulable`,
//! and runs once the claim is created. Needs devcluster (the simulator would otherwise add nodes to
//! a real cluster).

use flotilla_devcluster::SimConfig;
use serde_json::{Value, json};

use super::common::{SOON, create, get_ok, pods, rv};
use crate::support::cluster::TestCluster;
use crate::support::namespace::unique_namespace;
use crate::support::watch::RawWatch;

fn pod_with_claim(name: &str, claim: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "nginx",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    })
}

fn claim(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })
}

fn pod_scheduled(object: &Value) -> Option<&Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
}

#[tokio::test]
async fn a_pod_waits_unscheduled_for_its_claim_and_runs_once_it_exists() {
    if std::env::var_os(crate::support::cluster::KUBECONFIG_ENV).is_some() {
        eprintln!("skipped: the claim wait of the node simulator needs devcluster");
        return;
    }
    let sim = SimConfig {
        nodes: 2,
        ..SimConfig::default()
    };
    let cluster = TestCluster::builder().with_sim_config(sim).start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "sim-claim").await;
    let list = get_ok(&client, &pods(&ns)).await;
    let mut watch = RawWatch::open(
        &client,
        &format!("{}?watch=true&resourceVersion={}", pods(&ns), rv(&list)),
    )
    .await;

    create(&client, &pods(&ns), &pod_with_claim("db", "data")).await;
    let waiting = watch
        .next_matching(SOON, "pod db PodScheduled=False", |e| {
            pod_scheduled(&e["object"]).is_some_and(|c| c["status"] == "False")
        })
        .await;
    let object = &waiting["object"];
    let condition = pod_scheduled(object).unwrap();
    assert_eq!(condition["reason"], "Unschedulable");
    assert_eq!(
        condition["message"],
        "0/2 nodes are available: persistentvolumeclaim \"data\" not found. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    assert!(object["spec"]["nodeName"].is_null(), "{object}");
    assert_eq!(object["status"]["phase"], "Pending");

    // A claim of another name, or in another namespace, does not release it.
    create(
        &client,
        &format!("/api/v1/namespaces/{ns}/persistentvolumeclaims"),
        &claim("other"),
    )
    .await;
    let stored = get_ok(&client, &format!("{}/db", pods(&ns))).await;
    assert!(stored["spec"]["nodeName"].is_null(), "{stored}");

    create(
        &client,
        &format!("/api/v1/namespaces/{ns}/persistentvolumeclaims"),
        &claim("data"),
    )
    .await;
    let running = watch
        .next_matching(SOON, "pod db Running", |e| {
            e["object"]["status"]["phase"] == "Running"
        })
        .await;
    let object = &running["object"];
    assert!(
        object["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| n.starts_with("sim-node-")),
        "{object}"
    );
    assert_eq!(pod_scheduled(object).unwrap()["status"], "True");
}
