//! The node simulator (kwok-like) against the server: nodes, heartbeats, binding, pod phases.
//! Needs devcluster (the simulator would otherwise add nodes to a real cluster).

use std::time::Duration;

use flotilla_devcluster::SimConfig;
use serde_json::{Value, json};

use super::common::{SOON, create, get_ok, pod, pods, rv};
use crate::support::cluster::TestCluster;
use crate::support::namespace::unique_namespace;
use crate::support::raw;
use crate::support::wait::wait_for;
use crate::support::watch::{RawWatch, event_name, event_type};

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

fn three_nodes() -> SimConfig {
    SimConfig {
        nodes: 3,
        ..SimConfig::default()
    }
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn phase(event: &Value) -> &str {
    event["object"]["status"]["phase"]
        .as_str()
        .unwrap_or_default()
}

/// Opens a watch on the namespace's pods from now.
async fn watch_pods(client: &kube::Client, ns: &str) -> RawWatch {
    let list = get_ok(client, &pods(ns)).await;
    RawWatch::open(
        client,
        &format!("{}?watch=true&resourceVersion={}", pods(ns), rv(&list)),
    )
    .await
}

#[tokio::test]
async fn simulated_nodes_register_ready_with_capacity_leases_and_no_not_ready_taint() {
    let Some((cluster, client, _ns)) = simulated("sim-nodes", three_nodes()).await else {
        return;
    };
    assert_eq!(
        cluster.node_names(),
        ["sim-node-0", "sim-node-1", "sim-node-2"]
    );
    for name in cluster.node_names() {
        let node = get_ok(&client, &format!("/api/v1/nodes/{name}")).await;
        let ready =
            condition(&node, "Ready").unwrap_or_else(|| panic!("{name} has no Ready condition"));
        assert_eq!(ready["status"], "True");
        assert_eq!(node["status"]["capacity"]["cpu"], "32");
        assert_eq!(node["status"]["allocatable"]["memory"], "256Gi");
        assert!(node["status"]["capacity"]["pods"].is_string());
        assert!(
            node["status"]["nodeInfo"]["kubeletVersion"]
                .as_str()
                .unwrap()
                .starts_with("v1.")
        );
        assert_eq!(
            node["metadata"]["labels"]["kubernetes.io/hostname"],
            name.as_str()
        );
        let taints = node["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .all(|t| t["key"] != "node.kubernetes.io/not-ready"),
            "{name}: {taints:?}"
        );
        let lease = get_ok(
            &client,
            &format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"),
        )
        .await;
        assert_eq!(lease["spec"]["holderIdentity"], name.as_str());
        assert!(lease["spec"]["renewTime"].is_string());
        assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    }
}

#[tokio::test]
async fn a_pending_pod_is_bound_and_reported_running_and_ready() {
    let Some((_cluster, client, ns)) = simulated("sim-run", three_nodes()).await else {
        return;
    };
    let mut watch = watch_pods(&client, &ns).await;
    create(&client, &pods(&ns), &pod("web")).await;
    let running = watch
        .next_matching(SOON, "pod web Running", |e| phase(e) == "Running")
        .await;
    let object = &running["object"];
    let node = object["spec"]["nodeName"].as_str().unwrap();
    assert!(node.starts_with("sim-node-"), "{node}");
    assert_eq!(condition(object, "Ready").unwrap()["status"], "True");
    for kind in ["PodScheduled", "Initialized", "ContainersReady"] {
        assert_eq!(condition(object, kind).unwrap()["status"], "True", "{kind}");
    }
    assert!(
        object["status"]["podIP"]
            .as_str()
            .unwrap()
            .starts_with("10.128."),
        "{object}"
    );
    assert!(object["status"]["hostIP"].is_string());
    assert!(object["status"]["startTime"].is_string());
    let statuses = object["status"]["containerStatuses"].as_array().unwrap();
    assert_eq!(statuses[0]["ready"], true);
    assert!(statuses[0]["state"]["running"].is_object());
}

#[tokio::test]
async fn binding_respects_node_name_node_selector_and_the_scheduler_name() {
    let Some((_cluster, client, ns)) = simulated("sim-bind", three_nodes()).await else {
        return;
    };
    let mut other = pod("other-scheduler");
    other["spec"]["schedulerName"] = json!("my-scheduler");
    create(&client, &pods(&ns), &other).await;
    let mut watch = watch_pods(&client, &ns).await;
    let mut pinned = pod("pinned");
    pinned["spec"]["nodeName"] = json!("sim-node-2");
    create(&client, &pods(&ns), &pinned).await;
    let mut selected = pod("selected");
    selected["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "sim-node-1"});
    create(&client, &pods(&ns), &selected).await;
    let mut nowhere = pod("nowhere");
    nowhere["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "no-such-node"});
    create(&client, &pods(&ns), &nowhere).await;

    let mut placed = std::collections::BTreeMap::new();
    while placed.len() < 2 {
        let event = watch
            .next_matching(SOON, "pinned and selected Running", |e| {
                phase(e) == "Running"
            })
            .await;
        placed.insert(
            event_name(&event).to_string(),
            event["object"]["spec"]["nodeName"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(placed["pinned"], "sim-node-2");
    assert_eq!(placed["selected"], "sim-node-1");
    for name in ["other-scheduler", "nowhere"] {
        let left = get_ok(&client, &format!("{}/{name}", pods(&ns))).await;
        assert!(
            left["spec"].get("nodeName").is_none_or(Value::is_null),
            "{name} must stay unbound: {left}"
        );
        assert_eq!(left["status"]["phase"], "Pending", "{name}");
    }
}

#[tokio::test]
async fn an_image_ending_in_fail_crash_loops_a_restarted_pod_and_fails_one_that_never_restarts() {
    let Some((_cluster, client, ns)) = simulated("sim-fail", three_nodes()).await else {
        return;
    };
    let mut watch = watch_pods(&client, &ns).await;
    let mut looping = pod("loop");
    looping["spec"]["containers"][0]["image"] = json!("app:fail");
    create(&client, &pods(&ns), &looping).await;
    let started = watch
        .next_matching(SOON, "pod loop Running", |e| phase(e) == "Running")
        .await;
    assert_eq!(
        condition(&started["object"], "Ready").unwrap()["status"],
        "False",
        "a crash-looping pod is never Ready"
    );
    let container = &started["object"]["status"]["containerStatuses"][0];
    assert_eq!(container["state"]["waiting"]["reason"], "CrashLoopBackOff");
    assert!(container["restartCount"].as_i64().unwrap() >= 1);

    let mut failing = pod("crash");
    failing["spec"]["containers"][0]["image"] = json!("app:fail");
    failing["spec"]["restartPolicy"] = json!("Never");
    create(&client, &pods(&ns), &failing).await;
    let failed = watch
        .next_matching(SOON, "pod crash Failed", |e| phase(e) == "Failed")
        .await;
    assert_eq!(
        condition(&failed["object"], "Ready").unwrap()["status"],
        "False"
    );
    let terminated = &failed["object"]["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_ne!(terminated["exitCode"], 0);
}

#[tokio::test]
async fn pods_that_run_to_completion_succeed_after_the_job_duration() {
    let sim = SimConfig {
        job_pod_duration: Duration::from_millis(300),
        ..three_nodes()
    };
    let Some((_cluster, client, ns)) = simulated("sim-job", sim).await else {
        return;
    };
    let mut watch = watch_pods(&client, &ns).await;
    let mut job_pod = pod("job-pod");
    job_pod["spec"]["restartPolicy"] = json!("Never");
    create(&client, &pods(&ns), &job_pod).await;
    watch
        .next_matching(SOON, "job-pod Running", |e| phase(e) == "Running")
        .await;
    let done = watch
        .next_matching(SOON, "job-pod Succeeded", |e| phase(e) == "Succeeded")
        .await;
    let terminated = &done["object"]["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 0);
    assert_eq!(terminated["reason"], "Completed");
}

#[tokio::test]
async fn a_graceful_delete_of_a_running_pod_is_finished_by_the_simulated_kubelet() {
    let Some((_cluster, client, ns)) = simulated("sim-delete", three_nodes()).await else {
        return;
    };
    let mut watch = watch_pods(&client, &ns).await;
    create(&client, &pods(&ns), &pod("doomed")).await;
    watch
        .next_matching(SOON, "doomed Running", |e| phase(e) == "Running")
        .await;
    let marked = raw::delete(&client, &format!("{}/doomed", pods(&ns)), None)
        .await
        .expect_ok(200);
    assert_eq!(
        marked["metadata"]["deletionGracePeriodSeconds"], 30,
        "a bound pod is deleted gracefully"
    );
    let deleted = watch
        .next_matching(SOON, "doomed DELETED", |e| event_type(e) == "DELETED")
        .await;
    assert_eq!(event_name(&deleted), "doomed");
}

#[tokio::test]
async fn a_stopped_node_stops_renewing_its_lease_until_started_again() {
    let sim = SimConfig {
        lease_renew_interval: Duration::from_millis(200),
        ..three_nodes()
    };
    let Some((cluster, client, _ns)) = simulated("sim-stop", sim).await else {
        return;
    };
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/sim-node-0";
    let renew_time = |lease: &Value| {
        lease["spec"]["renewTime"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let first = renew_time(&get_ok(&client, lease_path).await);
    wait_for(SOON, "sim-node-0 to renew its lease", || async {
        (renew_time(&get_ok(&client, lease_path).await) != first).then_some(())
    })
    .await;

    cluster.stop_node("sim-node-0");
    // A running node renews ~10 times in 2 s; a stopped one at most once more (a renewal already
    // in flight when it was stopped).
    let list = get_ok(
        &client,
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
    )
    .await;
    let mut watch = RawWatch::open(
        &client,
        &format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?watch=true&timeoutSeconds=2&fieldSelector=metadata.name%3Dsim-node-0&resourceVersion={}",
            rv(&list)
        ),
    )
    .await;
    let events = watch
        .until_end(SOON, "two seconds of a stopped node's lease")
        .await;
    let renewals = events
        .iter()
        .filter(|e| event_type(e) == "MODIFIED")
        .count();
    assert!(
        renewals <= 1,
        "a stopped node kept renewing its lease: {events:?}"
    );
    let node = get_ok(&client, "/api/v1/nodes/sim-node-0").await;
    assert_eq!(
        condition(&node, "Ready").unwrap()["status"],
        "True",
        "the simulator does not fake NotReady"
    );

    cluster.start_node("sim-node-0");
    let stale = renew_time(&get_ok(&client, lease_path).await);
    wait_for(SOON, "the restarted node to renew its lease", || async {
        (renew_time(&get_ok(&client, lease_path).await) != stale).then_some(())
    })
    .await;
}

#[tokio::test]
async fn nodes_can_be_stopped_and_started_over_http() {
    let Some((_cluster, client, _ns)) = simulated("sim-http", three_nodes()).await else {
        return;
    };
    let post = |path: String| {
        let client = client.clone();
        async move { raw::request(&client, http::Method::POST, &path, None, Vec::new()).await }
    };
    let stopped = post("/flotilla/v1/nodes/sim-node-1/stop".into())
        .await
        .expect_ok(200);
    assert_eq!(stopped, json!({"node": "sim-node-1", "running": false}));
    let started = post("/flotilla/v1/nodes/sim-node-1/start".into())
        .await
        .expect_ok(200);
    assert_eq!(started, json!({"node": "sim-node-1", "running": true}));
    post("/flotilla/v1/nodes/nope/stop".into())
        .await
        .expect_status(404, "NotFound");
}

// Server, simulator and test share the runtime: give them two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_pods_all_become_running() {
    let Some((_cluster, client, ns)) = simulated("sim-many", three_nodes()).await else {
        return;
    };
    const PODS: usize = 200;
    let bodies: Vec<Value> = (0..PODS).map(|i| pod(&format!("p{i}"))).collect();
    let collection = pods(&ns);
    futures::future::join_all(bodies.iter().map(|body| create(&client, &collection, body))).await;
    wait_for(
        Duration::from_secs(60),
        "200 pods to be Running",
        || async {
            let running = get_ok(
                &client,
                &format!("{}?fieldSelector=status.phase%3DRunning", pods(&ns)),
            )
            .await;
            (running["items"].as_array().map(Vec::len) == Some(PODS)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_deleted_simulated_node_registers_again() {
    let sim = SimConfig {
        status_interval: Duration::from_millis(200),
        ..three_nodes()
    };
    let Some((_cluster, client, _ns)) = simulated("sim-reregister", sim).await else {
        return;
    };
    let before = get_ok(&client, "/api/v1/nodes/sim-node-1").await;
    raw::delete(&client, "/api/v1/nodes/sim-node-1", None)
        .await
        .expect_ok(200);
    let again = wait_for(SOON, "sim-node-1 to register again", || async {
        let reply = raw::get(&client, "/api/v1/nodes/sim-node-1").await;
        (reply.status == 200).then(|| reply.json())
    })
    .await;
    assert_ne!(again["metadata"]["uid"], before["metadata"]["uid"]);
    wait_for(SOON, "the new sim-node-1 to be Ready", || async {
        let node = get_ok(&client, "/api/v1/nodes/sim-node-1").await;
        condition(&node, "Ready")
            .is_some_and(|c| c["status"] == "True")
            .then_some(())
    })
    .await;
}
