//! The `nodelifecycle` controller beside `taint-eviction`, with grace periods of seconds: a simulated
//! node that stops heartbeating is marked Unknown as kube-controller-manager v1.32 writes it, tainted
//! `unreachable` (NoSchedule at once, NoExecute a `--node-monitor-period` later), its pods marked not
//! ready and evicted as they tolerate it, and untainted when it comes back; a zone going dark taints
//! at the normal rate, then none when partially disrupted, and every zone dark removes the NoExecute
//! taints (master disruption mode); a worker killed while a node is dark restarts its observation,
//! so nothing is tainted or evicted earlier than the new observer's grace allows, nothing twice, and
//! a leader killed meanwhile changes nothing.
//!
//! Devcluster only: a fleet with a few seconds of grace would mark a real cluster's nodes Unknown.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_devcluster::SimConfig;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::skip_unless_devcluster;
use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::random_suffix;
use crate::support::wait::wait_for;

/// The grace period the workers get (`--node-monitor-grace-period`).
const GRACE: Duration = Duration::from_secs(3);
/// How long any step may take to show.
const CONVERGE: Duration = Duration::from_secs(30);
/// `timeAdded` and transition times have whole seconds.
const SECOND: Duration = Duration::from_secs(1);
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const LEASES: &str = "kube-node-lease";

/// The worker flags of these tests: seconds of grace, half-second passes.
fn worker_args(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![
        "worker",
        "--controllers",
        "nodelifecycle,taint-eviction",
        "--node-monitor-grace-period",
        "3s",
        "--node-startup-grace-period",
        "3s",
        "--node-monitor-period",
        "500ms",
    ];
    args.extend_from_slice(extra);
    args
}

/// A devcluster with `nodes` simulated nodes renewing their Leases every 500 ms.
async fn cluster(nodes: usize) -> TestCluster {
    let sim = SimConfig {
        nodes,
        lease_renew_interval: Duration::from_millis(500),
        ..SimConfig::default()
    };
    TestCluster::builder().with_sim_config(sim).start().await
}

/// A pod pinned to `node` tolerating `unreachable` NoExecute for `seconds`.
fn pod(name: &str, node: &str, seconds: i64) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "tolerations": [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": seconds}],
        },
    }))
    .unwrap()
}

fn ready_of(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

fn node_ready(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// The node's taints as (key, effect, timeAdded).
fn taints(node: &Node) -> Vec<(String, String, Option<Timestamp>)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect, t.time_added.map(|t| t.0)))
        .collect()
}

/// When the node got its `key` NoExecute taint, if it has one.
fn no_execute(node: &Node, key: &str) -> Option<Timestamp> {
    taints(node)
        .into_iter()
        .find(|(k, e, _)| k == key && e == "NoExecute")
        .map(|(_, _, at)| at.expect("a NoExecute taint carries timeAdded"))
}

fn lifecycle_no_execute(node: &Node) -> bool {
    taints(node).iter().any(|(k, e, _)| {
        e == "NoExecute" && (k == UNREACHABLE || k == "node.kubernetes.io/not-ready")
    })
}

/// (reason, message, type, source) of the Events about `name` in `ns`.
async fn events(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Vec<(String, String, String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits for `name`'s deletion to start (or the pod to be gone); returns when it was seen.
async fn deletion_seen(pods: &Api<Pod>, name: &str) -> Instant {
    wait_for(CONVERGE, &format!("pod {name} to be evicted"), || async {
        match pods.get_opt(name).await.ok()? {
            None => Some(Instant::now()),
            Some(p) => p.metadata.deletion_timestamp.map(|_| Instant::now()),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_node_is_marked_unknown_tainted_and_evicted_as_tolerated_and_untainted_on_return()
{
    let cluster = cluster(2).await;
    skip_unless_devcluster!(
        cluster,
        "a few seconds of grace would mark real nodes Unknown"
    );
    let client = cluster.client();
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let _procs: Vec<Proc> = vec![
        fleet.coordinator("c0", &[]),
        fleet.worker("flotilla", "w0", &worker_args(&[])),
    ];
    fleet.wait_for_workers(1, CONVERGE).await;
    let ns = cluster.namespace("nl").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let nodes: Api<Node> = Api::all(client.clone());
    let (dark, live) = ("sim-node-0", "sim-node-1");
    for p in [
        pod("no-tolerations", dark, 0),
        pod("tolerates-unreachable", dark, 3),
        pod("on-live-node", live, 0),
    ] {
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    wait_for(CONVERGE, "the three pods to be ready", || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        (list.items.len() == 3
            && list
                .items
                .iter()
                .all(|p| ready_of(p).as_deref() == Some("True")))
        .then_some(())
    })
    .await;
    // The node is registered with this worker.
    wait_for(CONVERGE, "RegisteredNode on the node", || async {
        events(&client, "default", dark)
            .await
            .iter()
            .any(|(reason, message, _, source)| {
                reason == "RegisteredNode"
                    && message
                        == &format!("Node {dark} event: Registered Node {dark} in Controller")
                    && source == "node-controller"
            })
            .then_some(())
    })
    .await;

    let stopped = Instant::now();
    cluster.stop_node(dark);
    let unknown = wait_for(CONVERGE, "the dark node to be Unknown", || async {
        let node = nodes.get(dark).await.ok()?;
        (node_ready(&node).as_deref() == Some("Unknown")).then_some(node)
    })
    .await;
    assert!(
        stopped.elapsed() + SECOND >= GRACE,
        "marked Unknown {:?} after its heartbeats stopped, before the grace period",
        stopped.elapsed()
    );
    for c in unknown
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
    {
        if ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"].contains(&c.type_.as_str()) {
            assert_eq!(c.status, "Unknown", "{c:?}");
            assert_eq!(c.reason.as_deref(), Some("NodeStatusUnknown"));
            assert_eq!(
                c.message.as_deref(),
                Some("Kubelet stopped posting node status.")
            );
        }
    }
    let added = wait_for(CONVERGE, "the unreachable taints", || async {
        let node = nodes.get(dark).await.ok()?;
        let t = taints(&node);
        if !t
            .iter()
            .any(|(k, e, at)| k == UNREACHABLE && e == "NoSchedule" && at.is_some())
        {
            return None;
        }
        no_execute(&node, UNREACHABLE)
    })
    .await;

    // The pods of the dark node are marked not ready, the other one is not.
    wait_for(CONVERGE, "the dark node's pods to be not ready", || async {
        let a = pods.get("no-tolerations").await.ok()?;
        let b = pods.get("tolerates-unreachable").await.ok()?;
        (ready_of(&a).as_deref() == Some("False") && ready_of(&b).as_deref() == Some("False"))
            .then_some(())
    })
    .await;
    assert_eq!(
        ready_of(&pods.get("on-live-node").await.unwrap()).as_deref(),
        Some("True")
    );

    // Evicted as they tolerate it: at once, and after three seconds.
    deletion_seen(&pods, "no-tolerations").await;
    deletion_seen(&pods, "tolerates-unreachable").await;
    // The toleration counts from the taint's `timeAdded` (whole seconds, on this machine's clock: the
    // fleet's node lifecycle controller writes it), not from when this test saw the taint.
    let left = Timestamp::now().as_second() - added.as_second();
    assert!(
        left >= 3,
        "a pod tolerating 3 s left {left} s after the taint's timeAdded {added}"
    );
    let live_pod = pods.get("on-live-node").await.unwrap();
    assert!(live_pod.metadata.deletion_timestamp.is_none());

    let node_events = events(&client, "default", dark).await;
    assert!(
        node_events.contains(&(
            "NodeNotReady".into(),
            format!("Node {dark} status is now: NodeNotReady"),
            "Normal".into(),
            "node-controller".into()
        )),
        "{node_events:?}"
    );
    let pod_events = events(&client, &ns, "tolerates-unreachable").await;
    assert!(
        pod_events.contains(&(
            "NodeNotReady".into(),
            "Node is not ready".into(),
            "Warning".into(),
            "node-controller".into()
        )),
        "{pod_events:?}"
    );

    // The node comes back: every taint this controller added goes, no NodeReady Event.
    cluster.start_node(dark);
    wait_for(CONVERGE, "the returned node's taints to go", || async {
        let node = nodes.get(dark).await.ok()?;
        (node_ready(&node).as_deref() == Some("True") && taints(&node).is_empty()).then_some(())
    })
    .await;
    assert!(
        !events(&client, "default", dark)
            .await
            .iter()
            .any(|(reason, ..)| reason == "NodeReady"),
        "the kubelet records NodeReady, not this controller"
    );
}

/// Test-made nodes (no simulator) with Leases the test renews every 500 ms while they are alive.
struct Heartbeats {
    alive: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Heartbeats {
    fn stop(&self, names: &[&str]) {
        let mut alive = self.alive.lock();
        for n in names {
            alive.remove(*n);
        }
    }
}

/// Creates Ready nodes `names` in `zone` with their Leases.
async fn make_nodes(client: &kube::Client, zone: &str, names: &[String]) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASES);
    let now = Timestamp::now().to_string();
    for name in names {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        let status = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
        ]}});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                     "renewTime": MicroTime(Timestamp::now())},
        }))
        .unwrap();
        leases.create(&PostParams::default(), &lease).await.unwrap();
    }
}

fn heartbeat(client: &kube::Client, names: &[String]) -> Heartbeats {
    let alive = Arc::new(Mutex::new(names.iter().cloned().collect::<BTreeSet<_>>()));
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASES);
    let beating = Arc::clone(&alive);
    let task = tokio::spawn(async move {
        loop {
            let names: Vec<String> = beating.lock().iter().cloned().collect();
            for name in names {
                let patch = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
                let _ = leases
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    Heartbeats { alive, task }
}

/// Waits until every one of `names` is Unknown.
async fn all_unknown(nodes: &Api<Node>, names: &[&str]) {
    wait_for(CONVERGE, &format!("{names:?} to be Unknown"), || async {
        for n in names {
            let node = nodes.get(n).await.ok()?;
            if node_ready(&node).as_deref() != Some("Unknown") {
                return None;
            }
        }
        Some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zone_going_dark_is_tainted_at_its_rate_then_not_at_all_and_all_zones_dark_untaints() {
    let cluster = TestCluster::start().await;
    skip_unless_devcluster!(cluster, "the test must own every node of the cluster");
    let client = cluster.client();
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    // One taint per 2 s at the normal rate; zones of four are small (threshold 50): a partially
    // disrupted one gets none. One worker: two workers deciding within the cache's delay may each
    // add one taint (the burst the module doc bounds), which would blur the rate this test measures.
    let _procs: Vec<Proc> = vec![
        fleet.coordinator("c0", &[]),
        fleet.worker(
            "flotilla",
            "w0",
            &worker_args(&["--node-eviction-rate", "0.5"]),
        ),
    ];
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": LEASES}})).unwrap(),
        )
        .await;
    let suffix = random_suffix(5);
    let a: Vec<String> = (0..4).map(|i| format!("nl-a{i}-{suffix}")).collect();
    let b: Vec<String> = vec![format!("nl-b0-{suffix}")];
    make_nodes(&client, &format!("za-{suffix}"), &a).await;
    make_nodes(&client, &format!("zb-{suffix}"), &b).await;
    let beats = heartbeat(&client, &[a.clone(), b.clone()].concat());
    fleet.wait_for_workers(1, CONVERGE).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let name = |s: &String| s.clone();
    let (a0, a1, a2, a3, b0) = (
        name(&a[0]),
        name(&a[1]),
        name(&a[2]),
        name(&a[3]),
        name(&b[0]),
    );

    // Two of four dark: the zone is normal, tainted one node per 2 s.
    beats.stop(&[&a0, &a1]);
    all_unknown(&nodes, &[&a0, &a1]).await;
    let added = wait_for(CONVERGE, "both dark nodes tainted NoExecute", || async {
        let x = no_execute(&nodes.get(&a0).await.ok()?, UNREACHABLE)?;
        let y = no_execute(&nodes.get(&a1).await.ok()?, UNREACHABLE)?;
        Some((x, y))
    })
    .await;
    let apart = added.0.duration_until(added.1).unsigned_abs();
    assert!(
        apart >= Duration::from_secs(2),
        "two taints of a normal zone only {apart:?} apart at 0.5 nodes/s: {added:?}"
    );

    // A third: partially disrupted (3 of 4), a small zone — no more taints.
    beats.stop(&[&a2]);
    all_unknown(&nodes, &[&a2]).await;
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(4) {
        let node = nodes.get(&a2).await.unwrap();
        assert!(
            !lifecycle_no_execute(&node),
            "a partially disrupted small zone got a NoExecute taint: {:?}",
            taints(&node)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every zone dark: master disruption mode, the NoExecute taints go and none comes.
    beats.stop(&[&a3, &b0]);
    all_unknown(&nodes, &[&a3, &b0]).await;
    let every = [&a0, &a1, &a2, &a3, &b0];
    wait_for(CONVERGE, "every NoExecute taint to be removed", || async {
        for n in every {
            if lifecycle_no_execute(&nodes.get(n).await.ok()?) {
                return None;
            }
        }
        Some(())
    })
    .await;
    let calm = Instant::now();
    while calm.elapsed() < Duration::from_secs(2) {
        for n in every {
            let node = nodes.get(n).await.unwrap();
            assert!(
                !lifecycle_no_execute(&node),
                "{n} tainted in master disruption mode"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_worker_and_a_killed_leader_evict_nothing_early_and_nothing_twice() {
    let cluster = cluster(2).await;
    skip_unless_devcluster!(
        cluster,
        "a few seconds of grace would mark real nodes Unknown"
    );
    let client = cluster.client();
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let mut coordinators = vec![fleet.coordinator("c0", &[])];
    let mut w0 = fleet.worker("flotilla", "w0", &worker_args(&[]));
    fleet.wait_for_workers(1, CONVERGE).await;
    coordinators.push(fleet.coordinator("c1", &[]));
    let ns = cluster.namespace("nl-kill").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let nodes: Api<Node> = Api::all(client.clone());
    let dark = "sim-node-0";
    for p in [pod("at-once", dark, 0), pod("after-four", dark, 4)] {
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    wait_for(CONVERGE, "the pods to be ready", || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        (list.items.len() == 2
            && list
                .items
                .iter()
                .all(|p| ready_of(p).as_deref() == Some("True")))
        .then_some(())
    })
    .await;
    wait_for(CONVERGE, "w0 to have looked at the node", || async {
        events(&client, "default", dark)
            .await
            .iter()
            .any(|(reason, ..)| reason == "RegisteredNode")
            .then_some(())
    })
    .await;

    // The node goes dark and its observer dies a second later, before the grace period ran out.
    cluster.stop_node(dark);
    tokio::time::sleep(SECOND).await;
    w0.kill9().await;
    let killed = Instant::now();
    let _w1 = fleet.worker("flotilla", "w1", &worker_args(&[]));
    let unknown = wait_for(CONVERGE, "the dark node to be Unknown", || async {
        let node = nodes.get(dark).await.ok()?;
        (node_ready(&node).as_deref() == Some("Unknown")).then(|| killed.elapsed())
    })
    .await;
    assert!(
        unknown + SECOND >= GRACE,
        "the new observer marked the node Unknown {unknown:?} after the old one died: earlier than its own grace"
    );
    let at_once = deletion_seen(&pods, "at-once").await;
    assert!(at_once.duration_since(killed) + SECOND >= GRACE);

    // The leader dies while the tolerating pod waits out its four seconds.
    let leader = fleet.leader().await.expect("a leader").info.id;
    let index = if leader == "c0" { 0 } else { 1 };
    coordinators[index].kill9().await;
    let after_four = deletion_seen(&pods, "after-four").await;
    assert!(
        after_four.duration_since(killed) + SECOND >= GRACE + Duration::from_secs(4),
        "evicted {:?} after the observer died: before grace and toleration",
        after_four.duration_since(killed)
    );
    // Each pod was evicted once: one TaintManagerEviction, counted once.
    for name in ["at-once", "after-four"] {
        let evictions: Vec<Event> = Api::<Event>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("TaintManagerEviction"))
            .collect();
        assert_eq!(evictions.len(), 1, "{name}: {evictions:?}");
        assert_eq!(evictions[0].count, Some(1), "{name} evicted twice");
        assert_eq!(
            evictions[0].message.as_deref(),
            Some(format!("Marking for deletion Pod {ns}/{name}").as_str())
        );
    }
    let node = nodes.get(dark).await.unwrap();
    let unreachable: Vec<Value> = taints(&node)
        .iter()
        .filter(|(k, ..)| k == UNREACHABLE)
        .map(|(k, e, _)| json!([k, e]))
        .collect();
    assert_eq!(
        unreachable.len(),
        2,
        "one NoSchedule and one NoExecute: {unreachable:?}"
    );
}
