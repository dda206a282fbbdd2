//! The `namespace` controller: a deleted namespace stays Terminating with the `kubernetes` finalizer
//! while content remains, reports what holds it in its conditions, and is removed once its content is
//! gone — every kind, custom resources included.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::{random_suffix, unique_namespace};
use crate::support::raw;
use crate::support::wait::wait_for;
use crate::support::watch::{RawWatch, event_type};

/// The finalizer the test puts on some objects and removes later.
const HOLD: &str = "test.flotilla.dev/hold";
/// How long a deletion step may take: discovery plus a few requests per resource, at the worker's
/// default `--kube-api-qps`, plus upstream's requeue estimate.
const STEP: Duration = Duration::from_secs(90);

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// A namespaced `Greeting` CRD in a fresh group, so tests never share one.
async fn greeting_crd(client: &kube::Client) -> (ApiResource, String) {
    let group = format!("g{}.nstest.flotilla.dev", random_suffix(5));
    let name = format!("greetings.{group}");
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "greetings", "singular": "greeting", "kind": "Greeting", "listKind": "GreetingList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"message": {"type": "string"}}},
                }}},
            }],
        },
    });
    raw::post(client, CRDS, &crd).await.expect_ok(201);
    wait_for(STEP, &format!("CRD {name} to be Established"), || async {
        let crd = raw::get(client, &format!("{CRDS}/{name}")).await.json();
        let conditions = crd["status"]["conditions"].as_array().cloned()?;
        conditions
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
            .then_some(())
    })
    .await;
    let resource = ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Greeting".into(),
        plural: "greetings".into(),
    };
    (resource, name)
}

/// Creates `count` objects of `T` named `{prefix}-{i}` from `body(i)`; the first `held` carry [`HOLD`].
async fn create_many<T>(
    api: &Api<T>,
    prefix: &str,
    count: usize,
    held: usize,
    body: impl Fn(usize) -> Value,
) where
    T: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    for i in 0..count {
        let mut value = body(i);
        value["metadata"]["name"] = json!(format!("{prefix}-{i}"));
        if i < held {
            value["metadata"]["finalizers"] = json!([HOLD]);
        }
        let object: T = serde_json::from_value(value).unwrap();
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|err| panic!("cannot create {prefix}-{i}: {err}"));
    }
}

async fn names<T>(api: &Api<T>) -> Vec<String>
where
    T: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let list = api.list(&ListParams::default()).await.unwrap();
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    names.sort();
    names
}

fn condition<'a>(namespace: &'a Value, condition_type: &str) -> Option<&'a Value> {
    namespace["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == condition_type)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_namespace_loses_all_its_content_reports_what_holds_it_and_then_goes_away() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let c0 = fleet.coordinator("c0", &[]);
    let _w0 = fleet.worker("flotilla", "w0", &["worker", "--controllers", "namespace"]);
    let _w1 = fleet.worker("flotilla", "w1", &["worker", "--controllers", "namespace"]);
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;

    let (greeting, crd_name) = greeting_crd(&client).await;
    let ns = unique_namespace(&client, "nsdel").await;

    // 50 objects of 7 kinds; 2 ConfigMaps and 1 Greeting are held by a finalizer.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let greetings: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &greeting);
    create_many(
        &configmaps,
        "cm",
        10,
        2,
        |i| json!({"metadata": {}, "data": {"i": i.to_string()}}),
    )
    .await;
    create_many(
        &secrets,
        "secret",
        10,
        0,
        |_| json!({"metadata": {}, "stringData": {"k": "v"}}),
    )
    .await;
    create_many(
        &services,
        "svc",
        8,
        0,
        |_| json!({"metadata": {}, "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}}),
    )
    .await;
    create_many(&accounts, "sa", 8, 0, |_| json!({"metadata": {}})).await;
    create_many(&pods, "pod", 8, 0, |_| {
        json!({"metadata": {}, "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}})
    })
    .await;
    create_many(&replicasets, "rs", 1, 0, |_| {
        json!({"metadata": {}, "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "rs"}},
            "template": {"metadata": {"labels": {"app": "rs"}},
                         "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}},
        }})
    })
    .await;
    create_many(&greetings, "greeting", 5, 1, |_| {
        json!({"apiVersion": greeting.api_version, "kind": "Greeting", "metadata": {}, "spec": {"message": "hi"}})
    })
    .await;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let before = namespaces.get(&ns).await.unwrap();
    let mut watch = RawWatch::open(
        &client,
        &format!(
            "/api/v1/namespaces?watch=true&fieldSelector=metadata.name%3D{ns}&resourceVersion={}",
            before.metadata.resource_version.clone().unwrap()
        ),
    )
    .await;
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();

    // Like kube-apiserver: the namespace stays, Terminating, until the `kubernetes` finalizer goes.
    let terminating = raw::get(&client, &format!("/api/v1/namespaces/{ns}"))
        .await
        .expect_ok(200);
    assert!(
        terminating["metadata"]["deletionTimestamp"].is_string(),
        "{terminating}"
    );
    assert_eq!(terminating["status"]["phase"], "Terminating");
    assert!(
        terminating["spec"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("kubernetes"))),
        "{terminating}"
    );

    // The controller deletes what it can and reports what holds the rest.
    // Pods terminate gracefully first (upstream's estimate), so earlier reports may name them too.
    let greetings_name = format!("greetings.{}", greeting.group);
    let only_held = format!(
        "Some resources are remaining: configmaps. has 2 resource instances, {greetings_name} has 1 resource instances"
    );
    let held = watch
        .next_matching(
            STEP,
            "conditions naming only the content held by finalizers",
            |event| {
                condition(&event["object"], "NamespaceContentRemaining")
                    .is_some_and(|c| c["status"] == "True" && c["message"] == only_held.as_str())
            },
        )
        .await;
    let object = &held["object"];
    let remaining = condition(object, "NamespaceContentRemaining").unwrap();
    assert_eq!(remaining["reason"], "SomeResourcesRemain");
    let finalizers = condition(object, "NamespaceFinalizersRemaining").unwrap();
    assert_eq!(finalizers["reason"], "SomeFinalizersRemain");
    assert_eq!(
        finalizers["message"],
        format!(
            "Some content in the namespace has finalizers remaining: {HOLD} in 3 resource instances"
        )
    );
    for (condition_type, reason) in [
        ("NamespaceDeletionDiscoveryFailure", "ResourcesDiscovered"),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            "ParsedGroupVersions",
        ),
        ("NamespaceDeletionContentFailure", "ContentDeleted"),
    ] {
        let c = condition(object, condition_type)
            .unwrap_or_else(|| panic!("no {condition_type} in {object}"));
        assert_eq!(c["status"], "False", "{c}");
        assert_eq!(c["reason"], reason, "{c}");
    }
    assert_eq!(object["spec"]["finalizers"], json!(["kubernetes"]));

    // Everything without a finalizer is gone (pods after their graceful termination on the nodes).
    assert_eq!(names(&secrets).await, Vec::<String>::new());
    assert_eq!(names(&services).await, Vec::<String>::new());
    assert_eq!(names(&accounts).await, Vec::<String>::new());
    assert_eq!(names(&replicasets).await, Vec::<String>::new());
    assert_eq!(names(&configmaps).await, ["cm-0", "cm-1"]);
    assert_eq!(names(&greetings).await, ["greeting-0"]);
    wait_for(
        STEP,
        "the namespace's pods to finish terminating",
        || async { names(&pods).await.is_empty().then_some(()) },
    )
    .await;

    // Releasing the finalizers lets the namespace finish.
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for name in ["cm-0", "cm-1"] {
        configmaps
            .patch(name, &PatchParams::default(), &release)
            .await
            .unwrap();
    }
    greetings
        .patch("greeting-0", &PatchParams::default(), &release)
        .await
        .unwrap();
    watch
        .next_matching(STEP, "the namespace to be deleted", |event| {
            event_type(event) == "DELETED"
        })
        .await;
    assert!(namespaces.get_opt(&ns).await.unwrap().is_none());

    // Nothing of it remains.
    assert!(names(&configmaps).await.is_empty());
    assert!(names(&secrets).await.is_empty());
    assert!(names(&services).await.is_empty());
    assert!(names(&accounts).await.is_empty());
    assert!(names(&pods).await.is_empty());
    assert!(names(&replicasets).await.is_empty());
    assert!(names(&greetings).await.is_empty());

    // Regression: deletes of kinds the worker did not declare were reported with a nameless kind, the
    // coordinator refused those Done messages and kept the namespace's key held.
    let log = c0.log_text();
    assert!(!log.contains("unreadable Done"), "coordinator log:\n{log}");

    raw::delete(&client, &format!("{CRDS}/{crd_name}"), None).await;
}
