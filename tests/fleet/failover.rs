//! Leader failover: a crashed leader is replaced within its lease plus 2 s; a leader stopped with SIGTERM
//! resigns and hands over in under a second; a standby keeps its place in the election however long it
//! waits.

use std::time::{Duration, Instant};

use flotilla_common::{FleetKeys, connect_etcd};

use super::common::{JOURNAL_LABEL, create_configmaps, journal_worker, leader_id, reconciled};
use super::journal::now_ns;
use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, LEASE};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

/// Kills the leader of a fleet of two coordinators (started with `flags`) and one worker; returns how
/// long after the kill a key created right after it started reconciling.
async fn crash_failover(flags: &[&str]) -> Duration {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "failover").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");
    create_configmaps(&client, &ns, "before", 20, JOURNAL_LABEL).await;
    let mut c0 = fleet.coordinator("c0", flags);
    let mut c1 = fleet.coordinator("c1", flags);
    let _w = journal_worker(&fleet, "w0", &journal, 5, 10);
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    reconciled(&journal, &format!("{ns}/before-0"), Duration::from_secs(30)).await;

    let leader = leader_id(&fleet).await;
    let killed_at = now_ns();
    if leader == "c0" {
        c0.kill9().await
    } else {
        c1.kill9().await
    }
    create_configmaps(&client, &ns, "after", 1, JOURNAL_LABEL).await;
    let start = reconciled(&journal, &format!("{ns}/after-0"), Duration::from_secs(30)).await;
    assert_ne!(leader_id(&fleet).await, leader);
    Duration::from_nanos(start.saturating_sub(killed_at))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_dispatches_within_the_lease_plus_two_seconds_of_a_leader_crash() {
    let took = crash_failover(&[]).await;
    assert!(
        took <= LEASE + Duration::from_secs(2),
        "the standby dispatched {took:?} after the leader died (lease {LEASE:?})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hot_standby_dispatches_within_the_lease_plus_two_seconds_of_a_leader_crash() {
    let took = crash_failover(&["--hot-standby"]).await;
    assert!(
        took <= LEASE + Duration::from_secs(2),
        "the hot standby dispatched {took:?} after the leader died (lease {LEASE:?})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_stopped_with_sigterm_resigns_and_a_standby_leads_within_a_second() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "resign").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");
    let mut c0 = fleet.coordinator("c0", &[]);
    let mut c1 = fleet.coordinator("c1", &[]);
    let _w = journal_worker(&fleet, "w0", &journal, 5, 10);
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    // Both coordinators must be campaigning before the handover can be timed.
    wait_for(
        Duration::from_secs(30),
        "the standby to campaign",
        || async {
            let text = if leader_id(&fleet).await == "c0" {
                c1.log_text()
            } else {
                c0.log_text()
            };
            text.contains("coordinator started").then_some(())
        },
    )
    .await;

    let leader = leader_id(&fleet).await;
    let old = if leader == "c0" { &mut c0 } else { &mut c1 };
    let stopped = Instant::now();
    // The new leader is awaited while the old process finishes its shutdown: the handover is timed
    // from the signal to the new leader, not to the old process's exit.
    let new_leader = async {
        let new_leader = wait_for(Duration::from_secs(10), "a new leader", || async {
            fleet
                .leader()
                .await
                .map(|l| l.info.id)
                .filter(|id| *id != leader)
        })
        .await;
        (new_leader, stopped.elapsed())
    };
    let ((new_leader, took), ()) = tokio::join!(new_leader, old.sigterm(Duration::from_secs(10)));
    assert!(
        took < Duration::from_secs(1),
        "{new_leader} led {took:?} after SIGTERM of {leader}"
    );

    create_configmaps(&client, &ns, "after", 1, JOURNAL_LABEL).await;
    reconciled(&journal, &format!("{ns}/after-0"), Duration::from_secs(15)).await;
}

/// A standby's campaign waits on etcd for as long as the leader lives. Cut off by the etcd client's
/// request timeout (5 s), it lost its key and its place in line, and a candidate that came later could
/// lead before it. Now nothing under the election prefix changes while the leader lives, and when it
/// crashes, the standby that waited longest leads.
#[tokio::test(flavor = "multi_thread")]
async fn a_standby_keeps_its_place_in_the_election_past_the_etcd_request_timeout() {
    let cluster = TestCluster::start().await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let keys = FleetKeys::new(&fleet.name);
    let mut c0 = fleet.coordinator("c0", &[]);
    assert_eq!(leader_id(&fleet).await, "c0");
    let _c1 = fleet.coordinator("c1", &[]);
    let etcd = connect_etcd(&cluster.etcd_endpoints()).await.unwrap();
    let prefix = format!("{}/", keys.election());
    wait_for(Duration::from_secs(30), "c1's campaign key", || async {
        (candidates(&etcd, &prefix).await == 2).then_some(())
    })
    .await;

    // Past the request timeout, twice over: no campaign is cut off, so no key is deleted or rewritten.
    let mut events = etcd
        .clone()
        .watch(
            prefix.as_str(),
            Some(etcd_client::WatchOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let first_change = async {
        loop {
            match events.message().await {
                // The watch's creation, or progress: no event.
                Ok(Some(response)) if response.events().is_empty() => {}
                other => return other,
            }
        }
    };
    let quiet = tokio::time::timeout(Duration::from_secs(11), first_change).await;
    assert!(
        quiet.is_err(),
        "the election changed while its leader lived: {quiet:?}"
    );

    let _c2 = fleet.coordinator("c2", &[]);
    wait_for(Duration::from_secs(30), "c2's campaign key", || async {
        (candidates(&etcd, &prefix).await == 3).then_some(())
    })
    .await;
    c0.kill9().await;
    let next = wait_for(LEASE * 4, "a new leader", || async {
        fleet
            .leader()
            .await
            .map(|l| l.info.id)
            .filter(|id| id != "c0")
    })
    .await;
    assert_eq!(next, "c1", "the standby that waited longest leads");
}

/// Keys under the election `prefix`: one per candidate.
async fn candidates(etcd: &etcd_client::Client, prefix: &str) -> usize {
    etcd.clone()
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap()
        .kvs()
        .len()
}
