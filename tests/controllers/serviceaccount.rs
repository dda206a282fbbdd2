//! The `serviceaccount` controller: a new namespace gets its `default` ServiceAccount, and a deleted one
//! comes back.

use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DeleteParams};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

#[tokio::test(flavor = "multi_thread")]
async fn a_new_namespace_gets_a_default_serviceaccount_that_comes_back_when_deleted() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let _c0 = fleet.coordinator("c0", &[]);
    let _w0 = fleet.worker(
        "flotilla",
        "w0",
        &["worker", "--controllers", "serviceaccount"],
    );
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;

    let ns = unique_namespace(&client, "sa").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let first = wait_for(
        Duration::from_secs(30),
        "the default ServiceAccount of a new namespace",
        || async { accounts.get_opt("default").await.ok().flatten() },
    )
    .await;
    let first_uid = first.metadata.uid.clone().unwrap();

    accounts
        .delete("default", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        Duration::from_secs(30),
        "the default ServiceAccount recreated after its deletion",
        || async {
            let sa = accounts.get_opt("default").await.ok().flatten()?;
            (sa.metadata.uid.as_deref() != Some(first_uid.as_str())).then_some(())
        },
    )
    .await;
}
