//! discovery.k8s.io/v1 EndpointSlice and core/v1 Endpoints validation (upstream
//! `pkg/apis/discovery/validation` and `ValidateEndpoints`): what the endpoint controllers write is
//! accepted; a bad address, a duplicate port name, a changed `addressType` or an Endpoints subset
//! without addresses is refused with upstream's causes.

use serde_json::{Value, json};

use super::common::{create, setup};
use crate::support::raw;

const MERGE: &str = "application/merge-patch+json";

fn slices(ns: &str) -> String {
    format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices")
}

fn endpoints(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/endpoints")
}

/// The `(field, message)` of each cause of a 422 Status.
fn causes(status: &Value) -> Vec<(String, String)> {
    status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn endpointslices_are_validated_as_kube_apiserver_does() {
    let (_cluster, client, ns) = setup("discovery-validation").await;
    let good = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abcde", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.1.14"], "conditions": {"ready": true},
                       "nodeName": "node-a", "zone": "zone-a"}],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    });
    create(&client, &slices(&ns), &good).await;

    let mut bad = good.clone();
    bad["metadata"]["name"] = json!("web-bad");
    bad["endpoints"] = json!([{"addresses": ["127.0.0.1"]}, {"addresses": []}]);
    bad["ports"] =
        json!([{"name": "http", "protocol": "TCP"}, {"name": "http", "protocol": "ICMP"}]);
    let status = raw::post(&client, &slices(&ns), &bad)
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        causes(&status),
        [
            (
                "endpoints[0].addresses[0]".to_string(),
                "Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)"
                    .to_string()
            ),
            (
                "endpoints[1].addresses".to_string(),
                "Required value: must contain at least 1 address".to_string()
            ),
            (
                "ports[1].name".to_string(),
                "Duplicate value: \"http\"".to_string()
            ),
            (
                "ports[1].protocol".to_string(),
                "Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"".to_string()
            ),
        ]
    );

    let path = format!("{}/web-abcde", slices(&ns));
    let status = raw::patch(
        &client,
        &path,
        MERGE,
        &json!({"addressType": "IPv6",
            "endpoints": [{"addresses": ["fd00::1"]}]}),
    )
    .await
    .expect_status(422, "Invalid");
    assert!(
        causes(&status)
            .iter()
            .any(|(f, m)| f == "addressType" && m.ends_with("field is immutable")),
        "{status}"
    );
}

#[tokio::test]
async fn endpoints_subsets_are_validated_as_kube_apiserver_does() {
    let (_cluster, client, ns) = setup("endpoints-validation").await;
    let good = json!({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "manual"},
        "subsets": [{"addresses": [{"ip": "10.1.2.3"}], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}],
    });
    create(&client, &endpoints(&ns), &good).await;
    let bad = json!({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "bad"},
        "subsets": [{"ports": [{"port": 80, "protocol": "TCP"}, {"name": "b", "port": 80, "protocol": "TCP"}]}],
    });
    let status = raw::post(&client, &endpoints(&ns), &bad)
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        causes(&status),
        [
            (
                "subsets[0]".to_string(),
                "Required value: must specify `addresses` or `notReadyAddresses`".to_string()
            ),
            (
                "subsets[0].ports[0].name".to_string(),
                "Required value".to_string()
            ),
        ]
    );
}
