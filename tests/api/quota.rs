//! ResourceQuota on pod counts: a pod create that would exceed `spec.hard.pods` (or `count/pods`) is
//! refused with upstream's 403 `exceeded quota` Status (`plugin/pkg/admission/resourcequota`), terminal
//! and deleted pods free their slot, and concurrent creates never overshoot.
//!
//! On an external cluster the quota's status comes from kube-controller-manager's quota controller,
//! which these tests wait for (admission refuses pods until it is there); they only assert status
//! contents on devcluster. Where no quota controller runs, they skip themselves, printing why.

use std::time::Duration;

use serde_json::{Value, json};

use super::common::{SOON, create, get_ok, pod, pods, setup};
use crate::skip_unless_devcluster;
use crate::support::cluster::TestCluster;
use crate::support::raw;
use crate::support::wait::wait_for;

/// How long a quota's first status may take: the quota controller of a real cluster syncs on its own
/// schedule (devcluster writes it at once).
const QUOTA_STATUS: Duration = Duration::from_secs(60);

fn quotas(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/resourcequotas")
}

/// Creates quota `name` with `hard` and waits until its status reports those limits, the point from
/// which upstream's admission enforces it; returns the quota.
///
/// On an external cluster whose quota status never comes within [`QUOTA_STATUS`] — no resourcequota
/// controller runs there (a kube-controller-manager without it, or none at all) — prints that the test
/// is skipped and why, and returns `None`: the caller must return at once. On devcluster, which writes
/// the status itself, a missing status fails the test.
async fn quota(client: &kube::Client, ns: &str, name: &str, hard: Value) -> Option<Value> {
    let body = json!({
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name},
        "spec": {"hard": hard},
    });
    create(client, &quotas(ns), &body).await;
    let path = format!("{}/{name}", quotas(ns));
    let reported = tokio::time::timeout(QUOTA_STATUS, async {
        loop {
            let got = get_ok(client, &path).await;
            if got["status"]["hard"] == hard && got["status"]["used"].is_object() {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    match reported {
        Ok(got) => Some(got),
        Err(_) if crate::support::cluster::is_external() => {
            eprintln!(
                "skipped: quota {ns}/{name} got no status within {QUOTA_STATUS:?}: the cluster {} names \
                 runs no resourcequota controller, which this test needs (admission enforces a quota \
                 only once that controller has written its status)",
                crate::support::cluster::KUBECONFIG_ENV
            );
            None
        }
        Err(_) => panic!(
            "timed out after {QUOTA_STATUS:?} waiting for quota {name} to report status.hard (devcluster writes it on create)"
        ),
    }
}

/// Creates `pod`, retrying while a quota still refuses it: a freed slot reaches a real cluster's
/// admission only after its quota controller recomputed the usage.
async fn create_once_room(client: &kube::Client, ns: &str, body: &Value) -> Value {
    wait_for(SOON, "a pod create to be admitted", || async {
        let reply = raw::post(client, &pods(ns), body).await;
        match reply.status {
            201 => Some(reply.json()),
            403 => None,
            other => panic!("unexpected {other} creating a pod: {}", reply.text),
        }
    })
    .await
}

#[tokio::test]
async fn a_pod_beyond_the_quota_is_forbidden_until_a_pod_goes_away() {
    let (_cluster, client, ns) = setup("quota").await;
    let Some(_) = quota(&client, &ns, "pod-limit", json!({"pods": "2"})).await else {
        return;
    };
    create(&client, &pods(&ns), &pod("p1")).await;
    create(&client, &pods(&ns), &pod("p2")).await;

    let status = raw::post(&client, &pods(&ns), &pod("p3"))
        .await
        .expect_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        "pods \"p3\" is forbidden: exceeded quota: pod-limit, requested: pods=1, used: pods=2, limited: pods=2"
    );
    assert_eq!(status["details"]["name"], "p3");
    assert_eq!(status["details"]["kind"], "pods");
    assert!(
        status["details"].get("group").is_none(),
        "core has no group: {status}"
    );
    let listed = get_ok(&client, &pods(&ns)).await;
    assert_eq!(
        super::common::names(&listed),
        ["p1", "p2"],
        "the refused pod was stored"
    );

    // An unbound pod goes at once, and with it its charge.
    raw::delete(&client, &format!("{}/p1", pods(&ns)), None)
        .await
        .expect_ok(200);
    create_once_room(&client, &ns, &pod("p3")).await;
}

#[tokio::test]
async fn a_generated_name_is_the_one_the_refusal_names() {
    let (_cluster, client, ns) = setup("quota-gen").await;
    let Some(_) = quota(&client, &ns, "none", json!({"pods": "0"})).await else {
        return;
    };
    let mut body = pod("");
    body["metadata"] = json!({"generateName": "gen-"});
    let status = raw::post(&client, &pods(&ns), &body)
        .await
        .expect_status(403, "Forbidden");
    let name = status["details"]["name"].as_str().unwrap_or_default();
    assert!(
        name.starts_with("gen-") && name.len() == "gen-".len() + 5,
        "details.name is not a generated name: {status}"
    );
    assert_eq!(
        status["message"],
        format!(
            "pods \"{name}\" is forbidden: exceeded quota: none, requested: pods=1, used: pods=0, limited: pods=0"
        )
    );
}

#[tokio::test]
async fn count_pods_is_enforced_too_and_the_message_lists_every_exceeded_resource_sorted() {
    let (_cluster, client, ns) = setup("quota-count").await;
    let Some(_) = quota(
        &client,
        &ns,
        "both",
        json!({"pods": "1", "count/pods": "1"}),
    )
    .await
    else {
        return;
    };
    create(&client, &pods(&ns), &pod("first")).await;
    let status = raw::post(&client, &pods(&ns), &pod("second"))
        .await
        .expect_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        "pods \"second\" is forbidden: exceeded quota: both, requested: count/pods=1,pods=1, used: count/pods=1,pods=1, limited: count/pods=1,pods=1"
    );
}

#[tokio::test]
async fn a_terminal_pod_no_longer_counts() {
    let (_cluster, client, ns) = setup("quota-terminal").await;
    let Some(_) = quota(&client, &ns, "one", json!({"count/pods": "1"})).await else {
        return;
    };
    create(&client, &pods(&ns), &pod("done")).await;
    raw::post(&client, &pods(&ns), &pod("next"))
        .await
        .expect_status(403, "Forbidden");
    raw::patch(
        &client,
        &format!("{}/done/status", pods(&ns)),
        "application/merge-patch+json",
        &json!({"status": {"phase": "Succeeded"}}),
    )
    .await
    .expect_ok(200);
    create_once_room(&client, &ns, &pod("next")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_creates_never_exceed_the_quota() {
    let (_cluster, client, ns) = setup("quota-race").await;
    let Some(_) = quota(&client, &ns, "five", json!({"pods": "5"})).await else {
        return;
    };
    let creates = (0..20).map(|i| {
        let client = client.clone();
        let path = pods(&ns);
        async move { raw::post(&client, &path, &pod(&format!("racer-{i}"))).await }
    });
    let replies = futures::future::join_all(creates).await;
    let created = replies.iter().filter(|r| r.status == 201).count();
    for reply in replies.iter().filter(|r| r.status != 201) {
        reply.expect_status(403, "Forbidden");
    }
    assert_eq!(created, 5, "admitted pods under a quota of 5");
    let listed = get_ok(&client, &pods(&ns)).await;
    assert_eq!(super::common::names(&listed).len(), 5);
}

#[tokio::test]
async fn the_status_mirrors_hard_and_counts_used_pods() {
    let cluster = TestCluster::start().await;
    skip_unless_devcluster!(
        cluster,
        "a real cluster's quota status is its quota controller's, written on its own schedule"
    );
    let client = cluster.client();
    let ns = crate::support::namespace::unique_namespace(&client, "quota-status").await;
    let Some(created) = quota(&client, &ns, "usage", json!({"pods": "4", "cpu": "2"})).await else {
        return;
    };
    assert_eq!(created["status"]["used"], json!({"pods": "0"}));
    let path = format!("{}/usage", quotas(&ns));
    let used = |n: &'static str| {
        let client = client.clone();
        let path = path.clone();
        async move {
            wait_for(SOON, &format!("status.used.pods to be {n}"), || async {
                let got = get_ok(&client, &path).await;
                (got["status"]["used"]["pods"] == n).then_some(got)
            })
            .await
        }
    };
    create(&client, &pods(&ns), &pod("a")).await;
    create(&client, &pods(&ns), &pod("b")).await;
    let got = used("2").await;
    assert_eq!(got["status"]["hard"], json!({"pods": "4", "cpu": "2"}));
    raw::delete(&client, &format!("{}/a", pods(&ns)), None)
        .await
        .expect_ok(200);
    used("1").await;

    // Raising the limit is reflected in status.hard; a status sent with a create is dropped.
    raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"spec": {"hard": {"pods": "10"}}}),
    )
    .await
    .expect_ok(200);
    wait_for(SOON, "status.hard.pods to follow the spec", || async {
        let got = get_ok(&client, &path).await;
        (got["status"]["hard"]["pods"] == "10").then_some(())
    })
    .await;
    let with_status = json!({
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "preset"},
        "spec": {"hard": {"configmaps": "1"}},
        "status": {"used": {"configmaps": "7"}},
    });
    let stored = create(&client, &quotas(&ns), &with_status).await;
    assert!(
        stored.get("status").is_none_or(|s| s.get("used").is_none()),
        "a create kept the client's status: {stored}"
    );
}
