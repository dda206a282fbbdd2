//! The `daemonset` controller on four simulated nodes and a node of the test's own, against what
//! kube-controller-manager v1.32 writes (`kube-fixtures/kcm-v1.32/daemonset/`): one pod per node the DaemonSet may run on (none on
//! the node tainted `NoSchedule`), each pinned to its node by a required node affinity on
//! `metadata.name` and labelled with the revision hash and template generation; a node added gets a
//! pod, and when it goes before the pod was bound the controller deletes that pod itself (a bound pod
//! of a deleted node is the pod GC's, as upstream); a RollingUpdate of maxSurge 1 and maxUnavailable 0
//! never runs more than one extra pod nor leaves a node without a ready one, on every pod event; a
//! failed daemon pod is replaced, and a replacement that fails at once only after the back-off; the
//! status, revisions and Events have KCM's shape.
//!
//! The pods are pinned by affinity and left to a scheduler, as upstream's; the test binds them to the
//! node their affinity names itself (their `schedulerName` is the test's), so that it decides when a
//! pod is bound: a node added and removed before its pod is bound. The simulated kubelets then run
//! them. The DaemonSet selects nodes by a label of the test's own, so on a shared cluster
//! (`FLOTILLA_TEST_KUBECONFIG`) it runs beside other tests and the cluster's own nodes untouched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::raw;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(60);
/// The scheduler the test stands in for (see the module doc).
const SCHEDULER: &str = "flotilla-test-daemon-binder";
const HASH_LABEL: &str = "controller-revision-hash";
const GENERATION_LABEL: &str = "pod-template-generation";

/// A DaemonSet `agent` of `image` on the nodes labelled `node_label=yes`.
fn daemon_set(image: &str, node_label: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "nodeSelector": {node_label: "yes"},
                    "containers": [{"name": "agent", "image": image}],
                },
            },
        },
    })
}

/// The node a pod's required affinity pins it to.
fn pinned_node(pod: &Pod) -> Option<String> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    match terms.as_slice() {
        [term] => match term.match_fields.as_deref()? {
            [field] if field.key == "metadata.name" && field.operator == "In" => {
                field.values.as_ref()?.first().cloned()
            }
            _ => None,
        },
        _ => None,
    }
}

fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn is_live(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Binds the namespace's pending pods of [`SCHEDULER`] to the node their affinity names, when it is
/// one of `nodes`; pods for other nodes stay pending.
fn bind_pods(
    client: kube::Client,
    ns: String,
    nodes: BTreeSet<String>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        loop {
            let Ok(stream) = pods.watch(&WatchParams::default(), "0").await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(event)) = stream.next().await {
                let (WatchEvent::Added(pod) | WatchEvent::Modified(pod)) = event else {
                    continue;
                };
                let ours =
                    pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(SCHEDULER);
                let Some(node) = pinned_node(&pod).filter(|n| nodes.contains(n)) else {
                    continue;
                };
                if !ours || bound_node(&pod).is_some() || pod.metadata.deletion_timestamp.is_some()
                {
                    continue;
                }
                let name = pod.name_any();
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": ns},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                });
                // A repeated event may bind twice; the second fails harmlessly.
                let _ = raw::post(
                    &client,
                    &format!("/api/v1/namespaces/{ns}/pods/{name}/binding"),
                    &binding,
                )
                .await;
            }
        }
    })
}

/// What the pod watch saw during a rollout: the most live pods at once, the most nodes with two
/// live pods at once, and every moment a node of `nodes` had no ready live pod.
#[derive(Debug, Default)]
struct RolloutWatch {
    max_live: usize,
    max_doubled_nodes: usize,
    unavailable_moments: Vec<String>,
    events: usize,
}

/// Checks the surge and availability bounds on every pod event of `ns` from now on.
fn watch_rollout(
    pods: Api<Pod>,
    nodes: BTreeSet<String>,
    start: Vec<Pod>,
) -> (Arc<Mutex<RolloutWatch>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(RolloutWatch::default()));
    let sink = seen.clone();
    let task = tokio::spawn(async move {
        let mut state: BTreeMap<String, Pod> =
            start.into_iter().map(|p| (p.name_any(), p)).collect();
        let version = pods
            .list(&ListParams::default())
            .await
            .ok()
            .and_then(|l| l.metadata.resource_version)
            .unwrap_or_else(|| "0".into());
        let Ok(stream) = pods.watch(&WatchParams::default(), &version).await else {
            return;
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(event)) = stream.next().await {
            match event {
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                    state.insert(pod.name_any(), pod);
                }
                WatchEvent::Deleted(pod) => {
                    state.remove(&pod.name_any());
                }
                _ => continue,
            }
            let live: Vec<&Pod> = state.values().filter(|p| is_live(p)).collect();
            let mut per_node: BTreeMap<String, (usize, bool)> = BTreeMap::new();
            for pod in &live {
                if let Some(node) = pinned_node(pod) {
                    let entry = per_node.entry(node).or_default();
                    entry.0 += 1;
                    entry.1 |= is_ready(pod);
                }
            }
            let mut seen = sink.lock();
            seen.events += 1;
            seen.max_live = seen.max_live.max(live.len());
            let doubled = per_node.values().filter(|(n, _)| *n > 1).count();
            seen.max_doubled_nodes = seen.max_doubled_nodes.max(doubled);
            for node in &nodes {
                if !per_node.get(node).is_some_and(|(_, ready)| *ready) {
                    let names: Vec<String> = live.iter().map(|p| p.name_any()).collect();
                    seen.unavailable_moments
                        .push(format!("{node} without a ready pod among {names:?}"));
                }
            }
        }
    });
    (seen, task)
}

async fn status(client: &kube::Client, ns: &str) -> Value {
    raw::get(
        client,
        &format!("/apis/apps/v1/namespaces/{ns}/daemonsets/agent"),
    )
    .await
    .expect_ok(200)["status"]
        .clone()
}

/// Waits until the DaemonSet's status is exactly `want` (KCM's shape: zero counts Go omits absent).
///
/// # Panics
/// After [`CONVERGE`], showing the last status seen.
async fn wait_status(client: &kube::Client, ns: &str, want: Value, what: &str) {
    let deadline = tokio::time::Instant::now() + CONVERGE;
    loop {
        let got = status(client, ns).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: status {got:#} is not {want:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a Node `name` (no kubelet runs it) labelled `label=yes`. Admission taints a new node
/// not-ready (NoSchedule), which daemon pods do not tolerate; the node lifecycle controller lifts it
/// once the node is Ready, as the test does here.
async fn create_node(nodes: &Api<Node>, name: &str, label: &str) {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, label: "yes"}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let ready = json!({"spec": {"taints": null}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();
}

/// The DaemonSet's live pods.
async fn live_pods(pods: &Api<Pod>) -> Vec<Pod> {
    let list = pods
        .list(&ListParams::default().labels("app=agent"))
        .await
        .unwrap();
    list.items.into_iter().filter(is_live).collect()
}

#[tokio::test]
async fn a_daemonset_follows_nodes_and_rolls_out_within_its_surge() {
    let cluster = TestCluster::builder().with_nodes(4).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "daemonset", 2).await;
    let ns = cluster.namespace("ds").await;
    let eligible: BTreeSet<String> = cluster.node_names().into_iter().collect();
    assert_eq!(eligible.len(), 4);

    // The DaemonSet runs on the nodes carrying this test's own label, so that on a shared cluster
    // it touches no other node and no other test's DaemonSet sees this test's nodes: the four
    // simulated nodes, and a node of the test's own tainted dedicated=x:NoSchedule, as node-c of the
    // fixtures (no kubelet runs it; no pod must go there).
    let node_label = format!("flotilla.dev/ds-{}", cluster.scope());
    let nodes: Api<Node> = Api::all(client.clone());
    let labelled = json!({"metadata": {"labels": {&node_label: "yes"}}});
    for node in &eligible {
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&labelled))
            .await
            .unwrap();
    }
    let tainted = format!("ds-tainted-{}", crate::support::namespace::random_suffix(5));
    create_node(&nodes, &tainted, &node_label).await;
    let taint =
        json!({"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}});
    nodes
        .patch(&tainted, &PatchParams::default(), &Patch::Merge(&taint))
        .await
        .unwrap();
    let binder = bind_pods(client.clone(), ns.clone(), eligible.clone());

    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), &ns);
    let ds = daemon_sets
        .create(
            &PostParams::default(),
            &serde_json::from_value(daemon_set("registry.k8s.io/pause:3.9", &node_label)).unwrap(),
        )
        .await
        .unwrap();
    let ds_uid = ds.uid().unwrap();

    // Four pods, one per untainted node, all ready: KCM's status after its pods became ready.
    wait_status(
        &client,
        &ns,
        json!({"currentNumberScheduled": 4, "numberMisscheduled": 0, "desiredNumberScheduled": 4,
               "numberReady": 4, "observedGeneration": 1, "updatedNumberScheduled": 4, "numberAvailable": 4}),
        "the DaemonSet's 4 pods to be ready",
    )
    .await;
    let first = live_pods(&pods).await;
    let placed: BTreeSet<String> = first.iter().filter_map(pinned_node).collect();
    assert_eq!(
        placed, eligible,
        "one pod per untainted node, none on {tainted}"
    );
    assert_eq!(first.len(), 4);
    let revision_list = revisions.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(revision_list.len(), 1);
    let revision = &revision_list[0];
    assert_eq!(revision.revision, 1);
    let hash = revision.labels()[HASH_LABEL].clone();
    assert_eq!(revision.name_any(), format!("agent-{hash}"));
    assert_eq!(revision.labels()["app"], "agent");
    assert_eq!(
        revision.data.as_ref().unwrap().0["spec"]["template"]["$patch"],
        "replace"
    );
    for pod in &first {
        assert_eq!(pod.labels()[HASH_LABEL], hash);
        assert_eq!(pod.labels()[GENERATION_LABEL], "1");
        assert!(pod.metadata.generate_name.as_deref() == Some("agent-"));
        let owner = &pod.owner_references()[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller),
            (ds_uid.as_str(), Some(true))
        );
        let tolerations = pod.spec.as_ref().unwrap().tolerations.as_ref().unwrap();
        let keys: Vec<&str> = tolerations
            .iter()
            .filter_map(|t| t.key.as_deref())
            .collect();
        assert_eq!(
            keys,
            [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
                "node.kubernetes.io/disk-pressure",
                "node.kubernetes.io/memory-pressure",
                "node.kubernetes.io/pid-pressure",
                "node.kubernetes.io/unschedulable"
            ]
        );
    }

    // A node added gets a pod, pinned and pending (nobody binds it); the node removed before its pod
    // was bound takes that pod with it (upstream's getUnscheduledPodsWithoutNode).
    let extra = format!("ds-extra-{}", crate::support::namespace::random_suffix(5));
    create_node(&nodes, &extra, &node_label).await;
    let pending = wait_for(CONVERGE, "a pod for the added node", || async {
        live_pods(&pods)
            .await
            .into_iter()
            .find(|p| pinned_node(p).as_deref() == Some(extra.as_str()))
    })
    .await;
    wait_status(
        &client,
        &ns,
        json!({"currentNumberScheduled": 5, "numberMisscheduled": 0, "desiredNumberScheduled": 5,
               "numberReady": 4, "observedGeneration": 1, "updatedNumberScheduled": 5, "numberAvailable": 4,
               "numberUnavailable": 1}),
        "the status to count the added node",
    )
    .await;
    nodes.delete(&extra, &Default::default()).await.unwrap();
    wait_for(
        CONVERGE,
        "the removed node's pending pod to be deleted",
        || async {
            match pods.get_opt(&pending.name_any()).await.unwrap() {
                None => Some(()),
                Some(p) if p.metadata.deletion_timestamp.is_some() => Some(()),
                Some(_) => None,
            }
        },
    )
    .await;
    wait_status(
        &client,
        &ns,
        json!({"currentNumberScheduled": 4, "numberMisscheduled": 0, "desiredNumberScheduled": 4,
               "numberReady": 4, "observedGeneration": 1, "updatedNumberScheduled": 4, "numberAvailable": 4}),
        "the status to drop the removed node",
    )
    .await;

    // The rolling update: a new image; at most one node runs two pods at any pod event, and every
    // untainted node keeps a ready pod.
    let (watched, watcher) = watch_rollout(pods.clone(), eligible.clone(), live_pods(&pods).await);
    // The server bumps the template-generation annotation with the template (checked below through
    // the new pods' `pod-template-generation`).
    let image = json!({
        "spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}]}}},
    });
    daemon_sets
        .patch("agent", &PatchParams::default(), &Patch::Merge(&image))
        .await
        .unwrap();
    wait_status(
        &client,
        &ns,
        json!({"currentNumberScheduled": 4, "numberMisscheduled": 0, "desiredNumberScheduled": 4,
               "numberReady": 4, "observedGeneration": 2, "updatedNumberScheduled": 4, "numberAvailable": 4}),
        "the rollout to finish",
    )
    .await;
    let revision_list = revisions.list(&ListParams::default()).await.unwrap().items;
    let current = revision_list
        .iter()
        .find(|r| r.revision == 2)
        .unwrap_or_else(|| panic!("no revision 2 among {revision_list:#?}"));
    assert_eq!(revision_list.len(), 2, "revision 1 kept");
    let new_hash = current.labels()[HASH_LABEL].clone();
    assert_ne!(new_hash, hash);
    wait_for(CONVERGE, "only the 4 new pods to remain", || async {
        let live = live_pods(&pods).await;
        (live.len() == 4
            && live
                .iter()
                .all(|p| p.labels()[HASH_LABEL] == new_hash && p.labels()[GENERATION_LABEL] == "2"))
        .then_some(())
    })
    .await;
    watcher.abort();
    let watched = std::mem::take(&mut *watched.lock());
    assert!(watched.events > 0);
    assert!(
        watched.max_live <= 5 && watched.max_doubled_nodes <= 1,
        "maxSurge 1 exceeded: {watched:?}"
    );
    assert_eq!(
        watched.max_doubled_nodes, 1,
        "the rollout surged: {watched:?}"
    );
    assert!(
        watched.unavailable_moments.is_empty(),
        "maxUnavailable 0 violated: {watched:?}"
    );

    // Events as KCM's: SuccessfulCreate and SuccessfulDelete from daemonset-controller.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let of = |list: &[Event], reason: &str| {
        list.iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| {
                e.source.as_ref().and_then(|s| s.component.as_deref())
                    == Some("daemonset-controller")
            })
            .filter(|e| e.involved_object.kind.as_deref() == Some("DaemonSet"))
            .count()
    };
    // 4 + the added node's + 4 replacements created; the pending pod and the 4 old ones deleted.
    let list = wait_for(
        CONVERGE,
        "9 SuccessfulCreate and 5 SuccessfulDelete Events",
        || async {
            let list = events.list(&ListParams::default()).await.ok()?.items;
            (of(&list, "SuccessfulCreate") == 9 && of(&list, "SuccessfulDelete") == 5)
                .then_some(list)
        },
    )
    .await;
    assert!(
        list.iter().all(|e| e.type_.as_deref() == Some("Normal")),
        "{list:#?}"
    );

    // A daemon pod that fails (as when a kubelet rejects it) is deleted and replaced; when the
    // replacement fails at once, its deletion waits out the back-off (1 s) instead of looping.
    let node = eligible.iter().next().unwrap().clone();
    let on_node = |node: String| {
        let pods = pods.clone();
        async move {
            live_pods(&pods)
                .await
                .into_iter()
                .find(|p| pinned_node(p).as_deref() == Some(node.as_str()) && is_ready(p))
        }
    };
    let fail = |name: String| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let failed = json!({"status": {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False"}]}});
            raw::patch(
                &client,
                &format!("/api/v1/namespaces/{ns}/pods/{name}/status"),
                "application/merge-patch+json",
                &failed,
            )
            .await
            .expect_ok(200);
        }
    };
    let victim = on_node(node.clone()).await.unwrap().name_any();
    // The back-off runs from the first failure's handling, which follows this moment.
    let failed_first = tokio::time::Instant::now();
    fail(victim.clone()).await;
    let replacement = wait_for(CONVERGE, "the failed pod to be replaced", || async {
        on_node(node.clone())
            .await
            .filter(|p| p.name_any() != victim)
    })
    .await
    .name_any();
    fail(replacement.clone()).await;
    // (With surge, a new pod joins the node at once; the failed one waits for its deletion.)
    wait_for(CONVERGE, "the failed replacement to be deleted", || async {
        match pods.get_opt(&replacement).await.ok()? {
            None => Some(()),
            Some(p) if p.metadata.deletion_timestamp.is_some() => Some(()),
            Some(_) => None,
        }
    })
    .await;
    assert!(
        failed_first.elapsed() >= Duration::from_secs(1),
        "the second failed pod was deleted {:?} after the first failed, within the 1 s back-off",
        failed_first.elapsed()
    );
    binder.abort();
    nodes.delete(&tainted, &Default::default()).await.unwrap();
    let unlabelled = json!({"metadata": {"labels": {&node_label: null}}});
    for node in &eligible {
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&unlabelled))
            .await
            .unwrap();
    }
    let warnings = wait_for(CONVERGE, "2 FailedDaemonPod Events", || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        let warnings: Vec<Event> = list
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("FailedDaemonPod"))
            .collect();
        (warnings.len() == 2).then_some(warnings)
    })
    .await;
    let first = warnings
        .iter()
        .find(|e| e.message.as_deref().is_some_and(|m| m.contains(&victim)))
        .unwrap_or_else(|| panic!("no FailedDaemonPod Event of {victim}: {warnings:#?}"));
    assert_eq!(first.type_.as_deref(), Some("Warning"));
    assert_eq!(
        first.message.as_deref(),
        Some(
            format!("Found failed daemon pod {ns}/{victim} on node {node}, will try to kill it")
                .as_str()
        )
    );
}
