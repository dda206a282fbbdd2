//! Every item says why it runs: a key listed when the leader's caches synced runs for the initial list,
//! a key created afterwards for the watch event on its object, and the reconcile sees it in its
//! `Request`.

use std::time::Duration;

use super::common::{JOURNAL_LABEL, create_configmaps, journal_fleet};
use super::journal::read;
use crate::support::cluster::TestCluster;
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

/// The reason of the first reconcile of `key` in the journal, once there is one.
async fn first_reason(journal: &std::path::Path, key: &str) -> String {
    wait_for(
        Duration::from_secs(30),
        &format!("a reconcile of {key}"),
        || async {
            read(journal)
                .into_iter()
                .find(|e| e.key == key)
                .map(|e| e.reason)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reconcile_runs_for_the_initial_list_or_for_the_event_on_its_object() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "reasons").await;
    create_configmaps(&client, &ns, "early", 1, JOURNAL_LABEL).await;
    let fleet = journal_fleet(&cluster, &[]).await;

    let early = format!("{ns}/early-0");
    assert_eq!(first_reason(&fleet.journal, &early).await, "initial_list");

    create_configmaps(&client, &ns, "late", 1, JOURNAL_LABEL).await;
    let late = format!("{ns}/late-0");
    assert_eq!(
        first_reason(&fleet.journal, &late).await,
        format!("object_changed v1/configmaps {late}")
    );
}
