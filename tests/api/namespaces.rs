//! Namespaces (fixtures `lifecycle/namespace-*`, `defaulting/namespace.json`,
//! `errors/create-in-terminating-namespace-403.json`).

use serde_json::json;

use super::common::{configmap, configmaps, create, get_ok, setup};
use crate::support::namespace::random_suffix;
use crate::support::raw;

#[tokio::test]
async fn a_new_namespace_is_active_with_the_kubernetes_finalizer_and_name_label() {
    // Fixtures defaulting/namespace.json and get-namespace-after-create.json.
    let (_cluster, client, _ns) = setup("ns-create").await;
    let name = format!("ns-fresh-{}", random_suffix(5));
    let created = create(
        &client,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": name}}),
    )
    .await;
    assert_eq!(created["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(created["status"]["phase"], "Active");
    assert_eq!(
        created["metadata"]["labels"]["kubernetes.io/metadata.name"],
        name.as_str()
    );
    assert!(created["metadata"].get("generation").is_none());
}

#[tokio::test]
async fn deleting_a_namespace_marks_it_terminating_and_finalize_removes_it() {
    // Fixtures lifecycle/namespace-delete.json, -get-after-delete.json, -finalize-empty.json,
    // -get-after-finalize.json, namespace-content-after-finalize.json (Surprise 20).
    let (_cluster, client, _ns) = setup("ns-delete").await;
    let name = format!("ns-doomed-{}", random_suffix(5));
    create(
        &client,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": name}}),
    )
    .await;
    create(
        &client,
        &configmaps(&name),
        &configmap("leftover", json!({"k": "v"})),
    )
    .await;
    let path = format!("/api/v1/namespaces/{name}");

    let marked = raw::delete(&client, &path, None).await.expect_ok(200);
    assert_eq!(marked["kind"], "Namespace");
    assert_eq!(marked["status"]["phase"], "Terminating");
    assert_eq!(marked["spec"]["finalizers"], json!(["kubernetes"]));
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    let again = raw::delete(&client, &path, None).await.expect_ok(200);
    assert_eq!(
        again["status"]["phase"], "Terminating",
        "a second DELETE keeps it while spec.finalizers remain"
    );
    assert_eq!(
        get_ok(&client, &path).await["status"]["phase"],
        "Terminating"
    );

    // Creating in a Terminating namespace is forbidden (Surprise 9).
    let status = raw::post(&client, &configmaps(&name), &configmap("x", json!({})))
        .await
        .expect_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        format!(
            "configmaps \"x\" is forbidden: unable to create new content in namespace {name} because it is being terminated"
        )
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "NamespaceTerminating"
    );
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "metadata.namespace"
    );

    let mut finalize = marked.clone();
    finalize["spec"]["finalizers"] = json!([]);
    let finalized = raw::put(&client, &format!("{path}/finalize"), &finalize)
        .await
        .expect_ok(200);
    assert_eq!(finalized["spec"], json!({}), "{finalized}");
    let status = raw::get(&client, &path)
        .await
        .expect_status(404, "NotFound");
    assert_eq!(
        status["message"],
        format!("namespaces \"{name}\" not found")
    );
    // Without a namespace controller, the content is orphaned, not deleted.
    assert_eq!(
        get_ok(&client, &format!("{}/leftover", configmaps(&name))).await["data"]["k"],
        "v"
    );
}

#[tokio::test]
async fn a_namespace_with_empty_finalizers_still_needs_a_second_delete() {
    // Fixtures lifecycle/namespace-finalize-active.json, namespace-delete-after-finalize-cleared.json,
    // namespace-second-delete-finalizers-empty.json, namespace-get-after-second-delete.json.
    let (_cluster, client, _ns) = setup("ns-empty").await;
    let name = format!("ns-active-{}", random_suffix(5));
    let created = create(
        &client,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": name}}),
    )
    .await;
    let path = format!("/api/v1/namespaces/{name}");
    let mut finalize = created.clone();
    finalize["spec"]["finalizers"] = json!([]);
    let active = raw::put(&client, &format!("{path}/finalize"), &finalize)
        .await
        .expect_ok(200);
    assert_eq!(
        active["status"]["phase"], "Active",
        "finalize on an Active namespace only edits spec"
    );
    assert_eq!(active["spec"], json!({}));
    let first = raw::delete(&client, &path, None).await.expect_ok(200);
    assert_eq!(
        first["status"]["phase"], "Terminating",
        "the first DELETE only marks"
    );
    get_ok(&client, &path).await;
    raw::delete(&client, &path, None).await.expect_ok(200);
    raw::get(&client, &path)
        .await
        .expect_status(404, "NotFound");
}

#[tokio::test]
async fn finalize_with_a_mismatched_name_is_400() {
    // Fixture lifecycle/namespace-finalize-wrong-name-400.json.
    let (_cluster, client, ns) = setup("ns-finwrong").await;
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}, "spec": {"finalizers": []}});
    let status = raw::put(&client, &format!("/api/v1/namespaces/{ns}/finalize"), &body)
        .await
        .expect_status(400, "BadRequest");
    assert_eq!(
        status["message"],
        format!("the name of the object (other) does not match the name on the URL ({ns})")
    );
}

#[tokio::test]
async fn get_in_a_missing_namespace_is_404_for_the_object() {
    // Fixture errors/get-in-missing-namespace-404.json.
    let (_cluster, client, _ns) = setup("ns-get404").await;
    let status = raw::get(&client, &format!("{}/x", configmaps("nonexistent-ns")))
        .await
        .expect_status(404, "NotFound");
    assert_eq!(status["message"], "configmaps \"x\" not found");
}
