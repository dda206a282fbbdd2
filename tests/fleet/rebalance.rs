//! Rebalancing: a fourth worker takes about a quarter of the shards (all from the others, none between
//! them); when it leaves, only its shards move; no key is reconciled by two workers meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::GetOptions;
use flotilla_common::{FleetKeys, connect_etcd};

use super::common::{JOURNAL_LABEL, create_configmaps, journal_worker, touch};
use super::journal::{intervals, now_ns, overlaps, read, stale_keys};
use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

/// Shard → owner, as etcd has it.
async fn shard_map(fleet: &Fleet) -> BTreeMap<u32, String> {
    let keys = FleetKeys::new(&fleet.name);
    let mut etcd = connect_etcd(&fleet.etcd_endpoints).await.unwrap();
    let resp = etcd
        .get(keys.shards_prefix(), Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    resp.kvs()
        .iter()
        .filter_map(|kv| {
            Some((
                keys.parse_shard(kv.key())?,
                String::from_utf8(kv.value().to_vec()).ok()?,
            ))
        })
        .collect()
}

/// Waits until all 256 shards are owned by exactly `workers`, each within one shard of an even share.
async fn balanced(fleet: &Fleet, workers: &[&str]) -> BTreeMap<u32, String> {
    wait_for(
        Duration::from_secs(60),
        &format!("256 shards balanced over {workers:?}"),
        || async {
            let map = shard_map(fleet).await;
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for owner in map.values() {
                *counts.entry(owner.as_str()).or_default() += 1;
            }
            let share = 256 / workers.len();
            let ok = map.len() == 256
                && counts.len() == workers.len()
                && workers.iter().all(|w| {
                    counts
                        .get(w)
                        .is_some_and(|&c| c + 1 >= share && c <= share + 1)
                });
            ok.then_some(map)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_joining_worker_takes_a_quarter_and_a_leaving_one_gives_back_only_its_own_without_overlap()
 {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "rebalance").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");
    let mut last_write = create_configmaps(&client, &ns, "k", 300, JOURNAL_LABEL).await;
    let keys: Vec<String> = last_write.keys().cloned().collect();
    let _c0 = fleet.coordinator("c0", &[]);
    let _w: Vec<_> = (0..3)
        .map(|i| journal_worker(&fleet, &format!("w{i}"), &journal, 5, 10))
        .collect();
    let before = balanced(&fleet, &["w0", "w1", "w2"]).await;

    // Keep every key busy while shards move.
    let stop = Arc::new(AtomicBool::new(false));
    let toucher = {
        let (client, keys, stop) = (client.clone(), keys.clone(), stop.clone());
        tokio::spawn(async move {
            let mut writes = HashMap::new();
            let mut round = 1;
            while !stop.load(Ordering::SeqCst) {
                writes.extend(touch(&client, &keys, round).await);
                round += 1;
            }
            writes
        })
    };

    let mut w3 = journal_worker(&fleet, "w3", &journal, 5, 10);
    let joined = balanced(&fleet, &["w0", "w1", "w2", "w3"]).await;
    let moved: Vec<u32> = joined
        .iter()
        .filter(|(s, o)| before.get(s) != Some(o))
        .map(|(s, _)| *s)
        .collect();
    assert!(
        (38..=90).contains(&moved.len()),
        "{} of 256 shards moved on join (want 15 %..35 %)",
        moved.len()
    );
    assert!(
        moved.iter().all(|s| joined[s] == "w3"),
        "shards moved between old workers on join"
    );

    w3.sigterm(Duration::from_secs(20)).await;
    let left = balanced(&fleet, &["w0", "w1", "w2"]).await;
    let moved_back: Vec<u32> = left
        .iter()
        .filter(|(s, o)| joined.get(s) != Some(o))
        .map(|(s, _)| *s)
        .collect();
    assert!(
        moved_back.iter().all(|s| joined[s] == "w3"),
        "a shard not owned by the leaver moved on leave"
    );
    assert_eq!(
        moved_back.len(),
        joined.values().filter(|o| *o == "w3").count()
    );

    stop.store(true, Ordering::SeqCst);
    last_write.extend(toucher.await.unwrap());
    let all = wait_for(
        Duration::from_secs(60),
        "every key reconciled after its last change",
        || async {
            let all = intervals(&read(&journal), &Default::default(), now_ns());
            stale_keys(&all, &last_write).is_empty().then_some(all)
        },
    )
    .await;
    let found = overlaps(&all);
    assert!(
        found.is_empty(),
        "{} overlapping reconciles during rebalancing, e.g. {:?}",
        found.len(),
        &found[..found.len().min(5)]
    );
}
