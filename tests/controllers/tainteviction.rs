//! The `taint-eviction` controller: a simulated node is tainted `NoExecute` through the API (no
//! node-lifecycle controller runs). A pod that does not tolerate the taint is deleted at once, with
//! kube-controller-manager's `DisruptionTarget` condition and `TaintManagerEviction` Event; one
//! tolerating it for 3 s goes no sooner than 3 s after the taint's `timeAdded`; one tolerating it
//! forever stays; and one tolerating it for 10 s stays when the taint goes before its time, with the
//! "Cancelling deletion" Event.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::{random_suffix, unique_namespace};
use crate::support::wait::wait_for;

/// How long an eviction due now may take to show (the fleet's dispatch and the cache's delay).
const PROMPT: Duration = Duration::from_secs(10);

/// A pod bound to `node` with `tolerations`.
fn pod(name: &str, node: &str, tolerations: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "tolerations": tolerations,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }))
    .unwrap()
}

/// Tolerating `key` (`NoExecute`) for `seconds`, or forever.
fn tolerating(key: &str, seconds: Option<i64>) -> Value {
    json!([{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}])
}

/// Whether the pod is gone or being deleted.
async fn evicted(pods: &Api<Pod>, name: &str) -> Option<Option<Pod>> {
    match pods.get_opt(name).await.ok()? {
        None => Some(None),
        Some(pod) if pod.metadata.deletion_timestamp.is_some() => Some(Some(pod)),
        Some(_) => None,
    }
}

/// The pod's `DisruptionTarget` condition as (reason, message).
fn disruption(pod: &Pod) -> Option<(String, String)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// Waits for the taint-eviction Event about pod `name` saying `message`.
async fn event(events: &Api<Event>, name: &str, message: &str) -> Event {
    wait_for(PROMPT, &format!("the Event {message:?}"), || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.involved_object.name.as_deref() == Some(name)
                    && e.reason.as_deref() == Some("TaintManagerEviction")
                    && e.message.as_deref() == Some(message)
            })
    })
    .await
}

/// Sets the node's taints to `taints` (a merge patch replaces the list: nothing else here writes
/// the simulated node's taints).
async fn set_taints(nodes: &Api<Node>, node: &str, taints: Value) {
    let patch = json!({"spec": {"taints": taints}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_leave_a_node_tainted_no_execute_at_once_after_their_toleration_or_never() {
    let cluster = TestCluster::builder().with_nodes(1).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "taint-eviction", 1).await;
    let ns = unique_namespace(&client, "taints").await;
    let node = cluster.node_names().remove(0);
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let key = format!("flotilla.dev/test-{}", random_suffix(6));

    for (name, tolerations) in [
        ("untolerating", json!([])),
        ("three-seconds", tolerating(&key, Some(3))),
        ("ten-seconds", tolerating(&key, Some(10))),
        ("forever", tolerating(&key, None)),
    ] {
        pods.create(&PostParams::default(), &pod(name, &node, tolerations))
            .await
            .unwrap();
    }

    // `timeAdded` has whole seconds: the deadlines count from the second as written.
    let added = Timestamp::from_second(Timestamp::now().as_second()).unwrap();
    let added_at = SystemTime::UNIX_EPOCH + Duration::from_secs(added.as_second() as u64);
    set_taints(
        &nodes,
        &node,
        json!([{"key": key, "effect": "NoExecute", "timeAdded": Time(added)}]),
    )
    .await;

    let gone = wait_for(PROMPT, "the untolerating pod to be evicted", || {
        evicted(&pods, "untolerating")
    })
    .await;
    if let Some(pod) = gone {
        assert_eq!(
            disruption(&pod),
            Some((
                "DeletionByTaintManager".to_owned(),
                "Taint manager: deleting due to NoExecute taint".to_owned()
            ))
        );
    }
    let marked = event(
        &events,
        "untolerating",
        &format!("Marking for deletion Pod {ns}/untolerating"),
    )
    .await;
    assert_eq!(marked.type_.as_deref(), Some("Normal"));
    assert_eq!(
        marked.source.and_then(|s| s.component).as_deref(),
        Some("taint-eviction-controller")
    );

    wait_for(PROMPT, "the pod tolerating 3 s to be evicted", || {
        evicted(&pods, "three-seconds")
    })
    .await;
    let after = SystemTime::now()
        .duration_since(added_at)
        .unwrap_or_default();
    assert!(
        after >= Duration::from_secs(3),
        "evicted {after:?} after the taint, before its 3 s"
    );

    for name in ["ten-seconds", "forever"] {
        let pod = pods.get(name).await.unwrap();
        assert!(
            pod.metadata.deletion_timestamp.is_none(),
            "{name} is still tolerated"
        );
    }

    // The taint goes before the 10 s are up: that pod stays, and so does the one tolerating forever.
    set_taints(&nodes, &node, Value::Null).await;
    assert!(
        SystemTime::now()
            .duration_since(added_at)
            .unwrap_or_default()
            < Duration::from_secs(10),
        "the taint went too late to show a cancelled eviction"
    );
    event(
        &events,
        "ten-seconds",
        &format!("Cancelling deletion of Pod {ns}/ten-seconds"),
    )
    .await;
    // Absence can only be shown by waiting: past the cancelled deadline, with a margin.
    let deadline = added_at + Duration::from_secs(10) + Duration::from_millis(1500);
    if let Ok(left) = deadline.duration_since(SystemTime::now()) {
        tokio::time::sleep(left).await;
    }
    for name in ["ten-seconds", "forever"] {
        let pod = pods.get(name).await.unwrap();
        assert!(
            pod.metadata.deletion_timestamp.is_none() && disruption(&pod).is_none(),
            "{name} stays"
        );
    }
}
