//! The `garbagecollector` controller: each propagation policy on a Deployment (Background: its
//! ReplicaSet and pods follow it; Foreground: it goes only after its ReplicaSet, which goes after its
//! pods; Orphan: the ReplicaSet stays without the reference, with its pods), and the ownerReference graph across kinds, a custom resource included (a dependent
//! goes when its owner goes, a reference whose uid does not match the live owner counts as absent, and a
//! dependent with a surviving owner only loses its reference to the one that went), and a foreground
//! deletion of an ownerReference cycle, which must finish.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::{random_suffix, unique_namespace};
use crate::support::objects::deployment;
use crate::support::raw;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(60);

/// What is left of a Deployment's tree.
struct Remains {
    replica_sets: Vec<ReplicaSet>,
    pods: Vec<Pod>,
}

async fn remains(client: &kube::Client, ns: &str, app: &str) -> Remains {
    let selector = ListParams::default().labels(&format!("app={app}"));
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Remains {
        replica_sets: sets.list(&selector).await.unwrap().items,
        pods: pods.list(&selector).await.unwrap().items,
    }
}

fn owner_uids(meta: &kube::api::ObjectMeta) -> Vec<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .map(|o| o.uid.as_str())
        .collect()
}

/// Creates a Deployment of 3 pods, deletes it with `policy` once its tree exists, and returns what is
/// left at the first moment the Deployment is observed gone.
async fn delete_with(
    client: &kube::Client,
    ns: &str,
    name: &str,
    policy: PropagationPolicy,
) -> Remains {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    deployments
        .create(&PostParams::default(), &deployment(name, 3))
        .await
        .unwrap();
    wait_for(
        CONVERGE,
        &format!("the ReplicaSet and 3 pods of {name}"),
        || async {
            let now = remains(client, ns, name).await;
            (now.replica_sets.len() == 1 && now.pods.len() == 3).then_some(())
        },
    )
    .await;

    let what = format!("Deployment {name} deleted with {policy:?} to be gone");
    let params = DeleteParams {
        propagation_policy: Some(policy),
        ..DeleteParams::default()
    };
    deployments.delete(name, &params).await.unwrap();
    wait_for(CONVERGE, &what, || async {
        deployments
            .get_opt(name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    remains(client, ns, name).await
}

#[tokio::test(flavor = "multi_thread")]
async fn each_propagation_policy_leaves_what_it_promises() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let (_fleet, _procs) =
        Fleet::of_controllers(&cluster, "deployment,replicaset,garbagecollector", 2).await;
    let ns = unique_namespace(&client, "gc-policy").await;

    // Foreground: the Deployment goes only after its ReplicaSet, which goes only after its pods.
    let left = delete_with(&client, &ns, "fg", PropagationPolicy::Foreground).await;
    assert!(
        left.replica_sets.is_empty() && left.pods.is_empty(),
        "a foreground deletion let the owner go first: {} ReplicaSets and {} pods left",
        left.replica_sets.len(),
        left.pods.len()
    );

    // Orphan: the Deployment goes; its ReplicaSet stays without the reference, with its pods.
    let left = delete_with(&client, &ns, "orphan", PropagationPolicy::Orphan).await;
    assert_eq!(
        left.replica_sets.len(),
        1,
        "the orphaned ReplicaSet must stay"
    );
    assert!(
        owner_uids(&left.replica_sets[0].metadata).is_empty(),
        "the orphaned ReplicaSet still references the Deployment"
    );
    let rs_uid = left.replica_sets[0].metadata.uid.clone().unwrap();
    assert_eq!(
        left.pods.len(),
        3,
        "the orphaned ReplicaSet's pods must stay"
    );
    assert!(
        left.pods
            .iter()
            .all(|p| owner_uids(&p.metadata) == [rs_uid.as_str()]),
        "the pods of an orphaned ReplicaSet keep their own owner"
    );

    // Background: the Deployment goes at once, its ReplicaSet and pods after it.
    delete_with(&client, &ns, "bg", PropagationPolicy::Background).await;
    wait_for(
        CONVERGE,
        "the ReplicaSet and pods of a background-deleted Deployment to be collected",
        || async {
            let now = remains(&client, &ns, "bg").await;
            (now.replica_sets.is_empty() && now.pods.is_empty()).then_some(())
        },
    )
    .await;
    let orphans = remains(&client, &ns, "orphan").await;
    assert_eq!(
        (orphans.replica_sets.len(), orphans.pods.len()),
        (1, 3),
        "the collector must not touch orphans"
    );
}

/// A namespaced CRD `gadgets` in a fresh group; returns its resource once Established.
async fn gadget_crd(client: &kube::Client) -> ApiResource {
    let group = format!("g{}.gctest.flotilla.dev", random_suffix(5));
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    });
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    raw::post(client, path, &crd).await.expect_ok(201);
    let name = format!("gadgets.{group}");
    wait_for(
        CONVERGE,
        &format!("CRD {name} to be Established"),
        || async {
            let crd = raw::get(client, &format!("{path}/{name}")).await.json();
            crd["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
                .then_some(())
        },
    )
    .await;
    ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    }
}

fn owned_by(owners: &[&ConfigMap]) -> Value {
    json!(
        owners
            .iter()
            .map(|o| json!({"apiVersion": "v1", "kind": "ConfigMap",
                "name": o.metadata.name, "uid": o.metadata.uid}))
            .collect::<Vec<_>>()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_graph_spans_kinds_and_custom_resources_and_checks_owner_uids() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    // The CRD exists before the fleet starts, so the first discovery covers it.
    let gadgets = gadget_crd(&client).await;
    let ns = unique_namespace(&client, "gc-graph").await;
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "garbagecollector", 2).await;

    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let custom: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &gadgets);
    let config_map = |name: &str, owners: Value| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": owners}}))
            .unwrap()
    };
    let pp = PostParams::default();
    let owner = maps
        .create(&pp, &config_map("owner", json!([])))
        .await
        .unwrap();
    let keeper = maps
        .create(&pp, &config_map("keeper", json!([])))
        .await
        .unwrap();

    // A reference to `keeper` by name with a uid that is not keeper's: the owner is absent.
    let mut stale_ref = owned_by(&[&keeper]);
    stale_ref[0]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    maps.create(&pp, &config_map("stale", stale_ref))
        .await
        .unwrap();
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": gadgets.api_version, "kind": "Gadget",
        "metadata": {"name": "child", "ownerReferences": owned_by(&[&owner])},
    }))
    .unwrap();
    custom.create(&pp, &gadget).await.unwrap();
    let shared: Secret = serde_json::from_value(json!({
        "metadata": {"name": "shared", "ownerReferences": owned_by(&[&owner, &keeper])},
    }))
    .unwrap();
    secrets.create(&pp, &shared).await.unwrap();

    wait_for(
        CONVERGE,
        "a dependent whose owner uid does not match to be collected",
        || async { maps.get_opt("stale").await.ok()?.is_none().then_some(()) },
    )
    .await;

    maps.delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        CONVERGE,
        "the custom resource owned by a deleted ConfigMap to be collected",
        || async { custom.get_opt("child").await.ok()?.is_none().then_some(()) },
    )
    .await;
    let shared = wait_for(
        CONVERGE,
        "the Secret with a surviving owner to lose its reference to the deleted one",
        || async {
            let s = secrets.get_opt("shared").await.ok()??;
            (s.metadata.owner_references.as_ref()?.len() == 1).then_some(s)
        },
    )
    .await;
    assert_eq!(
        shared.metadata.owner_references.unwrap()[0].uid,
        keeper.metadata.uid.unwrap(),
        "the reference kept must be the surviving owner's"
    );
    assert!(
        maps.get_opt("keeper").await.unwrap().is_some(),
        "an owner without owners must never be collected"
    );
}

/// Regression: two ConfigMaps that own each other with `blockOwnerDeletion`, one deleted in the
/// foreground, were never collected. The deleted one waited for its blocking dependent, which the
/// collector deleted in the foreground too, and that one waited for the first: both kept the
/// `foregroundDeletion` finalizer forever. The collector must break the cycle as upstream does.
#[tokio::test(flavor = "multi_thread")]
async fn an_ownership_cycle_deleted_in_the_foreground_is_collected_whole() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "gc-cycle").await;
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "garbagecollector", 2).await;

    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let blocking_ref = |owner: &ConfigMap| {
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name,
            "uid": owner.metadata.uid, "blockOwnerDeletion": true}])
    };
    let pp = PostParams::default();
    let a: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    let a = maps.create(&pp, &a).await.unwrap();
    let b: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "b", "ownerReferences": blocking_ref(&a)}}),
    )
    .unwrap();
    let b = maps.create(&pp, &b).await.unwrap();
    // `a` can name `b` only once `b` has a uid: the cycle closes with a patch.
    let close = json!({"metadata": {"ownerReferences": blocking_ref(&b)}});
    maps.patch("a", &PatchParams::default(), &Patch::Merge(&close))
        .await
        .unwrap();

    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..DeleteParams::default()
    };
    let waiting = maps
        .delete("a", &params)
        .await
        .unwrap()
        .left()
        .expect("a foreground deletion keeps the owner until its dependents are gone");
    assert!(
        waiting
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "foregroundDeletion"),
        "the owner deleted in the foreground must wait with the foregroundDeletion finalizer"
    );
    wait_for(
        CONVERGE,
        "both ConfigMaps of an ownership cycle deleted in the foreground to be gone",
        || async {
            let left = maps.list(&ListParams::default()).await.ok()?;
            left.items
                .iter()
                .all(|m| !["a", "b"].contains(&m.metadata.name.as_deref().unwrap_or_default()))
                .then_some(())
        },
    )
    .await;
}
