//! What the second adversarial probe found could stop the whole fleet while its health said 200: large
//! values under the fleet's etcd prefixes, lease-less keys a restore leaves behind (shards and the
//! election), a worker's registration deleted under it, and a leader or follower that cannot make
//! progress. Each test sets the trap before or while the fleet runs, then checks the fleet still
//! converges, the case was counted, and health told the truth meanwhile.

use std::time::Duration;

use flotilla_common::{FleetKeys, connect_etcd};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::common::{
    JOURNAL_LABEL, JournalFleet, journal_fleet, journal_worker, reconciled, start_journal_fleet,
};
use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, metric};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

const SHARDS: u32 = 256;

async fn journal_configmap(client: &kube::Client, ns: &str, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {JOURNAL_LABEL.0: JOURNAL_LABEL.1}},
        "data": {"round": "0"},
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
}

/// Waits until the process's `/readyz` answers `code` with a body containing `reason`.
async fn readyz(
    proc: &crate::support::fleet::Proc,
    code: u16,
    reason: &str,
    timeout: Duration,
    what: &str,
) {
    wait_for(timeout, what, || async {
        let (status, body) = proc.http_get("/readyz").await;
        (status == code && body.contains(reason)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_term_starts_with_more_than_the_etcd_clients_4_mib_under_the_fleets_prefixes() {
    let cluster = TestCluster::start().await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let keys = FleetKeys::new(&fleet.name);
    let mut etcd = connect_etcd(&cluster.etcd_endpoints()).await.unwrap();
    // Six values of 900 KB: 5.4 MB in one range, past the client's 4 MiB decoding limit. Not valid
    // specs, so each is skipped (and counted) once read.
    for i in 0..6 {
        etcd.put(
            keys.controller(&format!("junk-{i}")),
            vec![b'x'; 900_000],
            None,
        )
        .await
        .unwrap();
    }
    let JournalFleet {
        fleet: _fleet,
        journal: _journal,
        coordinator,
        worker: _worker,
        ..
    } = start_journal_fleet(fleet, &[]).await;
    let text = coordinator.metrics_text().await;
    assert_eq!(
        metric(
            &text,
            r#"flotilla_bad_input_total{reason="invalid_stored_spec"}"#
        ),
        6.0,
        "every junk value read and skipped"
    );
    let ended = metric(
        &text,
        r#"flotilla_leader_terms_ended_total{reason="error"}"#,
    );
    assert_eq!(ended, 0.0, "no term ended on the large read");
}

#[tokio::test(flavor = "multi_thread")]
async fn shard_keys_and_registrations_without_a_lease_are_claimed_over_or_ignored_in_one_line_each()
{
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let keys = FleetKeys::new(&fleet.name);
    let mut etcd = connect_etcd(&cluster.etcd_endpoints()).await.unwrap();
    // What a bad restore leaves: every shard owned, on no lease, by a worker that does not exist, and
    // registrations on no lease.
    for s in 0..SHARDS {
        etcd.put(keys.shard(s), "ghost", None).await.unwrap();
    }
    for i in 0..50 {
        let id = format!("ghost-{i}");
        let value = format!(r#"{{"id":"{id}","capacity":1}}"#);
        etcd.put(keys.worker(&id), value, None).await.unwrap();
    }
    let JournalFleet {
        fleet: _fleet,
        journal,
        coordinator,
        worker: _worker,
        ..
    } = start_journal_fleet(fleet, &[]).await;
    let ns = unique_namespace(&client, "leaseless").await;
    journal_configmap(&client, &ns, "after-restore").await;
    reconciled(
        &journal,
        &format!("{ns}/after-restore"),
        Duration::from_secs(30),
    )
    .await;
    let text = coordinator.metrics_text().await;
    assert_eq!(
        metric(
            &text,
            r#"flotilla_bad_input_total{reason="leaseless_shard_key"}"#
        ),
        f64::from(SHARDS)
    );
    assert_eq!(
        metric(
            &text,
            r#"flotilla_bad_input_total{reason="leaseless_worker_key"}"#
        ),
        50.0
    );
    let log = coordinator.log_text();
    assert_eq!(
        log.matches("carry no lease").count(),
        2,
        "one line for the shard keys and one for the registrations, not one per key:\n{log}"
    );
    let owner = etcd.get(keys.shard(0), None).await.unwrap();
    let kv = &owner.kvs()[0];
    assert_eq!(kv.value(), b"w0");
    assert_ne!(kv.lease(), 0, "the claim put the key on the worker's lease");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_less_key_at_the_head_of_the_election_is_cleared_and_a_leader_elected() {
    let cluster = TestCluster::start().await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let keys = FleetKeys::new(&fleet.name);
    let mut etcd = connect_etcd(&cluster.etcd_endpoints()).await.unwrap();
    etcd.put(
        format!("{}/garbage", keys.election()),
        "\u{0}not json",
        None,
    )
    .await
    .unwrap();
    let JournalFleet {
        fleet: _fleet,
        journal: _journal,
        coordinator,
        worker: _worker,
        ..
    } = start_journal_fleet(fleet, &[]).await;
    let text = coordinator.metrics_text().await;
    assert_eq!(
        metric(
            &text,
            r#"flotilla_bad_input_total{reason="leaseless_election_key"}"#
        ),
        1.0
    );
    assert!(
        coordinator
            .log_text()
            .contains("deleted election keys that carried no lease"),
        "the cleanup is logged"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_coordinator_that_sees_no_leader_past_the_bound_is_not_ready_until_one_is_elected() {
    let cluster = TestCluster::start().await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let keys = FleetKeys::new(&fleet.name);
    let mut etcd = connect_etcd(&cluster.etcd_endpoints()).await.unwrap();
    // A garbled key at the head of the election, on a live lease that is no coordinator's: every
    // campaign waits behind it, and it names no leader anyone could reach.
    let lease = etcd.lease_grant(60, None).await.unwrap().id();
    etcd.put(
        format!("{}/squatter", keys.election()),
        "garbage",
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .unwrap();
    let coordinator = fleet.coordinator("c0", &["--dispatch-stall-timeout", "2s"]);
    readyz(
        &coordinator,
        503,
        "no leader",
        Duration::from_secs(30),
        "the leaderless coordinator to say not ready",
    )
    .await;
    etcd.lease_revoke(lease).await.unwrap();
    readyz(
        &coordinator,
        200,
        "leading",
        Duration::from_secs(30),
        "the coordinator to lead and say ready",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_registration_is_deleted_registers_again_and_the_fleet_carries_on() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let JournalFleet {
        fleet,
        journal,
        worker,
        coordinator: _coordinator,
        ..
    } = journal_fleet(&cluster, &[]).await;
    let keys = FleetKeys::new(&fleet.name);
    let mut etcd = connect_etcd(&cluster.etcd_endpoints()).await.unwrap();
    etcd.delete(keys.worker("w0"), None).await.unwrap();
    wait_for(
        Duration::from_secs(15),
        "the worker's registration back in etcd",
        || {
            let mut etcd = etcd.clone();
            let key = keys.worker("w0");
            async move {
                let got = etcd.get(key, None).await.ok()?;
                got.kvs().first().map(|kv| kv.lease())
            }
        },
    )
    .await;
    let text = worker.metrics_text().await;
    assert!(
        metric(&text, "flotilla_worker_registrations_rewritten_total") >= 1.0,
        "the rewrite is counted"
    );
    fleet.wait_for_workers(1, Duration::from_secs(30)).await;
    let ns = unique_namespace(&client, "reregistered").await;
    journal_configmap(&client, &ns, "after").await;
    reconciled(&journal, &format!("{ns}/after"), Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_keys_wait_with_no_worker_is_not_ready_until_one_returns() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let JournalFleet {
        fleet,
        journal,
        coordinator,
        mut worker,
        ..
    } = journal_fleet(&cluster, &["--dispatch-stall-timeout", "2s"]).await;
    readyz(
        &coordinator,
        200,
        "leading",
        Duration::from_secs(30),
        "a ready leader",
    )
    .await;
    worker.kill9().await;
    let ns = unique_namespace(&client, "stalled").await;
    for i in 0..5 {
        journal_configmap(&client, &ns, &format!("waiting-{i}")).await;
    }
    readyz(
        &coordinator,
        503,
        "--dispatch-stall-timeout",
        Duration::from_secs(30),
        "the leader with waiting keys and no worker to say not ready",
    )
    .await;
    let _back = journal_worker(&fleet, "w1", &journal, 5, 10);
    reconciled(
        &journal,
        &format!("{ns}/waiting-4"),
        Duration::from_secs(60),
    )
    .await;
    readyz(
        &coordinator,
        200,
        "leading",
        Duration::from_secs(30),
        "the leader to be ready again once keys finish",
    )
    .await;
}
