//! The `endpointslicemirroring` controller against what kube-controller-manager v1.32 writes
//! (`kube-fixtures/kcm-v1.32/endpoints/` 18..24, 27): the custom Endpoints of a Service without a
//! selector are mirrored into one EndpointSlice (generateName `<name>-`, the Endpoints' labels plus
//! the managed-by and service-name ones, controlled by the Endpoints, `ready` conditions only,
//! hostnames kept) (21), updated in place when the Endpoints change (24), deleted when the Endpoints
//! are labelled `skip-mirror` and mirrored again without it, and deleted with the Endpoints; the
//! Endpoints of a Service with a selector are not mirrored.
//!
//! Nothing here needs simulated nodes: it runs as is against a real cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(20);

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// The mirrored slices of Service `name`.
async fn mirrored(slices: &Api<EndpointSlice>, name: &str) -> Vec<EndpointSlice> {
    let selector = format!(
        "kubernetes.io/service-name={name},endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io"
    );
    slices
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
}

/// (address, ready, hostname) of each endpoint of a slice, sorted.
fn endpoints_of(slice: &EndpointSlice) -> Vec<(String, bool, Option<String>)> {
    let mut out: Vec<_> = slice
        .endpoints
        .iter()
        .map(|e| {
            let conditions = e.conditions.clone().unwrap_or_default();
            assert_eq!(
                (conditions.serving, conditions.terminating),
                (None, None),
                "only ready is mirrored (fixture 21)"
            );
            assert!(e.node_name.is_none() && e.zone.is_none() && e.target_ref.is_none());
            (
                e.addresses.join(","),
                conditions.ready == Some(true),
                e.hostname.clone(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Waits until Service `name` has exactly one mirrored slice whose endpoints are `want`.
async fn one_slice(
    slices: &Api<EndpointSlice>,
    name: &str,
    want: &[(&str, bool, Option<&str>)],
    what: &str,
) -> EndpointSlice {
    let want: Vec<(String, bool, Option<String>)> = want
        .iter()
        .map(|(ip, ready, host)| ((*ip).to_owned(), *ready, host.map(str::to_owned)))
        .collect();
    wait_for(CONVERGE, what, || async {
        let mut list = mirrored(slices, name).await;
        (list.len() == 1 && endpoints_of(&list[0]) == want).then(|| list.remove(0))
    })
    .await
}

async fn none_left(slices: &Api<EndpointSlice>, name: &str, what: &str) {
    wait_for(CONVERGE, what, || async {
        mirrored(slices, name).await.is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn custom_endpoints_are_mirrored_updated_skipped_and_cleaned_up() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "endpointslicemirroring", 2).await;
    let ns = unique_namespace(&client, "mirroring").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let pp = PostParams::default();

    // A Service with a selector and hand-made Endpoints: not mirrored (checked at the end).
    let selected: Service = object(json!({"metadata": {"name": "selected"},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}}));
    services.create(&pp, &selected).await.unwrap();
    let selected_endpoints: Endpoints = object(json!({"metadata": {"name": "selected"},
        "subsets": [{"addresses": [{"ip": "192.168.20.1"}], "ports": [{"port": 80}]}]}));
    endpoints.create(&pp, &selected_endpoints).await.unwrap();

    // 18, 20, 21.
    let manual: Service = object(json!({"metadata": {"name": "manual"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}));
    services.create(&pp, &manual).await.unwrap();
    let custom: Endpoints = object(json!({
        "metadata": {"name": "manual", "labels": {"team": "a"}},
        "subsets": [{
            "addresses": [{"ip": "192.168.10.1", "hostname": "db-1"}, {"ip": "192.168.10.2"}],
            "notReadyAddresses": [{"ip": "192.168.10.3"}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }],
    }));
    let custom = endpoints.create(&pp, &custom).await.unwrap();
    let slice = one_slice(
        &slices,
        "manual",
        &[
            ("192.168.10.1", true, Some("db-1")),
            ("192.168.10.2", true, None),
            ("192.168.10.3", false, None),
        ],
        "the mirrored slice of fixture 21",
    )
    .await;
    let meta = &slice.metadata;
    assert_eq!(meta.generate_name.as_deref(), Some("manual-"));
    assert_eq!(
        meta.labels.clone().unwrap(),
        BTreeMap::from([
            (
                "endpointslice.kubernetes.io/managed-by".to_owned(),
                "endpointslicemirroring-controller.k8s.io".to_owned()
            ),
            ("kubernetes.io/service-name".to_owned(), "manual".to_owned()),
            ("team".to_owned(), "a".to_owned()),
        ])
    );
    let owner = &meta.owner_references.clone().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("Endpoints", "manual", Some(true), Some(true))
    );
    assert_eq!(Some(&owner.uid), custom.metadata.uid.as_ref());
    assert_eq!(slice.address_type, "IPv4");
    let port = &slice.ports.clone().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some("http"), Some(8080), Some("TCP"))
    );
    assert_eq!(
        meta.annotations.clone().unwrap_or_default().len(),
        0,
        "no trigger time on mirrored slices"
    );
    let first_name = meta.name.clone().unwrap();

    // 23, 24: updated in place.
    let patch = json!({"subsets": [{"addresses": [{"ip": "192.168.10.4"}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]});
    endpoints
        .patch("manual", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    let updated = one_slice(
        &slices,
        "manual",
        &[("192.168.10.4", true, None)],
        "the slice updated",
    )
    .await;
    assert_eq!(updated.metadata.name.as_deref(), Some(first_name.as_str()));
    assert_eq!(updated.metadata.generation, Some(2));

    // skip-mirror: the slices go; without it they come back.
    let label = |value: Value| json!({"metadata": {"labels": {"endpointslice.kubernetes.io/skip-mirror": value}}});
    endpoints
        .patch(
            "manual",
            &PatchParams::default(),
            &Patch::Merge(label(json!("true"))),
        )
        .await
        .unwrap();
    none_left(&slices, "manual", "slices removed for skip-mirror").await;
    endpoints
        .patch(
            "manual",
            &PatchParams::default(),
            &Patch::Merge(label(Value::Null)),
        )
        .await
        .unwrap();
    one_slice(
        &slices,
        "manual",
        &[("192.168.10.4", true, None)],
        "mirrored again without skip-mirror",
    )
    .await;

    // The Endpoints gone, so are their slices.
    endpoints
        .delete("manual", &DeleteParams::default())
        .await
        .unwrap();
    none_left(&slices, "manual", "slices removed with the Endpoints").await;

    // Everything above converged, and the selected Service's Endpoints were never mirrored.
    assert!(mirrored(&slices, "selected").await.is_empty());
}
