//! Discovery documents (fixtures `discovery/*`): what kubectl and client-go read to find resources.

use serde_json::Value;

use super::common::get_ok;
use crate::support::cluster::TestCluster;
use crate::support::raw;

fn resource<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("not an APIResourceList: {list}"))
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} missing from {}", list["groupVersion"]))
}

fn verbs(resource: &Value) -> Vec<String> {
    let mut verbs: Vec<String> = resource["verbs"]
        .as_array()
        .unwrap_or_else(|| panic!("no verbs in {resource}"))
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect();
    verbs.sort();
    verbs
}

const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const SUBRESOURCE_VERBS: [&str; 3] = ["get", "patch", "update"];

#[track_caller]
fn assert_resource(
    list: &Value,
    name: &str,
    namespaced: bool,
    kind: &str,
    expected_verbs: &[&str],
) {
    let r = resource(list, name);
    assert_eq!(r["namespaced"], namespaced, "{name}.namespaced");
    assert_eq!(r["kind"], kind, "{name}.kind");
    assert_eq!(verbs(r), expected_verbs, "{name}.verbs");
}

#[tokio::test]
async fn the_core_group_is_announced_at_api() {
    let cluster = TestCluster::start().await;
    let body = get_ok(&cluster.client(), "/api").await;
    assert_eq!(body["kind"], "APIVersions");
    assert_eq!(body["versions"], serde_json::json!(["v1"]));
}

#[tokio::test]
async fn core_v1_lists_the_builtin_resources_with_their_verbs_and_subresources() {
    let cluster = TestCluster::start().await;
    let list = get_ok(&cluster.client(), "/api/v1").await;
    assert_eq!(list["kind"], "APIResourceList");
    assert_eq!(list["groupVersion"], "v1");
    assert_resource(
        &list,
        "namespaces",
        false,
        "Namespace",
        &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
    );
    assert_resource(
        &list,
        "namespaces/finalize",
        false,
        "Namespace",
        &["update"],
    );
    assert_resource(
        &list,
        "namespaces/status",
        false,
        "Namespace",
        &SUBRESOURCE_VERBS,
    );
    assert_resource(&list, "nodes", false, "Node", &ALL_VERBS);
    assert_resource(&list, "nodes/status", false, "Node", &SUBRESOURCE_VERBS);
    assert_resource(&list, "pods", true, "Pod", &ALL_VERBS);
    assert_resource(&list, "pods/status", true, "Pod", &SUBRESOURCE_VERBS);
    assert_resource(&list, "pods/binding", true, "Binding", &["create"]);
    for (name, kind) in [
        ("services", "Service"),
        ("endpoints", "Endpoints"),
        ("serviceaccounts", "ServiceAccount"),
        ("configmaps", "ConfigMap"),
        ("secrets", "Secret"),
        ("events", "Event"),
        ("persistentvolumeclaims", "PersistentVolumeClaim"),
        ("replicationcontrollers", "ReplicationController"),
        ("resourcequotas", "ResourceQuota"),
    ] {
        assert_resource(&list, name, true, kind, &ALL_VERBS);
    }
    assert_resource(
        &list,
        "resourcequotas/status",
        true,
        "ResourceQuota",
        &SUBRESOURCE_VERBS,
    );
    assert_resource(
        &list,
        "replicationcontrollers/scale",
        true,
        "Scale",
        &SUBRESOURCE_VERBS,
    );
    assert_resource(
        &list,
        "replicationcontrollers/status",
        true,
        "ReplicationController",
        &SUBRESOURCE_VERBS,
    );
    assert_eq!(
        resource(&list, "pods")["shortNames"],
        serde_json::json!(["po"])
    );
    assert_eq!(
        resource(&list, "configmaps")["shortNames"],
        serde_json::json!(["cm"])
    );
    assert_eq!(
        resource(&list, "resourcequotas")["shortNames"],
        serde_json::json!(["quota"])
    );
}

#[tokio::test]
async fn apps_v1_has_workloads_with_status_and_scale() {
    let cluster = TestCluster::start().await;
    let list = get_ok(&cluster.client(), "/apis/apps/v1").await;
    assert_eq!(list["groupVersion"], "apps/v1");
    assert_resource(
        &list,
        "controllerrevisions",
        true,
        "ControllerRevision",
        &ALL_VERBS,
    );
    for (name, kind) in [
        ("deployments", "Deployment"),
        ("replicasets", "ReplicaSet"),
        ("statefulsets", "StatefulSet"),
    ] {
        assert_resource(&list, name, true, kind, &ALL_VERBS);
        assert_resource(
            &list,
            &format!("{name}/status"),
            true,
            kind,
            &SUBRESOURCE_VERBS,
        );
        assert_resource(
            &list,
            &format!("{name}/scale"),
            true,
            "Scale",
            &SUBRESOURCE_VERBS,
        );
    }
    assert_resource(&list, "daemonsets", true, "DaemonSet", &ALL_VERBS);
    assert_resource(
        &list,
        "daemonsets/status",
        true,
        "DaemonSet",
        &SUBRESOURCE_VERBS,
    );
    assert_eq!(
        resource(&list, "deployments")["shortNames"],
        serde_json::json!(["deploy"])
    );
}

#[tokio::test]
async fn batch_coordination_discovery_events_and_apiextensions_are_served() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let batch = get_ok(&client, "/apis/batch/v1").await;
    assert_resource(&batch, "jobs", true, "Job", &ALL_VERBS);
    assert_resource(&batch, "jobs/status", true, "Job", &SUBRESOURCE_VERBS);
    assert_resource(&batch, "cronjobs", true, "CronJob", &ALL_VERBS);
    assert_resource(
        &batch,
        "cronjobs/status",
        true,
        "CronJob",
        &SUBRESOURCE_VERBS,
    );
    let coordination = get_ok(&client, "/apis/coordination.k8s.io/v1").await;
    assert_resource(&coordination, "leases", true, "Lease", &ALL_VERBS);
    let discovery = get_ok(&client, "/apis/discovery.k8s.io/v1").await;
    assert_resource(
        &discovery,
        "endpointslices",
        true,
        "EndpointSlice",
        &ALL_VERBS,
    );
    let events = get_ok(&client, "/apis/events.k8s.io/v1").await;
    assert_resource(&events, "events", true, "Event", &ALL_VERBS);
    let extensions = get_ok(&client, "/apis/apiextensions.k8s.io/v1").await;
    assert_resource(
        &extensions,
        "customresourcedefinitions",
        false,
        "CustomResourceDefinition",
        &ALL_VERBS,
    );
    assert_resource(
        &extensions,
        "customresourcedefinitions/status",
        false,
        "CustomResourceDefinition",
        &SUBRESOURCE_VERBS,
    );
}

#[tokio::test]
async fn the_group_list_names_every_builtin_group_with_its_preferred_version() {
    let cluster = TestCluster::start().await;
    let reply = raw::get(&cluster.client(), "/apis").await;
    let body = reply.expect_ok(200);
    assert_eq!(body["kind"], "APIGroupList");
    for group in [
        "apps",
        "batch",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "apiextensions.k8s.io",
    ] {
        let entry = body["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == group)
            .unwrap_or_else(|| panic!("group {group} missing from /apis: {body}"));
        assert_eq!(
            entry["preferredVersion"]["groupVersion"],
            format!("{group}/v1")
        );
        assert_eq!(entry["versions"][0]["version"], "v1");
    }
}

#[tokio::test]
async fn aggregated_discovery_is_served_when_asked_for() {
    // Fixture discovery/aggregated-apis.json: content type carries g/v/as, plus Vary: Accept.
    let cluster = TestCluster::start().await;
    let request = http::Request::get("/apis")
        .header(
            http::header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .body(Vec::new())
        .unwrap();
    let response = cluster
        .client()
        .send(request.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()[http::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        content_type,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["kind"], "APIGroupDiscoveryList");
    assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2");
    let apps = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "apps")
        .unwrap();
    let resources = apps["versions"][0]["resources"].as_array().unwrap();
    let deployments = resources
        .iter()
        .find(|r| r["resource"] == "deployments")
        .unwrap();
    assert_eq!(deployments["scope"], "Namespaced");
    assert_eq!(deployments["responseKind"]["kind"], "Deployment");
}

#[tokio::test]
async fn version_reports_a_kubernetes_version() {
    let cluster = TestCluster::start().await;
    let body = get_ok(&cluster.client(), "/version").await;
    assert_eq!(body["major"], "1");
    assert!(
        body["minor"].as_str().is_some_and(|m| !m.is_empty()),
        "minor: {body}"
    );
    assert!(
        body["gitVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1.")),
        "gitVersion: {body}"
    );
}

#[tokio::test]
async fn kube_rs_discovery_finds_the_builtin_groups() {
    let cluster = TestCluster::start().await;
    let discovery = kube::Discovery::new(cluster.client()).run().await.unwrap();
    for group in [
        "",
        "apps",
        "batch",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
    ] {
        assert!(
            discovery.has_group(group),
            "kube-rs discovery lacks group {group:?}"
        );
    }
    let (resource, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.kind == "Deployment")
        .unwrap();
    assert_eq!(resource.plural, "deployments");
    assert!(
        caps.subresources
            .iter()
            .any(|(s, _)| s.plural == "deployments/scale" || s.plural == "scale")
    );
}
