//! Create, get, update and delete (fixtures `defaulting/*`, `errors/*`, `lifecycle/*`).

use serde_json::{Value, json};

use super::common::{
    configmap, configmaps, create, deployment, deployments, get_ok, pod, rv, setup,
};
use crate::support::raw;

fn containers() -> Value {
    json!([{"name": "c", "image": "nginx"}])
}

fn template(app: &str, restart: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": containers(), "restartPolicy": restart}})
}

/// One minimal valid object of every namespaced built-in kind: (collection path, body).
fn namespaced_samples(ns: &str) -> Vec<(String, Value)> {
    let core = |plural: &str| format!("/api/v1/namespaces/{ns}/{plural}");
    let group = |gv: &str, plural: &str| format!("/apis/{gv}/namespaces/{ns}/{plural}");
    let selector = json!({"matchLabels": {"app": "s"}});
    vec![
        (core("pods"), pod("s")),
        (
            core("services"),
            json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}),
        ),
        (
            core("endpoints"),
            json!({"metadata": {"name": "s"}, "subsets": []}),
        ),
        (core("serviceaccounts"), json!({"metadata": {"name": "s"}})),
        (core("configmaps"), configmap("s", json!({"k": "v"}))),
        (
            core("secrets"),
            json!({"metadata": {"name": "s"}, "data": {"k": "dg=="}}),
        ),
        (
            core("events"),
            json!({"metadata": {"name": "s"}, "involvedObject": {"kind": "Pod", "name": "s", "namespace": ns},
                   "reason": "Test", "message": "m", "type": "Normal"}),
        ),
        (
            core("persistentvolumeclaims"),
            json!({"metadata": {"name": "s"}, "spec": {"accessModes": ["ReadWriteOnce"],
                   "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        (
            core("replicationcontrollers"),
            json!({"metadata": {"name": "s"}, "spec": {"selector": {"app": "s"}, "template": template("s", "Always")}}),
        ),
        (group("apps/v1", "deployments"), deployment("s")),
        (
            group("apps/v1", "replicasets"),
            json!({"metadata": {"name": "s"}, "spec": {"selector": selector, "template": template("s", "Always")}}),
        ),
        (
            group("apps/v1", "daemonsets"),
            json!({"metadata": {"name": "s"}, "spec": {"selector": selector, "template": template("s", "Always")}}),
        ),
        (
            group("apps/v1", "statefulsets"),
            json!({"metadata": {"name": "s"}, "spec": {"selector": selector, "template": template("s", "Always")}}),
        ),
        (
            group("apps/v1", "controllerrevisions"),
            json!({"metadata": {"name": "s"}, "revision": 1}),
        ),
        (
            group("batch/v1", "jobs"),
            json!({"metadata": {"name": "s"}, "spec": {"template": {"spec": {"containers": containers(), "restartPolicy": "Never"}}}}),
        ),
        (
            group("batch/v1", "cronjobs"),
            json!({"metadata": {"name": "s"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template":
                   {"spec": {"containers": containers(), "restartPolicy": "OnFailure"}}}}}}),
        ),
        (
            group("coordination.k8s.io/v1", "leases"),
            json!({"metadata": {"name": "s"}, "spec": {"holderIdentity": "me"}}),
        ),
        (
            group("discovery.k8s.io/v1", "endpointslices"),
            json!({"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": [], "ports": []}),
        ),
        (
            group("events.k8s.io/v1", "events"),
            json!({"metadata": {"name": "s2"}, "eventTime": "2026-01-01T00:00:00.000000Z",
                   "reportingController": "flotilla.dev/test", "reportingInstance": "test-1", "action": "Testing",
                   "reason": "Test", "type": "Normal", "regarding": {"kind": "Pod", "name": "s", "namespace": ns}}),
        ),
    ]
}

#[tokio::test]
async fn every_namespaced_builtin_resource_supports_create_get_list_and_delete() {
    let (_cluster, client, ns) = setup("crud-all").await;
    for (collection, body) in namespaced_samples(&ns) {
        let name = body["metadata"]["name"].as_str().unwrap().to_string();
        let created = create(&client, &collection, &body).await;
        assert_eq!(created["metadata"]["name"], name, "{collection}");
        assert_eq!(
            created["metadata"]["namespace"],
            ns.as_str(),
            "{collection}"
        );
        let item = format!("{collection}/{name}");
        let got = get_ok(&client, &item).await;
        assert_eq!(got["metadata"]["uid"], created["metadata"]["uid"], "{item}");
        let list = get_ok(&client, &collection).await;
        assert!(
            list["kind"].as_str().unwrap_or_default().ends_with("List"),
            "{collection}: {list}"
        );
        assert_eq!(
            super::common::test_made(&list).len(),
            1,
            "{collection}: {list}"
        );
        let deleted = raw::delete(&client, &item, None).await;
        assert_eq!(deleted.status, 200, "DELETE {item}: {}", deleted.text);
    }
}

#[tokio::test]
async fn nodes_are_cluster_scoped() {
    let (_cluster, client, _ns) = setup("crud-node").await;
    let name = format!("crud-node-{}", crate::support::namespace::random_suffix(5));
    let created = create(
        &client,
        "/api/v1/nodes",
        &json!({"metadata": {"name": name}}),
    )
    .await;
    assert!(
        created["metadata"].get("namespace").is_none(),
        "nodes have no namespace: {created}"
    );
    get_ok(&client, &format!("/api/v1/nodes/{name}")).await;
    assert_eq!(
        raw::delete(&client, &format!("/api/v1/nodes/{name}"), None)
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn create_fills_uid_creation_timestamp_resource_version_and_generation() {
    let (_cluster, client, ns) = setup("crud-create").await;
    let cm = create(
        &client,
        &configmaps(&ns),
        &configmap("a", json!({"k": "v"})),
    )
    .await;
    let meta = &cm["metadata"];
    assert_eq!(
        meta["uid"].as_str().map(str::len),
        Some(36),
        "uid is a UUID: {meta}"
    );
    assert!(
        meta["creationTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{meta}"
    );
    assert!(rv(&cm) > 0);
    // Fixture defaulting/configmap.json: ConfigMaps have no generation.
    assert!(
        meta.get("generation").is_none(),
        "ConfigMap without generation: {meta}"
    );
    let deploy = create(&client, &deployments(&ns), &deployment("d")).await;
    assert_eq!(deploy["metadata"]["generation"], 1);
    let pod = create(&client, &format!("/api/v1/namespaces/{ns}/pods"), &pod("p")).await;
    // Pods have generation 1 since 1.33 (what devcluster and the fixtures show); 1.32 sets none.
    let generation = &pod["metadata"]["generation"];
    assert!(
        *generation == 1 || generation.is_null(),
        "a new pod has generation 1 (1.33+) or none (1.32): {pod}"
    );
    if !crate::support::cluster::is_external() {
        assert_eq!(*generation, 1, "devcluster speaks 1.36: {pod}");
    }
}

#[tokio::test]
async fn generate_name_appends_five_random_characters() {
    let (_cluster, client, ns) = setup("crud-genname").await;
    let body = json!({"metadata": {"generateName": "web-"}, "data": {"k": "v"}});
    let a = create(&client, &configmaps(&ns), &body).await;
    let b = create(&client, &configmaps(&ns), &body).await;
    let name = a["metadata"]["name"].as_str().unwrap();
    assert!(
        name.starts_with("web-") && name.len() == "web-".len() + 5,
        "generated name {name}"
    );
    assert_eq!(a["metadata"]["generateName"], "web-");
    assert_ne!(a["metadata"]["name"], b["metadata"]["name"]);
}

#[tokio::test]
async fn creating_an_existing_name_is_409_already_exists() {
    // Fixture errors/create-existing-409-alreadyexists.json.
    let (_cluster, client, ns) = setup("crud-exists").await;
    create(
        &client,
        &configmaps(&ns),
        &configmap("exists", json!({"k": "v1"})),
    )
    .await;
    let reply = raw::post(
        &client,
        &configmaps(&ns),
        &configmap("exists", json!({"k": "v1"})),
    )
    .await;
    let status = reply.expect_status(409, "AlreadyExists");
    assert_eq!(status["message"], "configmaps \"exists\" already exists");
    assert_eq!(
        status["details"],
        json!({"name": "exists", "kind": "configmaps"})
    );
}

#[tokio::test]
async fn creating_in_a_missing_namespace_is_404_for_the_namespace() {
    // Fixture errors/create-in-missing-namespace-404.json.
    let (_cluster, client, _ns) = setup("crud-nons").await;
    let reply = raw::post(
        &client,
        &configmaps("nonexistent-ns"),
        &configmap("x", json!({})),
    )
    .await;
    let status = reply.expect_status(404, "NotFound");
    assert_eq!(status["message"], "namespaces \"nonexistent-ns\" not found");
    assert_eq!(
        status["details"],
        json!({"name": "nonexistent-ns", "kind": "namespaces"})
    );
}

#[tokio::test]
async fn a_stale_resource_version_on_update_is_409_conflict() {
    // Fixture errors/update-stale-resourceversion-409-conflict.json.
    let (_cluster, client, ns) = setup("crud-conflict").await;
    let first = create(
        &client,
        &configmaps(&ns),
        &configmap("exists", json!({"k": "v1"})),
    )
    .await;
    let path = format!("{}/exists", configmaps(&ns));
    let mut update = first.clone();
    update["data"]["k"] = json!("v2");
    let second = raw::put(&client, &path, &update).await.expect_ok(200);
    assert!(rv(&second) > rv(&first));
    assert_eq!(second["data"]["k"], "v2");
    update["data"]["k"] = json!("v3");
    let status = raw::put(&client, &path, &update)
        .await
        .expect_status(409, "Conflict");
    assert_eq!(
        status["message"],
        "Operation cannot be fulfilled on configmaps \"exists\": the object has been modified; \
         please apply your changes to the latest version and try again"
    );
    assert_eq!(
        status["details"],
        json!({"name": "exists", "kind": "configmaps"})
    );
    assert_eq!(
        get_ok(&client, &path).await["data"]["k"],
        "v2",
        "the stale update must not land"
    );
}

#[tokio::test]
async fn an_update_without_resource_version_overwrites_unconditionally() {
    let (_cluster, client, ns) = setup("crud-force").await;
    create(
        &client,
        &configmaps(&ns),
        &configmap("c", json!({"k": "v1"})),
    )
    .await;
    let path = format!("{}/c", configmaps(&ns));
    let updated = raw::put(&client, &path, &configmap("c", json!({"k": "v2"})))
        .await
        .expect_ok(200);
    assert_eq!(updated["data"]["k"], "v2");
}

#[tokio::test]
async fn updating_a_missing_object_is_404_and_a_name_mismatch_is_400() {
    // Fixtures errors/update-missing-object-404.json, errors/update-name-mismatch-400.json.
    let (_cluster, client, ns) = setup("crud-update-errors").await;
    let ghost = json!({"metadata": {"name": "ghost", "resourceVersion": "5"}});
    let status = raw::put(&client, &format!("{}/ghost", configmaps(&ns)), &ghost)
        .await
        .expect_status(404, "NotFound");
    assert_eq!(status["message"], "configmaps \"ghost\" not found");
    create(&client, &configmaps(&ns), &configmap("exists", json!({}))).await;
    let other = configmap("other", json!({"k": "v3"}));
    let status = raw::put(&client, &format!("{}/exists", configmaps(&ns)), &other)
        .await
        .expect_status(400, "BadRequest");
    assert_eq!(
        status["message"],
        "the name of the object (other) does not match the name on the URL (exists)"
    );
}

#[tokio::test]
async fn a_no_op_update_keeps_the_resource_version() {
    // Fixture lifecycle/generation-07-put-noop.json.
    let (_cluster, client, ns) = setup("crud-noop").await;
    let created = create(&client, &deployments(&ns), &deployment("d")).await;
    let path = format!("{}/d", deployments(&ns));
    let again = raw::put(&client, &path, &created).await.expect_ok(200);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert_eq!(again["metadata"]["generation"], 1);
}

#[tokio::test]
async fn get_of_a_missing_object_is_404_naming_the_resource() {
    // Fixtures errors/get-missing-404.json, get-missing-apps-group-404.json, get-missing-clusterscoped-404.json.
    let (_cluster, client, ns) = setup("crud-get404").await;
    let status = raw::get(&client, &format!("{}/nope", configmaps(&ns)))
        .await
        .expect_status(404, "NotFound");
    assert_eq!(status["message"], "configmaps \"nope\" not found");
    assert_eq!(
        status["details"],
        json!({"name": "nope", "kind": "configmaps"})
    );
    let status = raw::get(&client, &format!("{}/nope", deployments(&ns)))
        .await
        .expect_status(404, "NotFound");
    assert_eq!(status["message"], "deployments.apps \"nope\" not found");
    assert_eq!(
        status["details"],
        json!({"name": "nope", "group": "apps", "kind": "deployments"})
    );
    let status = raw::get(&client, "/api/v1/nodes/nope")
        .await
        .expect_status(404, "NotFound");
    assert_eq!(status["message"], "nodes \"nope\" not found");
}

#[tokio::test]
async fn delete_without_finalizers_answers_a_success_status_and_removes_the_object() {
    // Fixture lifecycle/delete-deployment-default-policy.json.
    let (_cluster, client, ns) = setup("crud-delete").await;
    let created = create(&client, &deployments(&ns), &deployment("d")).await;
    let path = format!("{}/d", deployments(&ns));
    let reply = raw::delete(&client, &path, None).await.expect_ok(200);
    assert_eq!(reply["kind"], "Status");
    assert_eq!(reply["status"], "Success");
    assert_eq!(reply["details"]["name"], "d");
    assert_eq!(reply["details"]["group"], "apps");
    assert_eq!(reply["details"]["kind"], "deployments");
    assert_eq!(reply["details"]["uid"], created["metadata"]["uid"]);
    raw::get(&client, &path)
        .await
        .expect_status(404, "NotFound");
    let status = raw::delete(&client, &path, None)
        .await
        .expect_status(404, "NotFound");
    assert_eq!(status["message"], "deployments.apps \"d\" not found");
}

/// Whether `message` reports a failed `field` precondition. Upstream capitalised the UID case
/// differently across releases (`precondition failed: UID in precondition` in some, `Precondition
/// failed: ...` in 1.36, which devcluster keeps), and older releases wrap it in a `StorageError` text;
/// every form from 1.32 to 1.36 is accepted.
fn precondition_failed(message: &str, field: &str) -> bool {
    message.to_lowercase().contains(&format!(
        "precondition failed: {} in precondition",
        field.to_lowercase()
    ))
}

#[tokio::test]
async fn delete_preconditions_on_uid_and_resource_version_are_enforced() {
    let (_cluster, client, ns) = setup("crud-precond").await;
    let created = create(
        &client,
        &configmaps(&ns),
        &configmap("c", json!({"k": "v"})),
    )
    .await;
    let path = format!("{}/c", configmaps(&ns));
    let wrong_uid = json!({"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}});
    let status = raw::delete(&client, &path, Some(&wrong_uid))
        .await
        .expect_status(409, "Conflict");
    let message = status["message"].as_str().unwrap();
    assert!(precondition_failed(message, "UID"), "{message}");
    if !crate::support::cluster::is_external() {
        assert!(
            message.contains("Precondition failed: UID in precondition"),
            "devcluster speaks 1.36: {message}"
        );
    }
    let wrong_rv = json!({"preconditions": {"resourceVersion": "1"}});
    let status = raw::delete(&client, &path, Some(&wrong_rv))
        .await
        .expect_status(409, "Conflict");
    let message = status["message"].as_str().unwrap();
    assert!(precondition_failed(message, "ResourceVersion"), "{message}");
    get_ok(&client, &path).await;
    let right = json!({"preconditions": {"uid": created["metadata"]["uid"], "resourceVersion": created["metadata"]["resourceVersion"]}});
    raw::delete(&client, &path, Some(&right))
        .await
        .expect_ok(200);
    raw::get(&client, &path)
        .await
        .expect_status(404, "NotFound");
}

#[tokio::test]
async fn deletecollection_removes_only_what_the_selector_matches() {
    let (_cluster, client, ns) = setup("crud-deletecoll").await;
    for (name, env) in [("a", "test"), ("b", "test"), ("c", "prod")] {
        let body = json!({"metadata": {"name": name, "labels": {"env": env}}});
        create(&client, &configmaps(&ns), &body).await;
    }
    let reply = raw::delete(
        &client,
        &format!("{}?labelSelector=env%3Dtest", configmaps(&ns)),
        None,
    )
    .await;
    let body = reply.expect_ok(200);
    assert_eq!(
        body["kind"], "ConfigMapList",
        "deletecollection answers the deleted items: {body}"
    );
    assert_eq!(super::common::names(&body), vec!["a", "b"]);
    let left = get_ok(&client, &configmaps(&ns)).await;
    assert_eq!(super::common::names(&left), vec!["c"]);
}

#[tokio::test]
async fn kube_rs_typed_api_round_trips_a_configmap() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DeleteParams, PostParams};
    let (_cluster, client, ns) = setup("crud-typed").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let cm: ConfigMap = serde_json::from_value(configmap("typed", json!({"a": "1"}))).unwrap();
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    let mut fetched = api.get("typed").await.unwrap();
    assert_eq!(fetched.metadata.uid, created.metadata.uid);
    fetched
        .data
        .get_or_insert_default()
        .insert("b".into(), "2".into());
    let replaced = api
        .replace("typed", &PostParams::default(), &fetched)
        .await
        .unwrap();
    assert_eq!(
        replaced.data.unwrap().get("b").map(String::as_str),
        Some("2")
    );
    let err = api
        .replace("typed", &PostParams::default(), &fetched)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "stale replace: {err}"
    );
    api.delete("typed", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("typed").await.unwrap().is_none());
}
