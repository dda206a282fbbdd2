//! CustomResourceDefinitions (fixtures `crd/*`): creating one serves its resource, deleting it
//! stops serving it.

use std::time::Duration;

use serde_json::{Value, json};

use super::common::{SOON, create, get_ok, setup};
use crate::support::namespace::random_suffix;
use crate::support::raw;
use crate::support::wait::wait_for;

/// The CRD collection.
pub(super) const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// A CRD for `greetings` (namespaced, status subresource) or `widgets` (cluster-scoped, no
/// subresources) in a fresh group, so tests never share a CRD even on one cluster.
pub(super) fn crd(group: &str, plural: &str, kind: &str, scope: &str, status: bool) -> Value {
    let mut version = json!({
        "name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"message": {"type": "string"}}},
            "status": {"type": "object", "properties": {"observed": {"type": "string"}, "ready": {"type": "boolean"}}},
        }}},
    });
    if status {
        version["subresources"] = json!({"status": {}});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group, "scope": scope,
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "versions": [version],
        },
    })
}

/// Waits until the CRD `name` is Established.
pub(super) async fn established(client: &kube::Client, name: &str) {
    let path = format!("{CRDS}/{name}");
    wait_for(SOON, &format!("CRD {name} to be Established"), || async {
        let crd = get_ok(client, &path).await;
        let conditions = crd["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conditions
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_namespaced_crd_with_status_is_served_until_it_is_deleted() {
    let (_cluster, client, ns) = setup("crd-ns").await;
    let group = format!("g{}.crdtest.flotilla.dev", random_suffix(5));
    let name = format!("greetings.{group}");
    let created = create(
        &client,
        CRDS,
        &crd(&group, "greetings", "Greeting", "Namespaced", true),
    )
    .await;
    assert_eq!(created["kind"], "CustomResourceDefinition");
    established(&client, &name).await;
    let crd_now = get_ok(&client, &format!("{CRDS}/{name}")).await;
    assert_eq!(crd_now["status"]["acceptedNames"]["kind"], "Greeting");
    assert_eq!(crd_now["status"]["storedVersions"], json!(["v1"]));

    // Discovery serves the new group (fixtures crd/04, 05, 06b).
    let resources = get_ok(&client, &format!("/apis/{group}/v1")).await;
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"greetings") && names.contains(&"greetings/status"),
        "{names:?}"
    );
    let group_doc = get_ok(&client, &format!("/apis/{group}")).await;
    assert_eq!(group_doc["preferredVersion"]["version"], "v1");
    let groups = get_ok(&client, "/apis").await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == group.as_str())
    );

    // Create drops status when the status subresource is on (fixture crd/07-create-cr.json).
    let collection = format!("/apis/{group}/v1/namespaces/{ns}/greetings");
    let body = json!({"apiVersion": format!("{group}/v1"), "kind": "Greeting", "metadata": {"name": "hello"},
                      "spec": {"message": "hi"}, "status": {"observed": "ignored-on-create"}});
    let cr = create(&client, &collection, &body).await;
    assert_eq!(cr["metadata"]["generation"], 1);
    assert_eq!(cr["spec"]["message"], "hi");
    assert!(
        cr.get("status").is_none(),
        "status is dropped on create: {cr}"
    );

    // Status only through /status; the main resource ignores status (fixtures crd/09, 11).
    let item = format!("{collection}/hello");
    let mut with_status = cr.clone();
    with_status["status"] = json!({"observed": "yes", "ready": true});
    let after_status = raw::put(&client, &format!("{item}/status"), &with_status)
        .await
        .expect_ok(200);
    assert_eq!(after_status["status"]["ready"], true);
    assert_eq!(after_status["metadata"]["generation"], 1);
    let mut main = after_status.clone();
    main["spec"]["message"] = json!("hello again");
    main["status"]["ready"] = json!(false);
    let after_main = raw::put(&client, &item, &main).await.expect_ok(200);
    assert_eq!(
        after_main["status"]["ready"], true,
        "PUT on the main resource ignores status"
    );
    assert_eq!(
        after_main["metadata"]["generation"], 2,
        "spec change bumps generation"
    );
    let list = get_ok(&client, &collection).await;
    assert_eq!(list["kind"], "GreetingList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    // Deleting the CRD stops serving it (fixtures crd/13-17).
    let deleted = raw::delete(&client, &format!("{CRDS}/{name}"), None).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    wait_for(SOON, "the CRD's resource to stop being served", || async {
        let reply = raw::get(&client, &item).await;
        (reply.status == 404 && reply.text == "404 page not found\n").then_some(())
    })
    .await;
    let discovery = raw::get(&client, &format!("/apis/{group}/v1")).await;
    assert_eq!(discovery.status, 404);
    wait_for(SOON, "the CRD object to be gone", || async {
        (raw::get(&client, &format!("{CRDS}/{name}")).await.status == 404).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_cluster_scoped_crd_without_status_keeps_status_in_the_main_resource() {
    let (_cluster, client, _ns) = setup("crd-cluster").await;
    let group = format!("g{}.crdtest.flotilla.dev", random_suffix(5));
    let name = format!("widgets.{group}");
    create(
        &client,
        CRDS,
        &crd(&group, "widgets", "Widget", "Cluster", false),
    )
    .await;
    established(&client, &name).await;
    let collection = format!("/apis/{group}/v1/widgets");
    let body = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w1"},
                      "spec": {"message": "m"}, "status": {"observed": "kept"}});
    let widget = create(&client, &collection, &body).await;
    assert!(widget["metadata"].get("namespace").is_none());
    assert_eq!(
        widget["status"]["observed"], "kept",
        "without the subresource, status is ordinary data"
    );
    get_ok(&client, &format!("{collection}/w1")).await;
    let status = raw::get(&client, &format!("{collection}/w1/status")).await;
    assert_eq!(status.status, 404, "no status subresource: {}", status.text);
    let namespaced = raw::get(
        &client,
        &format!("/apis/{group}/v1/namespaces/default/widgets"),
    )
    .await;
    assert_eq!(
        namespaced.status, 404,
        "cluster-scoped resources are not served under namespaces"
    );
}

#[tokio::test]
async fn kube_rs_dynamic_api_drives_a_custom_resource() {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let (_cluster, client, ns) = setup("crd-kube").await;
    let group = format!("g{}.crdtest.flotilla.dev", random_suffix(5));
    create(
        &client,
        CRDS,
        &crd(&group, "greetings", "Greeting", "Namespaced", true),
    )
    .await;
    established(&client, &format!("greetings.{group}")).await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Greeting"),
        "greetings",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resource);
    let mut object = DynamicObject::new("dyn", &resource);
    object.data = json!({"spec": {"message": "from kube-rs"}});
    api.create(&PostParams::default(), &object).await.unwrap();
    let fetched = tokio::time::timeout(Duration::from_secs(10), api.get("dyn"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fetched.data["spec"]["message"], "from kube-rs");
}
