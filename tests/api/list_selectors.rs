//! List with label and field selectors (fixtures `listwatch/list-*selector*`, `errors/list-invalid-*`).

use serde_json::{Value, json};

use super::common::{configmaps, create, get_ok, names, pod, pods, setup};
use crate::support::raw;

/// cm0 env=prod; cm1 env=staging,canary=true; cm2 env=dev; cm3 env=prod,tier=web; cm4 no labels —
/// the objects of the upstream recording.
async fn seed_configmaps(client: &kube::Client, ns: &str) {
    let labels: [Value; 5] = [
        json!({"env": "prod"}),
        json!({"env": "staging", "canary": "true"}),
        json!({"env": "dev"}),
        json!({"env": "prod", "tier": "web"}),
        json!(null),
    ];
    for (i, labels) in labels.into_iter().enumerate() {
        let body = json!({"metadata": {"name": format!("cm{i}"), "labels": labels}});
        create(client, &configmaps(ns), &body).await;
    }
}

async fn list_names(client: &kube::Client, path: &str) -> Vec<String> {
    names(&get_ok(client, path).await)
}

#[tokio::test]
async fn equality_and_inequality_label_selectors_match_like_upstream() {
    let (_cluster, client, ns) = setup("sel-eq").await;
    seed_configmaps(&client, &ns).await;
    let base = configmaps(&ns);
    assert_eq!(
        list_names(&client, &format!("{base}?labelSelector=env%3Dprod")).await,
        ["cm0", "cm3"]
    );
    assert_eq!(
        list_names(&client, &format!("{base}?labelSelector=env%3D%3Dprod")).await,
        ["cm0", "cm3"]
    );
    // != also matches objects without the key.
    assert_eq!(
        list_names(
            &client,
            &format!("{base}?labelSelector=env%3Dprod%2Ctier%21%3Dweb")
        )
        .await,
        ["cm0"]
    );
    assert_eq!(
        list_names(&client, &format!("{base}?labelSelector=env%21%3Dprod")).await,
        ["cm1", "cm2", "cm4"]
    );
}

#[tokio::test]
async fn set_based_label_selectors_match_like_upstream() {
    let (_cluster, client, ns) = setup("sel-set").await;
    seed_configmaps(&client, &ns).await;
    let base = configmaps(&ns);
    assert_eq!(
        list_names(
            &client,
            &format!("{base}?labelSelector=env+in+%28prod%2Cstaging%29%2C%21canary")
        )
        .await,
        ["cm0", "cm3"]
    );
    // notin also matches objects WITHOUT the key.
    assert_eq!(
        list_names(
            &client,
            &format!("{base}?labelSelector=env+notin+%28prod%29")
        )
        .await,
        ["cm1", "cm2", "cm4"]
    );
    assert_eq!(
        list_names(&client, &format!("{base}?labelSelector=tier")).await,
        ["cm3"]
    );
    assert_eq!(
        list_names(&client, &format!("{base}?labelSelector=%21env")).await,
        ["cm4"]
    );
}

#[tokio::test]
async fn metadata_name_and_namespace_field_selectors_filter() {
    let (_cluster, client, ns) = setup("sel-field").await;
    seed_configmaps(&client, &ns).await;
    let base = configmaps(&ns);
    assert_eq!(
        list_names(
            &client,
            &format!("{base}?fieldSelector=metadata.name%3Dcm2")
        )
        .await,
        ["cm2"]
    );
    assert_eq!(
        list_names(
            &client,
            &format!("{base}?fieldSelector=metadata.name%21%3Dcm2")
        )
        .await,
        ["cm0", "cm1", "cm3", "cm4"]
    );
    let cluster_wide = format!(
        "/api/v1/configmaps?fieldSelector=metadata.namespace%3D{ns}&labelSelector=env%3Dprod"
    );
    assert_eq!(list_names(&client, &cluster_wide).await, ["cm0", "cm3"]);
}

#[tokio::test]
async fn pod_field_selectors_on_node_name_and_phase_filter() {
    // Fixtures listwatch/list-fieldselector-spec-nodename*.json, -status-phase.json, -combined.json.
    let (_cluster, client, ns) = setup("sel-pods").await;
    for (name, node) in [
        ("p-node1", Some("node1")),
        ("p-node2", Some("node2")),
        ("p-unsched", None),
    ] {
        let mut body = pod(name);
        if let Some(node) = node {
            body["spec"]["nodeName"] = json!(node);
        }
        create(&client, &pods(&ns), &body).await;
    }
    let status = json!({"status": {"phase": "Running"}});
    let path = format!("{}/p-node1/status", pods(&ns));
    raw::patch(&client, &path, "application/merge-patch+json", &status)
        .await
        .expect_ok(200);
    let base = pods(&ns);
    assert_eq!(
        list_names(
            &client,
            &format!("{base}?fieldSelector=spec.nodeName%3Dnode1")
        )
        .await,
        ["p-node1"]
    );
    assert_eq!(
        list_names(&client, &format!("{base}?fieldSelector=spec.nodeName%3D")).await,
        ["p-unsched"]
    );
    assert_eq!(
        list_names(
            &client,
            &format!("{base}?fieldSelector=status.phase%3DPending")
        )
        .await,
        ["p-node2", "p-unsched"]
    );
    assert_eq!(
        list_names(
            &client,
            &format!("{base}?fieldSelector=status.phase%21%3DPending%2Cspec.nodeName%3Dnode1")
        )
        .await,
        ["p-node1"]
    );
}

/// What `kubectl describe` does to show an object's Events: select them by the involved object, as
/// upstream's event field set allows (and by `source`, `reason` and `type`).
#[tokio::test]
async fn event_field_selectors_pick_an_objects_events() {
    let (_cluster, client, ns) = setup("sel-events").await;
    let events = format!("/api/v1/namespaces/{ns}/events");
    for (name, kind, object, uid, reason, component) in [
        (
            "e-rs",
            "ReplicaSet",
            "web-1",
            "uid-rs",
            "SuccessfulCreate",
            "replicaset-controller",
        ),
        (
            "e-dep",
            "Deployment",
            "web",
            "uid-dep",
            "ScalingReplicaSet",
            "deployment-controller",
        ),
        (
            "e-other-rs",
            "ReplicaSet",
            "api-1",
            "uid-api",
            "SuccessfulCreate",
            "",
        ),
    ] {
        let mut body = json!({
            "metadata": {"name": name},
            "involvedObject": {
                "kind": kind, "namespace": ns, "name": object, "uid": uid, "apiVersion": "apps/v1",
            },
            "reason": reason,
            "message": "m",
            "type": "Normal",
            "reportingComponent": "reporter",
            "reportingInstance": "",
        });
        if !component.is_empty() {
            body["source"] = json!({"component": component});
        }
        create(&client, &events, &body).await;
    }
    let select = |selector: &str| {
        format!(
            "{events}?fieldSelector={}",
            selector.replace('=', "%3D").replace(',', "%2C")
        )
    };
    assert_eq!(
        list_names(
            &client,
            &select(&format!(
                "involvedObject.name=web-1,involvedObject.namespace={ns},involvedObject.kind=ReplicaSet,involvedObject.uid=uid-rs"
            ))
        )
        .await,
        ["e-rs"]
    );
    assert_eq!(
        list_names(&client, &select("involvedObject.kind=ReplicaSet")).await,
        ["e-other-rs", "e-rs"]
    );
    assert_eq!(
        list_names(&client, &select("source=deployment-controller")).await,
        ["e-dep"]
    );
    assert_eq!(
        list_names(&client, &select("source=reporter")).await,
        ["e-other-rs"],
        "without source.component, source is the reporting component"
    );
    assert_eq!(
        list_names(&client, &select("reason=SuccessfulCreate,type=Normal")).await,
        ["e-other-rs", "e-rs"]
    );
}

#[tokio::test]
async fn an_unparseable_label_selector_is_400_bad_request() {
    // Fixtures errors/list-invalid-labelselector-400.json and -value-400.json.
    let (_cluster, client, ns) = setup("sel-badlabel").await;
    let reply = raw::get(
        &client,
        &format!("{}?labelSelector=app+in+%28a%2Cb", configmaps(&ns)),
    )
    .await;
    let status = reply.expect_status(400, "BadRequest");
    assert_eq!(
        status["message"],
        "unable to parse requirement: found '', expected: ',' or ')'"
    );
    let reply = raw::get(
        &client,
        &format!("{}?labelSelector=app%3Dnot+valid%21", configmaps(&ns)),
    )
    .await;
    let status = reply.expect_status(400, "BadRequest");
    assert_eq!(
        status["message"],
        "found 'valid', expected: ',' or 'end of string'"
    );
}

#[tokio::test]
async fn an_unsupported_field_selector_is_400_bad_request() {
    // Fixture errors/list-invalid-fieldselector-400.json.
    let (_cluster, client, ns) = setup("sel-badfield").await;
    let reply = raw::get(
        &client,
        &format!("{}?fieldSelector=spec.bogus%3Dx", pods(&ns)),
    )
    .await;
    let status = reply.expect_status(400, "BadRequest");
    assert_eq!(status["message"], "field label not supported: spec.bogus");
}

#[tokio::test]
async fn listing_a_missing_namespace_is_an_empty_list_not_an_error() {
    // Fixture errors/list-in-missing-namespace-200.json.
    let (_cluster, client, _ns) = setup("sel-nons").await;
    let list = get_ok(&client, &configmaps("nonexistent-ns")).await;
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["items"], json!([]));
    assert!(
        list["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty())
    );
}

#[tokio::test]
async fn kube_rs_list_params_carry_selectors() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams};
    let (_cluster, client, ns) = setup("sel-kube").await;
    seed_configmaps(&client, &ns).await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let list = api
        .list(
            &ListParams::default()
                .labels("env in (prod,dev)")
                .fields("metadata.name!=cm0"),
        )
        .await
        .unwrap();
    let mut got: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .collect();
    got.sort();
    assert_eq!(got, ["cm2", "cm3"]);
}
