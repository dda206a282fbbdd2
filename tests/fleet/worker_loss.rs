//! Worker loss: the keys a crashed worker held run elsewhere only after its lease expired, and within
//! the lease TTL plus 2 s.

use std::time::Duration;

use super::common::{JOURNAL_LABEL, create_configmaps, journal_worker};
use super::journal::{intervals, now_ns, read};
use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, LEASE};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

#[tokio::test(flavor = "multi_thread")]
async fn the_keys_of_a_killed_worker_run_elsewhere_after_its_lease_expires_and_within_ttl_plus_two_seconds()
 {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "loss").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");
    let _c0 = fleet.coordinator("c0", &[]);
    // A reconciles for ten minutes: whatever it takes, it holds until it dies.
    let mut slow = journal_worker(&fleet, "slow", &journal, 600_000, 10);
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    let keys = create_configmaps(&client, &ns, "k", 10, JOURNAL_LABEL).await;
    // These very keys, by name: on a shared cluster a count could be met by other keys.
    wait_for(
        Duration::from_secs(30),
        "the slow worker to be reconciling each of the 10 keys",
        || async {
            let held: std::collections::HashSet<String> =
                intervals(&read(&journal), &Default::default(), now_ns())
                    .into_iter()
                    .filter(|i| i.worker == "slow" && i.open)
                    .map(|i| i.key)
                    .collect();
            keys.keys().all(|key| held.contains(key)).then_some(())
        },
    )
    .await;
    let _fast = journal_worker(&fleet, "fast", &journal, 5, 10);
    fleet.wait_for_workers(2, Duration::from_secs(30)).await;

    // Before the kill: its last renewal cannot be later than this.
    let killed_at = now_ns();
    slow.kill9().await;
    let done = wait_for(
        LEASE + Duration::from_secs(10),
        "every key of the killed worker reconciled by the other",
        || async {
            let finished: Vec<_> = intervals(&read(&journal), &Default::default(), now_ns())
                .into_iter()
                .filter(|i| i.worker == "fast" && !i.open && keys.contains_key(&i.key))
                .collect();
            let mut seen: Vec<&str> = finished.iter().map(|i| i.key.as_str()).collect();
            seen.sort();
            seen.dedup();
            (seen.len() == keys.len()).then_some(finished)
        },
    )
    .await;
    // The lease was renewed at most one renew interval (500 ms) before the kill; with etcd's expiry
    // granularity the keys must not move before ~2 s, and must move within TTL + 2 s.
    let earliest = done.iter().map(|i| i.start_ns).min().unwrap_or(0);
    let latest = done.iter().map(|i| i.start_ns).max().unwrap_or(0);
    let after = |ns: u64| Duration::from_nanos(ns.saturating_sub(killed_at));
    assert!(
        after(earliest) >= LEASE - Duration::from_secs(1),
        "a key ran elsewhere {:?} after the kill, before the lease could expire",
        after(earliest)
    );
    assert!(
        after(latest) <= LEASE + Duration::from_secs(2),
        "the last key ran {:?} after the kill",
        after(latest)
    );
}
