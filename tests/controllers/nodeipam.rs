//! The `nodeipam` controller: with `--allocate-node-cidrs --cluster-cidr 10.244.0.0/16` and a
//! service range inside it, two workers behind two coordinators give 50 bare Nodes (no simulator,
//! no `podCIDR`) a distinct `/24` each, none overlapping the service range, while the leading
//! coordinator is killed half-way; a deleted Node's range is the one a Node created next gets.
//!
//! Only on devcluster: the Nodes are cluster-wide and a real cluster's own kube-controller-manager
//! may allocate them from its own range at the same time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::random_suffix;
use crate::support::wait::wait_for;

/// Time for a pass (1 s polling), a failover (lease 3 s) and the writes.
const CONVERGE: Duration = Duration::from_secs(30);

const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// Reserved: no Node may get `10.244.0.0/24`.
const SERVICE_RANGE: &str = "10.244.0.0/24";

fn bare_node(name: &str) -> Node {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"flotilla.dev/test": "nodeipam"}}}),
    )
    .unwrap()
}

/// The podCIDRs of this test's Nodes, by name (a Node without one maps to an empty list).
async fn pod_cidrs(nodes: &Api<Node>, prefix: &str) -> BTreeMap<String, Vec<String>> {
    nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| {
            let name = n.metadata.name?;
            name.starts_with(prefix).then(|| {
                let cidrs = n.spec.and_then(|s| s.pod_cidrs).unwrap_or_default();
                (name, cidrs)
            })
        })
        .collect()
}

/// Waits until all `count` Nodes of the test have a range; returns them.
async fn all_allocated(
    nodes: &Api<Node>,
    prefix: &str,
    count: usize,
) -> BTreeMap<String, Vec<String>> {
    wait_for(
        CONVERGE,
        &format!("{count} nodes with pod CIDRs"),
        || async {
            let got = pod_cidrs(nodes, prefix).await;
            (got.len() == count && got.values().all(|c| c.len() == 1)).then_some(got)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_nodes_get_distinct_ranges_through_a_failover_and_a_freed_range_is_given_again() {
    let cluster = TestCluster::start().await;
    if !cluster.is_devcluster() {
        eprintln!("skipped: node CIDRs are cluster-wide and a real cluster allocates its own");
        return;
    }
    let client = cluster.client();
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let mut coordinators: BTreeMap<String, Proc> = ["c0", "c1"]
        .into_iter()
        .map(|id| (id.to_owned(), fleet.coordinator(id, &[])))
        .collect();
    let args = [
        "worker",
        "--controllers",
        "nodeipam",
        "--allocate-node-cidrs",
        "--cluster-cidr",
        CLUSTER_CIDR,
        "--service-cluster-ip-range",
        SERVICE_RANGE,
    ];
    let _workers = [
        fleet.worker("flotilla", "w0", &args),
        fleet.worker("flotilla", "w1", &args),
    ];
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;

    let prefix = format!("ipam-{}-", random_suffix(5));
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..25 {
        nodes
            .create(
                &PostParams::default(),
                &bare_node(&format!("{prefix}{i:02}")),
            )
            .await
            .unwrap();
    }
    // Kill the leader while the first half is being allocated; the standby takes over.
    let leader = wait_for(CONVERGE, "a leader", || async {
        fleet.leader().await.map(|l| l.info.id)
    })
    .await;
    coordinators
        .get_mut(&leader)
        .expect("the leader is one of ours")
        .kill9()
        .await;
    for i in 25..50 {
        nodes
            .create(
                &PostParams::default(),
                &bare_node(&format!("{prefix}{i:02}")),
            )
            .await
            .unwrap();
    }
    let new_leader = wait_for(CONVERGE, "a new leader", || async {
        fleet
            .leader()
            .await
            .map(|l| l.info.id)
            .filter(|id| *id != leader)
    })
    .await;
    assert_ne!(new_leader, leader);

    let got = all_allocated(&nodes, &prefix, 50).await;
    let ranges: BTreeSet<&String> = got.values().flatten().collect();
    assert_eq!(ranges.len(), 50, "every node has its own range: {got:#?}");
    for range in &ranges {
        assert!(
            range.starts_with("10.244.") && range.ends_with(".0/24"),
            "{range} is a /24 of {CLUSTER_CIDR}"
        );
        assert_ne!(
            range.as_str(),
            SERVICE_RANGE,
            "the service range is reserved"
        );
    }
    let node = nodes.get(&format!("{prefix}07")).await.unwrap();
    let spec = node.spec.unwrap();
    assert_eq!(
        spec.pod_cidr.as_ref(),
        spec.pod_cidrs.as_ref().map(|c| &c[0])
    );

    // A deleted Node frees its range: the lowest free one, so the next Node gets it.
    let victim = format!("{prefix}07");
    let freed = got[&victim][0].clone();
    nodes
        .delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    let late = format!("{prefix}late");
    nodes
        .create(&PostParams::default(), &bare_node(&late))
        .await
        .unwrap();
    let got = all_allocated(&nodes, &prefix, 50).await;
    assert_eq!(got[&late], [freed], "the freed range is given again");
    let ranges: BTreeSet<&String> = got.values().flatten().collect();
    assert_eq!(ranges.len(), 50);
}
