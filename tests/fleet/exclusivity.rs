//! The fleet's first promise: one key is never reconciled by two workers at once, and no key is lost —
//! through a worker's death and the leader's.

use std::collections::HashMap;
use std::time::Duration;

use super::common::{JOURNAL_LABEL, create_configmaps, journal_worker, leader_id, touch};
use super::journal::{intervals, now_ns, overlaps, read, stale_keys};
use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

#[tokio::test(flavor = "multi_thread")]
async fn no_key_is_reconciled_twice_at_once_or_lost_when_a_worker_and_then_the_leader_are_killed() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "excl").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");

    let t0 = std::time::Instant::now();
    let mut last_write = create_configmaps(&client, &ns, "k", 2000, JOURNAL_LABEL).await;
    eprintln!("created 2000 ConfigMaps in {:?}", t0.elapsed());
    let keys: Vec<String> = last_write.keys().cloned().collect();
    let mut coordinators = HashMap::from([
        ("c0".to_owned(), fleet.coordinator("c0", &[])),
        ("c1".to_owned(), fleet.coordinator("c1", &[])),
    ]);
    let mut workers: Vec<_> = (0..3)
        .map(|i| journal_worker(&fleet, &format!("w{i}"), &journal, 5, 20))
        .collect();
    fleet.wait_for_workers(3, Duration::from_secs(60)).await;

    let mut deaths = HashMap::new();
    for round in 1..=3 {
        let t = std::time::Instant::now();
        last_write.extend(touch(&client, &keys, round).await);
        eprintln!("round {round}: touched 2000 keys in {:?}", t.elapsed());
        match round {
            1 => {
                workers[0].kill9().await;
                deaths.insert("w0".to_owned(), now_ns());
            }
            2 => {
                let leader = leader_id(&fleet).await;
                coordinators
                    .get_mut(&leader)
                    .expect("leader is one of ours")
                    .kill9()
                    .await;
            }
            _ => {}
        }
    }

    let done = wait_for(
        Duration::from_secs(120),
        "every key reconciled after its last change",
        || async {
            let all = intervals(&read(&journal), &deaths, now_ns());
            stale_keys(&all, &last_write).is_empty().then_some(all)
        },
    )
    .await;
    eprintln!(
        "all keys reconciled after their last change at {:?}",
        t0.elapsed()
    );
    let found = overlaps(&done);
    assert!(
        found.is_empty(),
        "{} overlapping reconciles, e.g. {:?}",
        found.len(),
        &found[..found.len().min(5)]
    );
    let reconciles = done.len();
    assert!(
        reconciles >= keys.len(),
        "only {reconciles} reconciles for {} keys",
        keys.len()
    );
    drop(workers);
}
