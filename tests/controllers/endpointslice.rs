//! The `endpointslice` controller on simulated nodes, against what kube-controller-manager v1.32
//! wrote (`kube-fixtures/kcm-v1.32/endpoints/*b-endpointslices-*.json`, `27-watch-endpointslices.json`).
//!
//! A Service `web` (named target port `http`, plain 9090): with no pods one placeholder slice
//! `web-<random>` (no endpoints, no ports, KCM's labels, owner reference and trigger-time
//! annotation); three pods on three nodes fill that same slice with their addresses, conditions,
//! nodes, zones and targets; a pod turning unready and ready again is followed in place; a pod
//! being deleted (held by a finalizer) is `ready: false, serving: true, terminating: true`, and goes
//! once deleted; a pod resolving `http` to another port gets a second slice of its own.
//!
//! At scale: a Service over 2,000 pods gets slices of at most 100 endpoints, and one pod turning
//! unready rewrites exactly one slice (resourceVersions before and after, and the watch's events).
//!
//! The test plays the kubelet for readiness (a status patch of the Ready condition), as the
//! disruption tests do; pods are bound to the simulator's nodes, which give them IPs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::unique_namespace;
use crate::support::raw;
use crate::support::wait::wait_for;
use crate::support::watch::{RawWatch, event_name, event_type};

const CONVERGE: Duration = Duration::from_secs(30);
/// A test finalizer that keeps a deleted pod Terminating until the test lets it go.
const HOLD: &str = "flotilla.dev/test-hold";
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// A coordinator and one worker running the endpointslice controller (`extra` worker flags).
async fn fleet(cluster: &TestCluster, extra: &[&str]) -> (Fleet, Vec<Proc>) {
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let mut args = vec!["worker", "--controllers", "endpointslice"];
    args.extend_from_slice(extra);
    let procs = vec![
        fleet.coordinator("c0", &[]),
        fleet.worker("flotilla", "w0", &args),
    ];
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    (fleet, procs)
}

/// Fixture 01's Service: `http` 80 → named port `http`, `metrics` 9090 → 9090.
fn service() -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [
            {"name": "http", "port": 80, "targetPort": "http"},
            {"name": "metrics", "port": 9090, "targetPort": 9090}]}}))
    .unwrap()
}

/// A pod of `web` bound to `node`, its `http` port being `http_port`, optionally held by [`HOLD`].
fn pod(name: &str, node: &str, http_port: i32, held: bool) -> Pod {
    let finalizers: Vec<&str> = if held { vec![HOLD] } else { vec![] };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}, "finalizers": finalizers},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [{
            "name": "web", "image": "registry.k8s.io/pause:3.10",
            "ports": [{"name": "http", "containerPort": http_port}]}]}}))
    .unwrap()
}

/// Sets the pod's Ready condition (the kubelet's part, played by the test).
async fn set_ready(pods: &Api<Pod>, name: &str, ready: bool) {
    let value = if ready { "True" } else { "False" };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [
        {"type": "Ready", "status": value, "lastTransitionTime": now},
        {"type": "ContainersReady", "status": value, "lastTransitionTime": now}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// The slices of `web` the controller manages, by name.
async fn slices(api: &Api<EndpointSlice>, service: &str) -> BTreeMap<String, EndpointSlice> {
    let selector = format!(
        "kubernetes.io/service-name={service},endpointslice.kubernetes.io/managed-by={MANAGED_BY}"
    );
    api.list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| (s.metadata.name.clone().unwrap(), s))
        .collect()
}

/// `(pod, ready, serving, terminating)` of each endpoint of `slice`, by pod name.
fn conditions(slice: &EndpointSlice) -> BTreeMap<String, (bool, bool, bool)> {
    slice
        .endpoints
        .iter()
        .map(|e| {
            let c = e.conditions.clone().unwrap_or_default();
            let name = e.target_ref.as_ref().and_then(|t| t.name.clone()).unwrap();
            let flag = |b: Option<bool>| b.unwrap_or(false);
            (name, (flag(c.ready), flag(c.serving), flag(c.terminating)))
        })
        .collect()
}

/// `(name, port)` of the slice's ports.
fn ports(slice: &EndpointSlice) -> Vec<(String, i32)> {
    slice
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until `web` has exactly one slice whose endpoints' conditions are `want`; returns it.
async fn one_slice_with(
    api: &Api<EndpointSlice>,
    want: &[(&str, (bool, bool, bool))],
    what: &str,
) -> EndpointSlice {
    let want: BTreeMap<String, (bool, bool, bool)> =
        want.iter().map(|(n, c)| (n.to_string(), *c)).collect();
    wait_for(CONVERGE, what, || async {
        let all = slices(api, "web").await;
        let only = all.into_values().collect::<Vec<_>>();
        (only.len() == 1 && conditions(&only[0]) == want).then(|| only[0].clone())
    })
    .await
}

const READY: (bool, bool, bool) = (true, true, false);
const UNREADY: (bool, bool, bool) = (false, false, false);
const TERMINATING: (bool, bool, bool) = (false, true, true);

#[tokio::test(flavor = "multi_thread")]
async fn slices_follow_pods_as_kube_controller_manager_writes_them() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, &[]).await;
    let ns = unique_namespace(&client, "eps").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let svc = services
        .create(&PostParams::default(), &service())
        .await
        .unwrap();

    // 02b: the placeholder.
    let placeholder = one_slice_with(&api, &[], "the placeholder slice").await;
    let raw: Value = serde_json::to_value(&placeholder).unwrap();
    let meta = &raw["metadata"];
    assert_eq!(meta["generateName"], "web-");
    assert!(meta["name"].as_str().unwrap().starts_with("web-"));
    assert_eq!(
        meta["labels"],
        json!({"endpointslice.kubernetes.io/managed-by": MANAGED_BY, "kubernetes.io/service-name": "web"})
    );
    assert_eq!(
        meta["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Service", "name": "web",
                "uid": svc.metadata.uid.clone().unwrap(), "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(
        meta["annotations"]["endpoints.kubernetes.io/last-change-trigger-time"],
        json!(
            svc.metadata
                .creation_timestamp
                .as_ref()
                .unwrap()
                .0
                .to_string()
        ),
        "a new Service's slice carries its creation time"
    );
    assert_eq!(raw["addressType"], "IPv4");
    let name = placeholder.metadata.name.clone().unwrap();
    let stored = raw::get(
        &client,
        &format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/{name}"),
    )
    .await
    .expect_ok(200);
    assert_eq!(
        (&stored["endpoints"], &stored["ports"]),
        (&Value::Null, &Value::Null),
        "02b's placeholder has null endpoints and ports"
    );
    let placeholder_name = placeholder.metadata.name.clone().unwrap();

    // 08b/10b: three pods on three nodes fill the placeholder.
    for (i, name) in ["web-1", "web-2", "web-3"].iter().enumerate() {
        let node = format!("sim-node-{i}");
        pods.create(
            &PostParams::default(),
            &pod(name, &node, 8080, *name == "web-1"),
        )
        .await
        .unwrap();
    }
    let full = one_slice_with(
        &api,
        &[("web-1", READY), ("web-2", READY), ("web-3", READY)],
        "three ready endpoints",
    )
    .await;
    assert_eq!(
        full.metadata.name.as_deref(),
        Some(placeholder_name.as_str())
    );
    assert_eq!(
        ports(&full),
        [("http".to_string(), 8080), ("metrics".to_string(), 9090)]
    );
    for endpoint in &full.endpoints {
        let raw = serde_json::to_value(endpoint).unwrap();
        let target = &raw["targetRef"];
        let name = target["name"].as_str().unwrap();
        let live = pods.get(name).await.unwrap();
        let node = live.spec.as_ref().unwrap().node_name.clone().unwrap();
        let index: usize = node.trim_start_matches("sim-node-").parse().unwrap();
        assert_eq!(
            raw,
            json!({
                "addresses": [live.status.as_ref().unwrap().pod_ip.clone().unwrap()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "targetRef": {"kind": "Pod", "namespace": ns, "name": name,
                              "uid": live.metadata.uid.clone().unwrap()},
                "nodeName": node,
                "zone": format!("sim-zone-{}", index % 3),
            }),
            "{name}'s endpoint as fixture 08b's"
        );
    }

    // 08b → 10b: readiness followed in place.
    set_ready(&pods, "web-3", false).await;
    one_slice_with(
        &api,
        &[("web-1", READY), ("web-2", READY), ("web-3", UNREADY)],
        "web-3 unready",
    )
    .await;
    set_ready(&pods, "web-3", true).await;
    one_slice_with(
        &api,
        &[("web-1", READY), ("web-2", READY), ("web-3", READY)],
        "web-3 ready again",
    )
    .await;

    // 12b/14b: a terminating pod is serving but not ready, then goes.
    pods.delete("web-1", &DeleteParams::default())
        .await
        .unwrap();
    one_slice_with(
        &api,
        &[("web-1", TERMINATING), ("web-2", READY), ("web-3", READY)],
        "web-1 terminating",
    )
    .await;
    let release = json!({"metadata": {"finalizers": null}});
    pods.patch("web-1", &PatchParams::default(), &Patch::Merge(release))
        .await
        .unwrap();
    let two = one_slice_with(&api, &[("web-2", READY), ("web-3", READY)], "web-1 gone").await;
    assert_eq!(
        two.metadata.name.as_deref(),
        Some(placeholder_name.as_str())
    );

    // 17b: a pod resolving `http` to 8081 gets a slice of its own.
    pods.create(
        &PostParams::default(),
        &pod("web-alt", "sim-node-1", 8081, false),
    )
    .await
    .unwrap();
    let both = wait_for(CONVERGE, "a second slice for web-alt", || async {
        let all = slices(&api, "web").await;
        (all.len() == 2 && all.values().any(|s| conditions(s).contains_key("web-alt")))
            .then_some(all)
    })
    .await;
    let first = &both[&placeholder_name];
    assert_eq!(conditions(first).len(), 2);
    assert_eq!(ports(first)[0], ("http".to_string(), 8080));
    let alt = both
        .values()
        .find(|s| s.metadata.name.as_deref() != Some(&placeholder_name))
        .unwrap();
    assert_eq!(
        conditions(alt),
        BTreeMap::from([("web-alt".to_string(), READY)])
    );
    assert_eq!(
        ports(alt),
        [("http".to_string(), 8081), ("metrics".to_string(), 9090)]
    );
}

/// How many pods the scale scenario runs.
const MANY: usize = 2000;

#[tokio::test(flavor = "multi_thread")]
async fn one_pod_turning_unready_among_two_thousand_rewrites_exactly_one_slice() {
    let started = Instant::now();
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(
        &cluster,
        &["--kube-api-qps", "200", "--kube-api-burst", "400"],
    )
    .await;
    let ns = unique_namespace(&client, "eps-scale").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    services
        .create(&PostParams::default(), &service())
        .await
        .unwrap();
    futures::stream::iter(0..MANY)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let node = format!("sim-node-{}", i % 3);
                pods.create(
                    &PostParams::default(),
                    &pod(&format!("web-{i}"), &node, 8080, false),
                )
                .await
                .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let created = started.elapsed();

    let before = wait_for(
        Duration::from_secs(120),
        "2,000 ready endpoints",
        || async {
            let all = slices(&api, "web").await;
            let ready = all
                .values()
                .flat_map(|s| conditions(s).into_values())
                .filter(|c| *c == READY)
                .count();
            (ready == MANY).then_some(all)
        },
    )
    .await;
    let converged = started.elapsed();
    assert!(
        before.values().all(|s| s.endpoints.len() <= 100),
        "slices of at most 100: {:?}",
        before
            .values()
            .map(|s| s.endpoints.len())
            .collect::<Vec<_>>()
    );
    assert!(before.len() >= MANY / 100, "{} slices", before.len());
    let version = |s: &EndpointSlice| s.metadata.resource_version.clone().unwrap();

    // One flip: one slice rewritten, seen once on a watch.
    let list_rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watch = RawWatch::open(
        &client,
        &format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?watch=true&resourceVersion={list_rv}"),
    )
    .await;
    set_ready(&pods, "web-1234", false).await;
    let event = watch
        .next(CONVERGE, "the slice of web-1234 to change")
        .await;
    assert_eq!(event_type(&event), "MODIFIED");
    let changed_name = event_name(&event).to_string();
    // Flip back, so a second write shows up in order after any stray one of the first flip.
    set_ready(&pods, "web-1234", true).await;
    let event = watch
        .next(CONVERGE, "the slice of web-1234 to change back")
        .await;
    assert_eq!(
        (event_type(&event), event_name(&event)),
        ("MODIFIED", changed_name.as_str()),
        "the second write is the flip back, to the same slice: nothing else was written"
    );
    let after = slices(&api, "web").await;
    let rewritten: Vec<&String> = before
        .iter()
        .filter(|(name, s)| after.get(*name).map(version) != Some(version(s)))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(rewritten, [&changed_name], "exactly one slice rewritten");
    assert_eq!(after.len(), before.len());
    eprintln!(
        "{MANY} pods created in {created:?}, {} slices converged at {converged:?}, total {:?}",
        before.len(),
        started.elapsed()
    );
}
