//! Fleets that share a cluster: two fleets scoped with `--namespaces` to different namespaces each
//! reconcile only their own namespace's Deployments, cache nothing else, and leave a namespace no
//! fleet covers alone; a `--namespace-selector` fleet takes up matching namespaces made after it
//! started; a scoped fleet's Namespace informer holds only its own Namespaces.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::unique_namespace;
use crate::support::objects::deployment;
use crate::support::wait::wait_for;

/// Two replicas on simulated nodes take a few seconds; the bound leaves room for a loaded machine.
const CONVERGE: Duration = Duration::from_secs(25);

/// A fleet of one coordinator scoped to `namespace` and one worker running the deployment and
/// replicaset controllers, once the worker is connected.
async fn scoped_fleet(cluster: &TestCluster, namespace: &str) -> (Fleet, Vec<Proc>) {
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let procs = vec![
        fleet.coordinator("c0", &["--namespaces", namespace]),
        fleet.worker(
            "flotilla",
            "w0",
            &["worker", "--controllers", "deployment,replicaset"],
        ),
    ];
    fleet.wait_for_workers(1, Duration::from_secs(30)).await;
    (fleet, procs)
}

/// How many objects of `kind` (as status names it, `apps/v1/deployments`) the fleet's leader caches,
/// once that informer is synced.
async fn cached(fleet: &Fleet, kind: &str) -> u64 {
    wait_for(
        Duration::from_secs(10),
        &format!("fleet {}'s {kind} informer to be synced", fleet.name),
        || async {
            let status = fleet.status().await?;
            status
                .informers
                .iter()
                .find(|i| i.kind == kind && i.synced)
                .map(|i| i.objects)
        },
    )
    .await
}

async fn available(client: &kube::Client, ns: &str, name: &str, replicas: i32) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    wait_for(
        CONVERGE,
        &format!("deployment {ns}/{name} to have {replicas} available replicas"),
        || async {
            let d = deployments.get(name).await.ok()?;
            let status = d.status?;
            (status.available_replicas == Some(replicas)).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fleets_scoped_to_different_namespaces_each_reconcile_only_their_own() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let ns_a = unique_namespace(&client, "fleet-a").await;
    let ns_b = unique_namespace(&client, "fleet-b").await;
    let outside = unique_namespace(&client, "no-fleet").await;
    let (fleet_a, _procs_a) = scoped_fleet(&cluster, &ns_a).await;
    let (fleet_b, _procs_b) = scoped_fleet(&cluster, &ns_b).await;

    for (ns, replicas) in [(&ns_a, 2), (&ns_b, 1), (&outside, 2)] {
        Api::<Deployment>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &deployment("web", replicas))
            .await
            .unwrap();
    }
    available(&client, &ns_a, "web", 2).await;
    available(&client, &ns_b, "web", 1).await;

    // Each leader caches only its namespace's Deployment and ReplicaSet: the other fleet's objects
    // and the unscoped namespace's never reached it, so it can neither route nor serve them.
    for fleet in [&fleet_a, &fleet_b] {
        assert_eq!(
            cached(fleet, "apps/v1/deployments").await,
            1,
            "fleet {} must cache exactly its own Deployment",
            fleet.name
        );
        assert_eq!(
            cached(fleet, "apps/v1/replicasets").await,
            1,
            "fleet {} must cache exactly its own ReplicaSet",
            fleet.name
        );
    }

    // Both fleets are converged and idle; the Deployment no fleet covers was never reconciled.
    let unscoped_rs = Api::<ReplicaSet>::namespaced(client.clone(), &outside)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        unscoped_rs.items.is_empty(),
        "no fleet covers {outside}, yet it has ReplicaSets: {:?}",
        unscoped_rs
            .items
            .iter()
            .map(|rs| rs.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let unscoped = Api::<Deployment>::namespaced(client.clone(), &outside)
        .get("web")
        .await
        .unwrap();
    assert!(
        unscoped
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .is_none(),
        "no deployment controller may have written the status of {outside}/web: {:?}",
        unscoped.status
    );

    // Scale fleet A's Deployment up: only A's namespace changes, B's stays as it was.
    let rs_b_before = Api::<ReplicaSet>::namespaced(client.clone(), &ns_b)
        .list(&ListParams::default())
        .await
        .unwrap();
    Api::<Deployment>::namespaced(client.clone(), &ns_a)
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    available(&client, &ns_a, "web", 3).await;
    let rs_b_after = Api::<ReplicaSet>::namespaced(client.clone(), &ns_b)
        .list(&ListParams::default())
        .await
        .unwrap();
    let versions = |list: &kube::core::ObjectList<ReplicaSet>| {
        list.items
            .iter()
            .map(|rs| rs.metadata.resource_version.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        versions(&rs_b_before),
        versions(&rs_b_after),
        "scaling fleet A's Deployment must not touch fleet B's ReplicaSets"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_scoped_by_namespace_selector_takes_up_matching_namespaces_created_after_it_started()
 {
    // The scoping every fleet test gets on a shared cluster (see `Fleet::coordinator`): the test's
    // namespaces, by label, including those made once the fleet runs.
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let selector = cluster.scope_selector();
    let _procs = [
        fleet.coordinator("c0", &["--namespace-selector", &selector]),
        fleet.worker(
            "flotilla",
            "w0",
            &["worker", "--controllers", "deployment,replicaset"],
        ),
    ];
    fleet.wait_for_workers(1, Duration::from_secs(30)).await;

    // Made after the fleet started: one labelled with the test's scope, one not.
    let mine = unique_namespace(&client, "selected").await;
    let other = format!("unselected-{}", crate::support::namespace::random_suffix(6));
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": other}})).unwrap(),
        )
        .await
        .unwrap();
    for ns in [&mine, &other] {
        Api::<Deployment>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &deployment("web", 2))
            .await
            .unwrap();
    }
    available(&client, &mine, "web", 2).await;
    assert_eq!(
        cached(&fleet, "apps/v1/deployments").await,
        1,
        "only the selected namespace's Deployment is cached"
    );
    assert_eq!(
        cached(&fleet, "apps/v1/replicasets").await,
        1,
        "only the selected namespace's ReplicaSet is cached"
    );
    let unselected = Api::<ReplicaSet>::namespaced(client.clone(), &other)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        unselected.items.is_empty(),
        "{other} does not match {selector}, yet it has ReplicaSets"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_scoped_with_namespaces_sees_only_those_namespace_objects_themselves() {
    // Namespaces are cluster-scoped, but a scoped fleet watches only its own by name, so its
    // serviceaccount controller serves its namespaces and leaves the others to their own fleets.
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let mine = unique_namespace(&client, "sa-mine").await;
    let others = unique_namespace(&client, "sa-others").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let _procs = [
        fleet.coordinator("c0", &["--namespaces", &mine]),
        fleet.worker(
            "flotilla",
            "w0",
            &["worker", "--controllers", "serviceaccount"],
        ),
    ];
    fleet.wait_for_workers(1, Duration::from_secs(30)).await;
    let accounts = |ns: &str| {
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), ns)
    };
    wait_for(
        CONVERGE,
        &format!("the default ServiceAccount of {mine}"),
        || async { accounts(&mine).get_opt("default").await.ok().flatten() },
    )
    .await;
    assert_eq!(
        cached(&fleet, "v1/namespaces").await,
        1,
        "the fleet caches its one Namespace, not every Namespace of the cluster"
    );
    // A shared cluster's own controllers (kube-controller-manager's serviceaccount controller) may
    // give it one: there only one the fleet wrote (its requests name `flotilla` in managedFields)
    // breaks the scoping; on the test's devcluster nothing else writes.
    if let Some(account) = accounts(&others).get_opt("default").await.unwrap() {
        let managers: Vec<&str> = account
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|entry| entry.manager.as_deref())
            .collect();
        assert!(
            !cluster.is_devcluster() && !managers.contains(&"flotilla"),
            "{others} is outside the fleet's --namespaces, yet the fleet gave it a default \
             ServiceAccount (managers {managers:?})"
        );
    }
}
