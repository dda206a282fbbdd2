//! The example custom controller on the fleet: Greetings get their ConfigMap and observedGeneration, an
//! update flows through, and a deleted ConfigMap comes back.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, binary};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
}

async fn converged(
    greetings: &Api<DynamicObject>,
    configmaps: &Api<ConfigMap>,
    name: &str,
    message: &str,
) -> Option<()> {
    let g = greetings.get(name).await.ok()?;
    let observed = g
        .data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    let cm = configmaps.get(&format!("{name}-greeting")).await.ok()?;
    let owned =
        cm.metadata.owner_references.iter().flatten().any(|o| {
            o.uid == g.metadata.uid.clone().unwrap_or_default() && o.controller == Some(true)
        });
    let right = cm.data.as_ref()?.get("message").map(String::as_str) == Some(message);
    (owned && right && observed == g.metadata.generation).then_some(())
}

#[tokio::test(flavor = "multi_thread")]
async fn greetings_get_their_configmap_and_status_from_the_example_controller_on_the_fleet() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let crd: Value =
        serde_saphyr::from_str(include_str!("../../examples/greeting/crd.yaml")).unwrap();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    match crds
        .create(
            &PostParams::default(),
            &serde_json::from_value(crd).unwrap(),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {} // an external cluster may have it already
        Err(e) => panic!("cannot create the Greeting CRD: {e}"),
    }
    let ns = unique_namespace(&client, "greeting").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let c0 = fleet.coordinator("c0", &[]);
    let w: Vec<_> = (0..2)
        .map(|i| fleet.worker("greeting-controller", &format!("g{i}"), &[]))
        .collect();
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;

    let greetings: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("example.flotilla.dev", "Greeting", "greetings"),
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let greeting = json!({"apiVersion": "example.flotilla.dev/v1", "kind": "Greeting", "metadata": {"name": "hi"}, "spec": {"message": "hello"}});
    wait_for(
        Duration::from_secs(15),
        "the Greeting CRD to be served",
        || async {
            greetings
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(greeting.clone()).unwrap(),
                )
                .await
                .ok()
        },
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "hi-greeting with message hello",
        || converged(&greetings, &configmaps, "hi", "hello"),
    )
    .await;

    greetings
        .patch(
            "hi",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"message": "bonjour"}})),
        )
        .await
        .unwrap();
    wait_for(
        Duration::from_secs(30),
        "hi-greeting updated to bonjour",
        || converged(&greetings, &configmaps, "hi", "bonjour"),
    )
    .await;

    configmaps
        .delete("hi-greeting", &Default::default())
        .await
        .unwrap();
    wait_for(
        Duration::from_secs(30),
        "hi-greeting recreated after its deletion",
        || converged(&greetings, &configmaps, "hi", "bonjour"),
    )
    .await;

    // Operators' view: `flotilla status -o json` with the field names scripts rely on, and the probes.
    let output = std::process::Command::new(binary("flotilla"))
        .args([
            "status",
            "--insecure-plaintext",
            "-o",
            "json",
            "--fleet",
            &fleet.name,
            "--etcd-endpoints",
            &fleet.etcd_endpoints.join(","),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "flotilla status failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["leader"]["id"], "c0");
    assert!(
        status["leader"]["address"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:"))
    );
    assert!(status["leader"]["term"].as_u64().is_some_and(|t| t > 0));
    let shards: u64 = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["shards"].as_u64().unwrap())
        .sum();
    assert_eq!(shards, 256, "{status}");
    let mut ids: Vec<&str> = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["g0", "g1"]);
    let queue = status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["controller"] == "greeting")
        .expect("greeting queue");
    assert!(queue["depth"].as_u64().is_some());
    for process in std::iter::once(&c0).chain(&w) {
        assert_eq!(
            process.http_status("/readyz").await,
            200,
            "{} not ready",
            process.name
        );
        assert_eq!(
            process.http_status("/healthz").await,
            200,
            "{} not healthy",
            process.name
        );
    }
}
