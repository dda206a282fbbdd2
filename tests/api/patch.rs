//! PATCH in its four flavours (fixtures `patches/*`, `errors/patch-*-415.json`).

use serde_json::{Value, json};

use super::common::{configmaps, create, deployments, get_ok, setup};
use crate::support::raw;

/// The base Deployment of the upstream recording: containers a (with a port) and b (with args).
fn web() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "a", "image": "nginx:1.25", "ports": [{"containerPort": 80}]},
                    {"name": "b", "image": "busybox:1.36", "args": ["sleep", "3600"]},
                ]},
            },
        },
    })
}

fn containers(deploy: &Value) -> Vec<(String, String)> {
    deploy["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["image"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn container<'a>(deploy: &'a Value, name: &str) -> &'a Value {
    deploy["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

async fn web_in(prefix: &str) -> (crate::support::cluster::TestCluster, kube::Client, String) {
    let (cluster, client, ns) = setup(prefix).await;
    create(&client, &deployments(&ns), &web()).await;
    let path = format!("{}/web", deployments(&ns));
    (cluster, client, path)
}

#[tokio::test]
async fn merge_patch_sets_scalars_and_labels_and_null_deletes_a_key() {
    let (_cluster, client, path) = web_in("patch-merge").await;
    let patch = json!({"metadata": {"labels": {"tier": "front"}}, "spec": {"replicas": 2}});
    let patched = raw::patch(&client, &path, "application/merge-patch+json", &patch)
        .await
        .expect_ok(200);
    assert_eq!(patched["spec"]["replicas"], 2);
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app": "web", "tier": "front"})
    );
    assert_eq!(patched["metadata"]["generation"], 2);
    let patch = json!({"metadata": {"labels": {"tier": null}}});
    let patched = raw::patch(&client, &path, "application/merge-patch+json", &patch)
        .await
        .expect_ok(200);
    assert_eq!(patched["metadata"]["labels"], json!({"app": "web"}));
}

#[tokio::test]
async fn merge_patch_replaces_whole_lists() {
    // Fixture patches/merge-patch-list-replaces-whole-list.json.
    let (_cluster, client, path) = web_in("patch-mergelist").await;
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "busybox:1.37"}]}}}});
    let patched = raw::patch(&client, &path, "application/merge-patch+json", &patch)
        .await
        .expect_ok(200);
    assert_eq!(
        containers(&patched),
        [("b".to_string(), "busybox:1.37".to_string())]
    );
    assert!(
        container(&patched, "b").get("args").is_none(),
        "b lost its args"
    );
    assert_eq!(
        container(&patched, "b")["imagePullPolicy"],
        "IfNotPresent",
        "defaults re-applied"
    );
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    // Fixture patches/strategic-merge-patch-containers-by-name.json.
    let (_cluster, client, path) = web_in("patch-smp").await;
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "busybox:1.37"}]}}}});
    let patched = raw::patch(
        &client,
        &path,
        "application/strategic-merge-patch+json",
        &patch,
    )
    .await
    .expect_ok(200);
    assert_eq!(
        containers(&patched),
        [
            ("a".to_string(), "nginx:1.25".to_string()),
            ("b".to_string(), "busybox:1.37".to_string())
        ]
    );
    assert_eq!(
        container(&patched, "b")["args"],
        json!(["sleep", "3600"]),
        "b keeps its args"
    );
    assert_eq!(container(&patched, "a")["ports"][0]["containerPort"], 80);
}

#[tokio::test]
async fn strategic_merge_patch_puts_a_new_container_first_and_deletes_by_directive() {
    // Fixtures patches/strategic-merge-patch-add-container.json and -delete-directive.json (Surprise 27).
    let (_cluster, client, path) = web_in("patch-smpadd").await;
    let add = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "redis:7"}]}}}});
    let patched = raw::patch(
        &client,
        &path,
        "application/strategic-merge-patch+json",
        &add,
    )
    .await
    .expect_ok(200);
    let names: Vec<String> = containers(&patched).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["c", "a", "b"]);
    let delete = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "$patch": "delete"}]}}}});
    let patched = raw::patch(
        &client,
        &path,
        "application/strategic-merge-patch+json",
        &delete,
    )
    .await
    .expect_ok(200);
    let names: Vec<String> = containers(&patched).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["a", "b"]);
}

#[tokio::test]
async fn strategic_merge_patch_merges_ports_by_container_port() {
    // Fixture patches/strategic-merge-patch-retainkeys-ports.json.
    let (_cluster, client, path) = web_in("patch-smpports").await;
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 8080}]}]}}}});
    let patched = raw::patch(
        &client,
        &path,
        "application/strategic-merge-patch+json",
        &patch,
    )
    .await
    .expect_ok(200);
    let mut ports: Vec<i64> = container(&patched, "a")["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_i64().unwrap())
        .collect();
    ports.sort();
    assert_eq!(ports, [80, 8080]);
}

#[tokio::test]
async fn strategic_merge_patch_of_pod_status_merges_conditions_by_type() {
    // Fixture kcm/07-patch-pod-0-ready.json.
    let (_cluster, client, ns) = setup("patch-podstatus").await;
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    create(&client, &pods, &super::common::pod("p")).await;
    let path = format!("{pods}/p/status");
    let first = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}});
    raw::patch(
        &client,
        &path,
        "application/strategic-merge-patch+json",
        &first,
    )
    .await
    .expect_ok(200);
    let second = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let patched = raw::patch(
        &client,
        &path,
        "application/strategic-merge-patch+json",
        &second,
    )
    .await
    .expect_ok(200);
    let mut types: Vec<&str> = patched["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    types.sort();
    assert_eq!(types, ["PodScheduled", "Ready"]);
    assert_eq!(patched["status"]["phase"], "Running");
}

#[tokio::test]
async fn json_patch_applies_rfc6902_operations() {
    // Fixture patches/json-patch.json.
    let (_cluster, client, path) = web_in("patch-json").await;
    let patch = json!([
        {"op": "replace", "path": "/spec/replicas", "value": 3},
        {"op": "add", "path": "/metadata/labels/y", "value": "2"},
        {"op": "add", "path": "/spec/template/spec/containers/1/env", "value": [{"name": "K", "value": "V"}]},
    ]);
    let patched = raw::patch(&client, &path, "application/json-patch+json", &patch)
        .await
        .expect_ok(200);
    assert_eq!(patched["spec"]["replicas"], 3);
    assert_eq!(patched["metadata"]["labels"]["y"], "2");
    assert_eq!(
        container(&patched, "b")["env"],
        json!([{"name": "K", "value": "V"}])
    );
}

#[tokio::test]
async fn a_failing_json_patch_is_422_with_the_generic_message() {
    // Fixtures patches/json-patch-test-fails.json, json-patch-bad-path.json, json-patch-not-array.json.
    let (_cluster, client, path) = web_in("patch-jsonbad").await;
    let failing_test = json!([{"op": "test", "path": "/spec/replicas", "value": 99}, {"op": "replace", "path": "/spec/replicas", "value": 4}]);
    for patch in [
        failing_test,
        json!([{"op": "replace", "path": "/spec/nonexistent/x", "value": 1}]),
    ] {
        let status = raw::patch(&client, &path, "application/json-patch+json", &patch)
            .await
            .expect_status(422, "Invalid");
        assert_eq!(
            status["message"],
            "the server rejected our request due to an error in our request"
        );
    }
    let not_array = json!({"op": "replace", "path": "/spec/replicas", "value": 4});
    let status = raw::patch(&client, &path, "application/json-patch+json", &not_array)
        .await
        .expect_status(400, "BadRequest");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("error decoding patch"),
        "{status}"
    );
    assert_eq!(
        get_ok(&client, &path).await["spec"]["replicas"],
        1,
        "failed patches change nothing"
    );
}

#[tokio::test]
async fn patching_a_missing_object_is_404() {
    // Fixture patches/patch-missing-object-merge-404.json.
    let (_cluster, client, ns) = setup("patch-404").await;
    let path = format!("{}/nope", configmaps(&ns));
    let status = raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"data": {"a": "1"}}),
    )
    .await
    .expect_status(404, "NotFound");
    assert_eq!(status["message"], "configmaps \"nope\" not found");
}

#[tokio::test]
async fn a_patch_with_a_non_patch_content_type_is_415() {
    // Fixtures errors/patch-json-content-type-415.json and patch-unsupported-content-type-415.json.
    let (_cluster, client, ns) = setup("patch-415").await;
    create(
        &client,
        &configmaps(&ns),
        &super::common::configmap("exists", json!({"k": "v"})),
    )
    .await;
    let path = format!("{}/exists", configmaps(&ns));
    for content_type in ["application/json", "text/plain"] {
        let status = raw::patch(&client, &path, content_type, &json!({"data": {"k": "z"}}))
            .await
            .expect_status(415, "UnsupportedMediaType");
        assert_eq!(
            status["message"], "415: Unsupported Media Type",
            "{content_type}"
        );
    }
}

const APPLIED: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: applied
  labels:
    owner: test
spec:
  replicas: 2
  selector:
    matchLabels:
      app: applied
  template:
    metadata:
      labels:
        app: applied
    spec:
      containers:
      - name: main
        image: nginx:1.25
";

async fn apply(client: &kube::Client, path: &str, yaml: &str) -> raw::Reply {
    raw::request(
        client,
        http::Method::PATCH,
        path,
        Some("application/apply-patch+yaml"),
        yaml.as_bytes().to_vec(),
    )
    .await
}

#[tokio::test]
async fn apply_creates_a_missing_object_and_records_the_field_manager() {
    // Fixture patches/apply-create.json.
    let (_cluster, client, ns) = setup("patch-apply").await;
    let path = format!("{}/applied?fieldManager=test", deployments(&ns));
    let created = apply(&client, &path, APPLIED).await.expect_ok(201);
    assert_eq!(created["spec"]["replicas"], 2);
    assert_eq!(created["metadata"]["generation"], 1);
    let managed = created["metadata"]["managedFields"].as_array().unwrap();
    assert!(
        managed
            .iter()
            .any(|m| m["manager"] == "test" && m["operation"] == "Apply"),
        "managedFields: {managed:?}"
    );
    let again = apply(
        &client,
        &path,
        &APPLIED.replace("replicas: 2", "replicas: 3"),
    )
    .await
    .expect_ok(200);
    assert_eq!(again["spec"]["replicas"], 3);
    assert_eq!(again["metadata"]["generation"], 2);
    assert_eq!(again["metadata"]["uid"], created["metadata"]["uid"]);
}

#[tokio::test]
async fn apply_accepts_a_json_body_and_a_merge_patch_by_another_manager_is_recorded() {
    // Fixtures patches/apply-json-body.json and update-by-other-manager.json.
    let (_cluster, client, ns) = setup("patch-applyjson").await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied-cm"}, "data": {"a": "1"}});
    let path = format!("{}/applied-cm?fieldManager=test", configmaps(&ns));
    let created = apply(&client, &path, &body.to_string())
        .await
        .expect_ok(201);
    assert_eq!(created["data"]["a"], "1");
    let other = format!("{}/applied-cm?fieldManager=other", configmaps(&ns));
    let patched = raw::patch(
        &client,
        &other,
        "application/merge-patch+json",
        &json!({"data": {"b": "2"}}),
    )
    .await
    .expect_ok(200);
    let managed: Vec<(String, String)> = patched["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap().to_string(),
                m["operation"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        managed.contains(&("test".into(), "Apply".into())),
        "{managed:?}"
    );
    assert!(
        managed.contains(&("other".into(), "Update".into())),
        "{managed:?}"
    );
}

#[tokio::test]
async fn apply_without_a_field_manager_is_422() {
    // Fixture patches/apply-missing-fieldmanager-422.json.
    let (_cluster, client, ns) = setup("patch-applynofm").await;
    let path = format!("{}/applied", deployments(&ns));
    let status = apply(&client, &path, APPLIED)
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        status["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    assert_eq!(status["details"]["causes"][0]["field"], "fieldManager");
}

#[tokio::test]
async fn kube_rs_patch_flavours_work_through_the_typed_api() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Api, Patch, PatchParams};
    let (_cluster, client, ns) = setup("patch-kube").await;
    create(&client, &deployments(&ns), &web()).await;
    let api: Api<Deployment> = Api::namespaced(client, &ns);
    let merged = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.spec.unwrap().replicas, Some(2));
    let strategic = Patch::Strategic(
        json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "nginx:1.27"}]}}}}),
    );
    let patched = api
        .patch("web", &PatchParams::default(), &strategic)
        .await
        .unwrap();
    let images: Vec<String> = patched
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .filter_map(|c| c.image)
        .collect();
    assert_eq!(images, ["nginx:1.27", "busybox:1.36"]);
    let applied = api
        .patch("web", &PatchParams::apply("kube-rs-test").force(), &Patch::Apply(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 4}
        })))
        .await
        .unwrap();
    assert_eq!(applied.spec.unwrap().replicas, Some(4));
}
