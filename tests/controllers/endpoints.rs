//! The `endpoint` controller on simulated nodes, against what kube-controller-manager v1.32 writes
//! (`kube-fixtures/kcm-v1.32/endpoints/` 00..17, 26): a Service's Endpoints exist at once with only
//! the trigger-time annotation (02), list its pods once they have IPs with ports in upstream's hash
//! order (08, 10), move a pod that turns unready to `notReadyAddresses` and back, split into three
//! subsets when a named port resolves differently on one pod (17), drop a deleted pod (12), list an
//! unready pod as ready under `publishNotReadyAddresses`, carry a headless Service's hostnames and
//! label, and go with their Service; a Service without a selector gets none (19).
//!
//! On devcluster the test plays the kubelet to turn a pod unready; on a real cluster
//! (`FLOTILLA_TEST_KUBECONFIG`) those steps are skipped.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(20);

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn web_service() -> Service {
    object(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "labels": {"tier": "front"}},
        "spec": {"selector": {"app": "web"}, "ports": [
            {"name": "http", "port": 80, "targetPort": "http"},
            {"name": "metrics", "port": 9090, "targetPort": 9090}]},
    }))
}

fn web_pod(name: &str, http: i32) -> Pod {
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10", "ports": [
            {"name": "http", "containerPort": http}, {"name": "metrics", "containerPort": 9090}]}]},
    }))
}

/// Each subset as (ready pod names, not-ready pod names, "name:port" list), in the written order.
type Shape = Vec<(Vec<String>, Vec<String>, Vec<String>)>;

fn shape(e: &Endpoints) -> Shape {
    let names = |list: &Option<Vec<k8s_openapi::api::core::v1::EndpointAddress>>| {
        let mut names: Vec<String> = list
            .iter()
            .flatten()
            .map(|a| {
                let r = a.target_ref.as_ref().unwrap();
                assert_eq!(r.kind.as_deref(), Some("Pod"));
                assert!(r.uid.is_some() && a.node_name.is_some(), "{a:?}");
                r.name.clone().unwrap()
            })
            .collect();
        // Written in IP order; compared by name here.
        names.sort();
        names
    };
    e.subsets
        .iter()
        .flatten()
        .map(|s| {
            let ports = s
                .ports
                .iter()
                .flatten()
                .map(|p| format!("{}:{}", p.name.clone().unwrap_or_default(), p.port))
                .collect();
            (names(&s.addresses), names(&s.not_ready_addresses), ports)
        })
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// Waits until Endpoints `name` has the subsets `want`.
async fn settled(api: &Api<Endpoints>, name: &str, want: Shape, what: &str) -> Endpoints {
    let what = format!("{what}: subsets {want:?}");
    wait_for(CONVERGE, &what, || async {
        let e = api.get_opt(name).await.ok()??;
        (shape(&e) == want).then_some(e)
    })
    .await
}

/// Sets the pod's Ready condition (the kubelet's part, played by the test).
async fn set_ready(pods: &Api<Pod>, name: &str, ready: bool) {
    let value = if ready { "True" } else { "False" };
    // Second precision, as the API server keeps it. A transition in the same second as the pod's
    // last one would not be a change to the trigger-time tracker (upstream compares the same way),
    // so the new one waits for the next second: the clock is what is awaited here, at most 1 s.
    let last = pods
        .get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time)
        .map(|t| t.0.as_second());
    if let Some(last) = last {
        let now = k8s_openapi::jiff::Timestamp::now();
        let next = k8s_openapi::jiff::Timestamp::from_second(last + 1).unwrap();
        if let Ok(wait) = std::time::Duration::try_from(next.duration_since(now)) {
            tokio::time::sleep(wait).await;
        }
    }
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let at = k8s_openapi::jiff::Timestamp::from_second(now)
        .unwrap()
        .to_string();
    let patch = json!({"status": {"conditions": [
        {"type": "Ready", "status": value, "lastTransitionTime": at},
        {"type": "ContainersReady", "status": value, "lastTransitionTime": at}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn endpoints_follow_pods_readiness_named_ports_deletion_and_headless_hostnames() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "endpoint", 2).await;
    let ns = unique_namespace(&client, "endpoints").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();

    // A Service without a selector: nothing for this controller (fixture 19), checked at the end.
    let manual: Service = object(json!({"metadata": {"name": "manual"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}));
    services.create(&pp, &manual).await.unwrap();

    // 02: the Endpoints exists at once, without subsets, with the trigger time and the labels.
    let svc = services.create(&pp, &web_service()).await.unwrap();
    let created = settled(&endpoints, "web", Vec::new(), "web's empty Endpoints").await;
    let annotations = created.metadata.annotations.clone().unwrap_or_default();
    let created_at = svc.metadata.creation_timestamp.unwrap().0.to_string();
    assert_eq!(
        annotations.get("endpoints.kubernetes.io/last-change-trigger-time"),
        Some(&created_at),
        "the first sync reports the Service's creation (fixture 02)"
    );
    assert_eq!(
        created
            .metadata
            .labels
            .unwrap_or_default()
            .get("tier")
            .map(String::as_str),
        Some("front"),
        "the Service's labels"
    );
    assert!(created.metadata.owner_references.is_none());

    // 08/10: two pods, both Ready; ports in upstream's order (metrics before http).
    for name in ["web-1", "web-2"] {
        pods.create(&pp, &web_pod(name, 8080)).await.unwrap();
    }
    let both = vec![(
        strings(&["web-1", "web-2"]),
        Vec::new(),
        strings(&["metrics:9090", "http:8080"]),
    )];
    settled(&endpoints, "web", both.clone(), "two ready pods").await;

    let published: Service = object(json!({"metadata": {"name": "published"},
        "spec": {"selector": {"app": "web"}, "publishNotReadyAddresses": true,
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}));
    services.create(&pp, &published).await.unwrap();
    let published_all = vec![(
        strings(&["web-1", "web-2"]),
        Vec::new(),
        strings(&["http:8080"]),
    )];
    settled(
        &endpoints,
        "published",
        published_all.clone(),
        "published Service",
    )
    .await;

    if cluster.is_devcluster() {
        // 08: an unready pod moves to notReadyAddresses, and back once Ready; a Service publishing
        // not-ready addresses keeps it ready.
        set_ready(&pods, "web-2", false).await;
        let one_unready = vec![(
            strings(&["web-1"]),
            strings(&["web-2"]),
            strings(&["metrics:9090", "http:8080"]),
        )];
        let unready = settled(&endpoints, "web", one_unready, "web-2 not ready").await;
        let pod = pods.get("web-2").await.unwrap();
        let ready_at = pod
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time)
            .map(|t| t.0.to_string());
        assert_eq!(
            unready
                .metadata
                .annotations
                .unwrap_or_default()
                .get("endpoints.kubernetes.io/last-change-trigger-time"),
            ready_at.as_ref(),
            "the trigger time is the pod's Ready transition"
        );
        settled(
            &endpoints,
            "published",
            published_all.clone(),
            "published keeps web-2",
        )
        .await;
        set_ready(&pods, "web-2", true).await;
        settled(&endpoints, "web", both.clone(), "web-2 ready again").await;
    }

    // 17: web-alt's port "http" is 8081: three subsets.
    pods.create(&pp, &web_pod("web-alt", 8081)).await.unwrap();
    let split = vec![
        (
            strings(&["web-1", "web-2", "web-alt"]),
            Vec::new(),
            strings(&["metrics:9090"]),
        ),
        (strings(&["web-alt"]), Vec::new(), strings(&["http:8081"])),
        (
            strings(&["web-1", "web-2"]),
            Vec::new(),
            strings(&["http:8080"]),
        ),
    ];
    let mut split_sorted = split.clone();
    split_sorted.sort();
    let what = "web-alt in a subset of its own for http";
    wait_for(CONVERGE, what, || async {
        let e = endpoints.get("web").await.ok()?;
        // The order of the subsets depends on the pods' uids (upstream sorts by hash).
        let mut got = shape(&e);
        got.sort();
        (got == split_sorted).then_some(())
    })
    .await;

    // 12/14: a deleted pod is dropped.
    pods.delete("web-1", &DeleteParams::default())
        .await
        .unwrap();
    let without_1 = vec![
        (
            strings(&["web-2", "web-alt"]),
            Vec::new(),
            strings(&["metrics:9090"]),
        ),
        (strings(&["web-alt"]), Vec::new(), strings(&["http:8081"])),
        (strings(&["web-2"]), Vec::new(), strings(&["http:8080"])),
    ];
    let mut without_1_sorted = without_1;
    without_1_sorted.sort();
    wait_for(CONVERGE, "web-1 dropped", || async {
        let e = endpoints.get("web").await.ok()?;
        let mut got = shape(&e);
        got.sort();
        (got == without_1_sorted).then_some(())
    })
    .await;

    // A headless Service without ports: addresses only, the pod's hostname, the headless label.
    let db: Service = object(json!({"metadata": {"name": "db"},
        "spec": {"clusterIP": "None", "selector": {"app": "db"}}}));
    services.create(&pp, &db).await.unwrap();
    let db_pod: Pod = object(
        json!({"metadata": {"name": "db-0", "labels": {"app": "db"}},
        "spec": {"hostname": "db-0", "subdomain": "db",
            "containers": [{"name": "db", "image": "registry.k8s.io/pause:3.10"}]}}),
    );
    pods.create(&pp, &db_pod).await.unwrap();
    let headless = settled(
        &endpoints,
        "db",
        vec![(strings(&["db-0"]), Vec::new(), Vec::new())],
        "the headless Service's pod",
    )
    .await;
    let address = &headless.subsets.unwrap()[0].addresses.clone().unwrap()[0];
    assert_eq!(address.hostname.as_deref(), Some("db-0"));
    assert_eq!(
        headless
            .metadata
            .labels
            .unwrap_or_default()
            .get("service.kubernetes.io/headless")
            .map(String::as_str),
        Some("")
    );

    // The Endpoints go with their Service.
    services
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(CONVERGE, "db's Endpoints deleted", || async {
        endpoints.get_opt("db").await.ok()?.is_none().then_some(())
    })
    .await;

    // 19: everything above converged, and the selector-less Service never got Endpoints.
    assert!(endpoints.get_opt("manual").await.unwrap().is_none());
}
