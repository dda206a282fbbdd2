//! Objects and shortcuts shared by the API behaviour tests.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::namespace::unique_namespace;
use crate::support::raw;

/// Upper bound for anything a healthy server does "at once" (a watch event, a write becoming visible).
pub const SOON: Duration = Duration::from_secs(10);

/// A cluster, its client and a fresh namespace named after `prefix`.
pub async fn setup(prefix: &str) -> (TestCluster, kube::Client, String) {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, prefix).await;
    (cluster, client, ns)
}

/// A ConfigMap body.
pub fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// A minimal valid Deployment with selector/template labels `app: <name>`.
pub fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    })
}

/// A minimal valid Pod.
pub fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    })
}

/// `/api/v1/namespaces/{ns}/configmaps`.
pub fn configmaps(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/configmaps")
}

/// `/apis/apps/v1/namespaces/{ns}/deployments`.
pub fn deployments(ns: &str) -> String {
    format!("/apis/apps/v1/namespaces/{ns}/deployments")
}

/// `/api/v1/namespaces/{ns}/pods`.
pub fn pods(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods")
}

/// Creates `body` at `collection`, asserting 201; returns the created object.
pub async fn create(client: &kube::Client, collection: &str, body: &Value) -> Value {
    let reply = raw::post(client, collection, body).await;
    assert_eq!(
        reply.status, 201,
        "create at {collection} failed: {}",
        reply.text
    );
    reply.json()
}

/// GETs `path`, asserting 200.
pub async fn get_ok(client: &kube::Client, path: &str) -> Value {
    let reply = raw::get(client, path).await;
    assert_eq!(reply.status, 200, "GET {path} failed: {}", reply.text);
    reply.json()
}

/// The resourceVersion of an object or list as a number.
pub fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("no numeric metadata.resourceVersion in {object}"))
}

/// Objects a real cluster's controllers put in every namespace: the serviceaccount controller's
/// `default` ServiceAccount and the root-CA publisher's `kube-root-ca.crt` ConfigMap. devcluster runs
/// neither, so there lists hold only what the test made.
pub const CLUSTER_MADE: [(&str, &str); 2] = [
    ("ServiceAccount", "default"),
    ("ConfigMap", "kube-root-ca.crt"),
];

/// The items of `list` except those [`CLUSTER_MADE`] names.
pub fn test_made(list: &Value) -> Vec<&Value> {
    let kind = list["kind"].as_str().unwrap_or_default();
    let kind = kind.strip_suffix("List").unwrap_or(kind);
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .filter(|item| {
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            !CLUSTER_MADE.contains(&(kind, name))
        })
        .collect()
}

/// The names of a list's items, sorted, without the objects a real cluster makes in every namespace
/// ([`CLUSTER_MADE`]).
pub fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = test_made(list)
        .into_iter()
        .map(|item| {
            item["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    names.sort();
    names
}

/// Asserts that the server still serves ordinary requests (used after bad input).
pub async fn assert_still_serving(client: &kube::Client, ns: &str) {
    let name = format!("alive-{}", crate::support::namespace::random_suffix(5));
    create(
        client,
        &configmaps(ns),
        &configmap(&name, json!({"k": "v"})),
    )
    .await;
    let got = get_ok(client, &format!("{}/{name}", configmaps(ns))).await;
    assert_eq!(got["data"]["k"], "v");
}
