//! The `pods/eviction` subresource (fixtures `kcm-v1.32/disruption/08`–`12`): an eviction no budget
//! covers deletes the pod; one a budget allows takes a disruption from it (recorded in
//! `status.disruptedPods`) and marks the pod `DisruptionTarget`; one it does not allow is refused
//! with upstream's 429; Pending pods, and unready ones while the budget is healthy (or under
//! `AlwaysAllow`), go without consuming the budget; a budget whose status is behind its spec asks
//! to retry in 10 s; two budgets are a 500; dry runs write nothing; RBAC authorizes `create` of
//! `pods/eviction`.
//!
//! No controller runs here, so the tests write the budgets' status themselves, with the values
//! kube-controller-manager's disruption controller computes for the same pods (on a real cluster it
//! writes the same). Pods are bound to a node that does not exist and their status is set by the
//! test (the kubelet's part), so nothing else changes them. Refused evictions are sent by a client
//! that does not retry 429s.

use serde_json::{Value, json};

use super::common::{SOON, create, get_ok, pods, rv, setup};
use crate::support::cluster::TestCluster;
use crate::support::namespace::unique_namespace;
use crate::support::raw;
use crate::support::tokens::{client_with_token, service_account_token};
use crate::support::wait::wait_for;
use crate::support::watch::RawWatch;

/// A node no kubelet runs: binding pods to it makes their deletion graceful and keeps them put.
const NOWHERE: &str = "eviction-test-node";

fn budgets(ns: &str) -> String {
    format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets")
}

fn eviction_path(ns: &str, pod: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction")
}

fn eviction(ns: &str, pod: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}})
}

/// A pod `name` labelled `app`, bound to [`NOWHERE`]; Running and Ready when `running`.
async fn pod(client: &kube::Client, ns: &str, name: &str, app: &str, running: bool) -> Value {
    let body = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": NOWHERE, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    });
    let created = create(client, &pods(ns), &body).await;
    if !running {
        return created;
    }
    let status = json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}});
    raw::patch(
        client,
        &format!("{}/{name}/status", pods(ns)),
        "application/merge-patch+json",
        &status,
    )
    .await
    .expect_ok(200)
}

/// A PDB `name` with `minAvailable` over `app`.
async fn budget(client: &kube::Client, ns: &str, name: &str, app: &str, min_available: i64) {
    let body = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    });
    create(client, &budgets(ns), &body).await;
}

/// Writes the counts of a budget's status through `/status`, as the disruption controller would.
async fn counts(
    client: &kube::Client,
    ns: &str,
    name: &str,
    healthy: i64,
    desired: i64,
    expected: i64,
) -> Value {
    let allowed = (healthy - desired).max(0);
    let status = json!({"status": {
        "observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": healthy,
        "desiredHealthy": desired, "expectedPods": expected, "disruptedPods": null,
    }});
    raw::patch(
        client,
        &format!("{}/{name}/status", budgets(ns)),
        "application/merge-patch+json",
        &status,
    )
    .await
    .expect_ok(200)
}

/// A client that answers a 429 at once: kube's clients retry 429s by default (15 times, backing
/// off), as they should for throttling, but a refused eviction is the answer under test.
async fn without_retries(cluster: &TestCluster) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(cluster.kubeconfig_path()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[tokio::test]
async fn a_pod_no_budget_covers_is_evicted_with_201_and_marked_as_a_disruption_target() {
    // Fixtures kcm-v1.32/disruption/08 (the 201 body) and 10 (the evicted pod).
    let (_cluster, client, ns) = setup("evict-free").await;
    pod(&client, &ns, "lone", "lone", true).await;
    let reply = raw::post(&client, &eviction_path(&ns, "lone"), &eviction(&ns, "lone")).await;
    assert_eq!(reply.expect_ok(201), success());
    let evicted = get_ok(&client, &format!("{}/lone", pods(&ns))).await;
    assert!(
        evicted["metadata"]["deletionTimestamp"].is_string(),
        "a bound pod is deleted gracefully: {evicted}"
    );
    assert_eq!(evicted["metadata"]["deletionGracePeriodSeconds"], 30);
    let target = condition(&evicted, "DisruptionTarget").expect("DisruptionTarget condition");
    assert_eq!(target["status"], "True");
    assert_eq!(target["reason"], "EvictionByEvictionAPI");
    assert_eq!(target["message"], "Eviction API: evicting");
}

#[tokio::test]
async fn a_budget_gives_one_disruption_records_the_pod_and_refuses_the_next_with_upstreams_429() {
    // Fixtures kcm-v1.32/disruption/07 → 08 → 09 → 11.
    let (cluster, client, ns) = setup("evict-budget").await;
    let once = without_retries(&cluster).await;
    for name in ["web-kfgwr", "web-npj7j", "web-zj627"] {
        pod(&client, &ns, name, "web", true).await;
    }
    budget(&client, &ns, "web-pdb", "web", 2).await;
    let before = counts(&client, &ns, "web-pdb", 3, 2, 3).await;
    let mut watch = RawWatch::open(
        &client,
        &format!(
            "{}?watch=true&fieldSelector=metadata.name%3Dweb-pdb&resourceVersion={}",
            budgets(&ns),
            rv(&before)
        ),
    )
    .await;

    let reply = raw::post(
        &client,
        &eviction_path(&ns, "web-kfgwr"),
        &eviction(&ns, "web-kfgwr"),
    )
    .await;
    assert_eq!(reply.expect_ok(201), success());

    // The eviction's own write of the budget (manager kube-apiserver): one disruption taken, the
    // pod recorded with the time, the condition turned False.
    let recorded = loop {
        let event = watch.next(SOON, "the eviction's write of web-pdb").await;
        let object = event["object"].clone();
        if object["status"]["disruptedPods"]["web-kfgwr"].is_string() {
            break object;
        }
    };
    assert_eq!(recorded["status"]["disruptionsAllowed"], 0, "{recorded}");
    let allowed = condition(&recorded, "DisruptionAllowed").expect("DisruptionAllowed");
    assert_eq!(allowed["status"], "False");
    assert_eq!(allowed["reason"], "InsufficientPods");
    assert_eq!(allowed["message"], "");
    let pod = get_ok(&client, &format!("{}/web-kfgwr", pods(&ns))).await;
    assert!(pod["metadata"]["deletionTimestamp"].is_string(), "{pod}");

    // The disruption controller's recount (fixture 13): 2 healthy of 2 desired.
    counts(&client, &ns, "web-pdb", 2, 2, 3).await;
    let refused = raw::post(
        &once,
        &eviction_path(&ns, "web-npj7j"),
        &eviction(&ns, "web-npj7j"),
    )
    .await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert!(
        refused.headers.get("retry-after").is_none(),
        "no Retry-After for an exhausted budget"
    );
    assert_eq!(
        refused.json(),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests",
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}]},
            "code": 429,
        })
    );
    let untouched = get_ok(&client, &format!("{}/web-npj7j", pods(&ns))).await;
    assert!(untouched["metadata"].get("deletionTimestamp").is_none());
    assert!(condition(&untouched, "DisruptionTarget").is_none());
}

#[tokio::test]
async fn a_pending_pod_is_evicted_without_consuming_an_exhausted_budget() {
    let (cluster, client, ns) = setup("evict-pending").await;
    let once = without_retries(&cluster).await;
    pod(&client, &ns, "ready", "web", true).await;
    pod(&client, &ns, "waiting", "web", false).await;
    budget(&client, &ns, "web-pdb", "web", 1).await;
    counts(&client, &ns, "web-pdb", 1, 1, 2).await;
    let reply = raw::post(
        &client,
        &eviction_path(&ns, "waiting"),
        &eviction(&ns, "waiting"),
    )
    .await;
    assert_eq!(reply.expect_ok(201), success());
    let pdb = get_ok(&client, &format!("{}/web-pdb", budgets(&ns))).await;
    assert!(pdb["status"].get("disruptedPods").is_none(), "{pdb}");
    let refused = raw::post(&once, &eviction_path(&ns, "ready"), &eviction(&ns, "ready")).await;
    refused.expect_status(429, "TooManyRequests");
}

#[tokio::test]
async fn a_pod_under_two_budgets_is_refused_with_500() {
    let (_cluster, client, ns) = setup("evict-two").await;
    pod(&client, &ns, "shared", "web", true).await;
    budget(&client, &ns, "one", "web", 0).await;
    budget(&client, &ns, "two", "web", 0).await;
    let reply = raw::post(
        &client,
        &eviction_path(&ns, "shared"),
        &eviction(&ns, "shared"),
    )
    .await;
    assert_eq!(reply.status, 500, "{}", reply.text);
    let body = reply.json();
    assert_eq!(body["status"], "Failure");
    assert_eq!(
        body["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    let pod = get_ok(&client, &format!("{}/shared", pods(&ns))).await;
    assert!(pod["metadata"].get("deletionTimestamp").is_none());
}

#[tokio::test]
async fn a_dry_run_eviction_answers_201_and_changes_nothing() {
    let (_cluster, client, ns) = setup("evict-dry").await;
    for name in ["a", "b"] {
        pod(&client, &ns, name, "web", true).await;
    }
    budget(&client, &ns, "web-pdb", "web", 1).await;
    let before = counts(&client, &ns, "web-pdb", 2, 1, 2).await;
    let path = format!("{}?dryRun=All", eviction_path(&ns, "a"));
    assert_eq!(
        raw::post(&client, &path, &eviction(&ns, "a"))
            .await
            .expect_ok(201),
        success()
    );
    let mut in_body = eviction(&ns, "a");
    in_body["deleteOptions"] = json!({"dryRun": ["All"]});
    let reply = raw::post(&client, &eviction_path(&ns, "a"), &in_body).await;
    assert_eq!(reply.expect_ok(201), success());
    let pod = get_ok(&client, &format!("{}/a", pods(&ns))).await;
    assert!(pod["metadata"].get("deletionTimestamp").is_none(), "{pod}");
    assert!(condition(&pod, "DisruptionTarget").is_none());
    let after = get_ok(&client, &format!("{}/web-pdb", budgets(&ns))).await;
    assert_eq!(after["status"]["disruptionsAllowed"], 1);
    assert!(after["status"].get("disruptedPods").is_none());
    assert_eq!(rv(&after), rv(&before), "a dry run writes nothing");
}

#[tokio::test]
async fn an_eviction_naming_another_pod_is_a_bad_request_and_the_subresource_is_discoverable() {
    let (_cluster, client, ns) = setup("evict-misc").await;
    pod(&client, &ns, "p", "p", true).await;
    let reply = raw::post(&client, &eviction_path(&ns, "p"), &eviction(&ns, "q")).await;
    let status = reply.expect_status(400, "BadRequest");
    assert_eq!(
        status["message"],
        "name in URL does not match name in Eviction object"
    );
    let list = get_ok(&client, "/api/v1").await;
    let entry = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods/eviction")
        .cloned()
        .expect("pods/eviction in /api/v1");
    assert_eq!(
        entry,
        json!({"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy",
               "version": "v1", "kind": "Eviction", "verbs": ["create"]})
    );
}

/// Marks a Running pod unready (the kubelet's part).
async fn unready(client: &kube::Client, ns: &str, name: &str) {
    let status = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "False"}]}});
    raw::patch(
        client,
        &format!("{}/{name}/status", pods(ns)),
        "application/merge-patch+json",
        &status,
    )
    .await
    .expect_ok(200);
}

#[tokio::test]
async fn an_unready_pod_goes_free_while_the_budget_is_healthy_or_its_policy_always_allows() {
    let (cluster, client, ns) = setup("evict-unready").await;
    let once = without_retries(&cluster).await;
    for name in ["a", "b", "c", "d"] {
        pod(&client, &ns, name, "web", true).await;
    }
    unready(&client, &ns, "c").await;
    unready(&client, &ns, "d").await;
    budget(&client, &ns, "web-pdb", "web", 2).await;
    // IfHealthyBudget (the default): 2 healthy of 2 desired, so an unready pod may go, and the
    // budget is not charged.
    counts(&client, &ns, "web-pdb", 2, 2, 4).await;
    let reply = raw::post(&once, &eviction_path(&ns, "c"), &eviction(&ns, "c")).await;
    assert_eq!(reply.expect_ok(201), success());
    let pdb = get_ok(&client, &format!("{}/web-pdb", budgets(&ns))).await;
    assert!(pdb["status"].get("disruptedPods").is_none(), "{pdb}");
    // Below its desired count the budget protects unready pods too...
    unready(&client, &ns, "b").await;
    counts(&client, &ns, "web-pdb", 1, 2, 4).await;
    let refused = raw::post(&once, &eviction_path(&ns, "d"), &eviction(&ns, "d")).await;
    refused.expect_status(429, "TooManyRequests");
    // ...unless its policy is AlwaysAllow.
    raw::patch(
        &client,
        &format!("{}/web-pdb", budgets(&ns)),
        "application/merge-patch+json",
        &json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}),
    )
    .await
    .expect_ok(200);
    let status = json!({"status": {"observedGeneration": 2}});
    raw::patch(
        &client,
        &format!("{}/web-pdb/status", budgets(&ns)),
        "application/merge-patch+json",
        &status,
    )
    .await
    .expect_ok(200);
    let reply = raw::post(&once, &eviction_path(&ns, "d"), &eviction(&ns, "d")).await;
    assert_eq!(reply.expect_ok(201), success());
}

#[tokio::test]
async fn a_budget_whose_status_is_behind_its_spec_asks_to_retry_in_ten_seconds() {
    let (cluster, client, ns) = setup("evict-behind").await;
    if !cluster.is_devcluster() {
        // A real cluster's disruption controller catches up with a new budget at once.
        return;
    }
    let once = without_retries(&cluster).await;
    pod(&client, &ns, "p", "web", true).await;
    budget(&client, &ns, "web-pdb", "web", 0).await;
    let reply = raw::post(&once, &eviction_path(&ns, "p"), &eviction(&ns, "p")).await;
    let status = reply.expect_status(429, "TooManyRequests");
    assert_eq!(
        reply
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("10")
    );
    assert_eq!(
        status["details"],
        json!({"causes": [{"reason": "DisruptionBudget",
            "message": "The disruption budget web-pdb is still being processed by the server."}],
            "retryAfterSeconds": 10})
    );
}

#[tokio::test]
async fn rbac_authorizes_evictions_as_create_of_pods_eviction() {
    let cluster = TestCluster::builder().with_rbac().start().await;
    let admin = cluster.client();
    let ns = unique_namespace(&admin, "evict-rbac").await;
    for account in ["evictor", "nobody"] {
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts");
        create(&admin, &path, &json!({"metadata": {"name": account}})).await;
    }
    let rbac = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}");
    let role = json!({"metadata": {"name": "evict"}, "rules": [
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
    create(&admin, &format!("{rbac}/roles"), &role).await;
    let binding = json!({"metadata": {"name": "evictor"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "evict"},
        "subjects": [{"kind": "ServiceAccount", "name": "evictor", "namespace": ns}]});
    create(&admin, &format!("{rbac}/rolebindings"), &binding).await;
    pod(&admin, &ns, "p", "p", true).await;
    let token = service_account_token(&admin, &ns, "evictor").await;
    let evictor = client_with_token(cluster.kubeconfig_path(), &token).await;
    wait_for(SOON, "the RoleBinding to take effect", || async {
        (raw::get(&evictor, &format!("{}/p", pods(&ns))).await.status == 200).then_some(())
    })
    .await;
    let token = service_account_token(&admin, &ns, "nobody").await;
    let nobody = client_with_token(cluster.kubeconfig_path(), &token).await;

    let denied = raw::post(&nobody, &eviction_path(&ns, "p"), &eviction(&ns, "p")).await;
    let status = denied.expect_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        format!(
            "pods \"p\" is forbidden: User \"system:serviceaccount:{ns}:nobody\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"{ns}\""
        )
    );
    // The eviction deletes the pod on the server's authority: no `delete` of pods is needed.
    let allowed = raw::post(&evictor, &eviction_path(&ns, "p"), &eviction(&ns, "p")).await;
    assert_eq!(allowed.expect_ok(201), success());
}

#[tokio::test]
async fn kubectl_drain_evicts_the_pods_of_a_node() {
    use super::kubectl::{kubectl, kubectl_installed, run};

    if !kubectl_installed() {
        eprintln!("skipped: kubectl is not installed");
        return;
    }
    let (cluster, client, ns) = setup("evict-drain").await;
    if !cluster.is_devcluster() {
        // Drains a node of its own making, which a shared cluster should not get from a test.
        return;
    }
    let node = format!("drain-{ns}");
    create(
        &client,
        "/api/v1/nodes",
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
    )
    .await;
    for name in ["a", "b"] {
        let body = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        });
        create(&client, &pods(&ns), &body).await;
    }
    let mut command = kubectl(cluster.kubeconfig_path(), &ns);
    command.args([
        "drain",
        &node,
        "--force",
        "--grace-period=0",
        "--timeout=20s",
    ]);
    let (ok, stdout, stderr) = run(command, None).await;
    assert!(ok, "kubectl drain failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("evicted"), "{stdout}");
    let left = get_ok(&client, &pods(&ns)).await;
    assert_eq!(left["items"], json!([]), "{left}");
}
