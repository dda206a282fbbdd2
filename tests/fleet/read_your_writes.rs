//! Read-your-writes: a controller that creates one child per reconcile, re-triggered by its own child's
//! watch event, ends with exactly one child per parent — the coordinator holds the parent until its cache
//! has seen the child.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

use super::common::{create_configmaps, touch};
use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

/// Parent name → number of children (ConfigMaps controlled by it).
async fn children(api: &Api<ConfigMap>) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for cm in api.list(&ListParams::default()).await.unwrap().items {
        for owner in cm
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.controller == Some(true))
        {
            *counts.entry(owner.name.clone()).or_default() += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread")]
async fn a_controller_that_creates_a_child_per_reconcile_ends_with_exactly_one_child_per_parent() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "ryw").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let parents = create_configmaps(&client, &ns, "p", 200, ("flotilla.dev/probe", "parent")).await;
    let keys: Vec<String> = parents.keys().cloned().collect();
    let _c0 = fleet.coordinator("c0", &[]);
    let _w: Vec<_> = (0..3)
        .map(|i| {
            fleet.worker(
                "fleet-probe",
                &format!("w{i}"),
                &[
                    "--controllers",
                    "one-child",
                    "--concurrent-one-child-syncs",
                    "10",
                ],
            )
        })
        .collect();
    fleet.wait_for_workers(3, Duration::from_secs(60)).await;
    // Load: every parent is touched twice more while the children are being created.
    touch(&client, &keys, 1).await;
    touch(&client, &keys, 2).await;

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    wait_for(
        Duration::from_secs(60),
        "a child for every parent",
        || async {
            let counts = children(&api).await;
            (counts.len() == parents.len()).then_some(())
        },
    )
    .await;
    // Let everything in flight finish before counting.
    wait_for(
        Duration::from_secs(60),
        "the one-child queue to drain",
        || async {
            let s = fleet.status().await?;
            let q = s.queues.iter().find(|q| q.controller == "one-child")?;
            (q.depth == 0 && q.processing == 0).then_some(())
        },
    )
    .await;
    let counts = children(&api).await;
    let extra: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        extra.is_empty(),
        "parents without exactly one child: {extra:?}"
    );
    assert_eq!(counts.len(), parents.len());
}
