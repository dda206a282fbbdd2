//! Worker loss: a worker whose stream broke keeps its items until it says Hello again or its lease is
//! gone; then its keys run elsewhere, none lost. And Hellos wait for their registration beside the loop.

use std::time::Duration;

use super::super::super::messages::HelloRefused;
use super::super::etcd_work::{EtcdDone, EtcdWork, RegistrationRead};
use super::{Fleet, LEASE_TTL, SHARDS, keys_of_shard, shard};

/// Workers `a` and `b` sharing the shards, with `a` running one key of each of its shards.
async fn a_and_b_with_a_busy() -> (Fleet, Vec<String>) {
    let mut f = Fleet::new(100).await;
    f.start_worker("a", 100);
    f.start_worker("b", 100);
    f.advance(Duration::from_secs(1)).await;
    let a_shards: Vec<u32> = f
        .etcd
        .shards
        .iter()
        .filter(|(_, (owner, _))| owner == "a")
        .map(|(s, _)| *s)
        .collect();
    assert!(!a_shards.is_empty() && a_shards.len() < SHARDS as usize);
    let keys: Vec<String> = a_shards
        .iter()
        .map(|s| keys_of_shard(*s, 1)[0].clone())
        .collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    f.enqueue(&refs);
    for k in &keys {
        assert_eq!(f.runner_of(k), Some("a"));
    }
    (f, keys)
}

#[tokio::test(start_paused = true)]
async fn a_worker_whose_stream_broke_keeps_its_keys_until_it_says_hello_again() {
    let (mut f, keys) = a_and_b_with_a_busy().await;
    f.disconnect("a");
    // Its keys change meanwhile, and its shards get new keys.
    let fresh: Vec<String> = keys
        .iter()
        .map(|k| keys_of_shard(shard(k), 2)[1].clone())
        .collect();
    let all: Vec<&str> = keys.iter().chain(&fresh).map(String::as_str).collect();
    f.enqueue(&all);
    f.advance(Duration::from_secs(5)).await;
    for k in keys.iter().chain(&fresh) {
        assert_ne!(
            f.runner_of(k),
            Some("b"),
            "{k} stays off b while a may run it"
        );
    }
    assert!(f.workers["b"].running.is_empty());

    // a comes back holding its items: its shards are its own again, and the waiting keys go to it.
    f.connect("a");
    assert!(f.workers["a"].welcomed());
    for k in &fresh {
        assert_eq!(f.runner_of(k), Some("a"), "{k} waited for a");
    }
    for k in &keys {
        f.finish("a", k);
        assert_eq!(
            f.runner_of(k),
            Some("a"),
            "{k} changed while it ran, so it runs again"
        );
        assert_eq!(f.assignments_of(k), ["a", "a"]);
    }
    assert!(f.owed.is_empty(), "no key is lost: {:?}", f.owed);
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_finished_while_away_has_those_keys_run_again_after_its_hello() {
    let (mut f, keys) = a_and_b_with_a_busy().await;
    f.disconnect("a");
    // Finished while the stream was down: the Done never reached the leader.
    f.finish("a", &keys[0]);
    f.connect("a");
    assert_eq!(
        f.assignments_of(&keys[0]),
        ["a", "a"],
        "an item a no longer reports runs again, to be sure"
    );
    for k in &keys[1..] {
        assert_eq!(f.assignments_of(k), ["a"], "{k}, still held, does not");
    }
}

#[tokio::test(start_paused = true)]
async fn a_crashed_workers_keys_run_elsewhere_once_its_lease_expired_and_none_is_lost() {
    let (mut f, keys) = a_and_b_with_a_busy().await;
    f.crash("a");
    let fresh: Vec<String> = keys
        .iter()
        .map(|k| keys_of_shard(shard(k), 2)[1].clone())
        .collect();
    let refs: Vec<&str> = fresh.iter().map(String::as_str).collect();
    f.enqueue(&refs);
    f.advance(Duration::from_secs(4)).await;
    for k in keys.iter().chain(&fresh) {
        assert_eq!(
            f.runner_of(k),
            None,
            "the leader cannot tell a crash from a partition: {k} waits for a's lease"
        );
    }
    f.expire_lease("a");
    f.advance(Duration::from_secs(1)).await;
    for k in keys.iter().chain(&fresh) {
        assert_eq!(
            f.runner_of(k),
            Some("b"),
            "{k} runs at b once a's lease is gone"
        );
    }
    assert_eq!(
        f.etcd.shards.values().filter(|(o, _)| o == "b").count(),
        SHARDS as usize,
        "b owns every shard"
    );
    assert!(f.owed.is_empty(), "no key is lost: {:?}", f.owed);
}

#[tokio::test(start_paused = true)]
async fn a_hello_waits_for_its_registration_beside_the_loop_and_others_keep_dispatching() {
    let (mut f, _) = a_and_b_with_a_busy().await;
    f.etcd.stalled = true;
    f.start_worker("c", 100);
    assert!(
        f.workers["c"].has_stream() && !f.workers["c"].welcomed(),
        "c's Hello waits for etcd"
    );
    let keys: Vec<String> = (0..SHARDS)
        .map(|s| keys_of_shard(s, 3)[2].clone())
        .collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    f.enqueue(&refs);
    assert!(
        keys.iter().all(|k| f.runner_of(k).is_some()),
        "dispatching goes on while a registration read is with etcd"
    );
    f.etcd.stalled = false;
    f.turn();
    assert!(f.workers["c"].welcomed());
}

#[tokio::test(start_paused = true)]
async fn a_registration_read_older_than_the_registry_watch_does_not_bring_a_worker_back() {
    let mut f = Fleet::new(100).await;
    f.etcd.stalled = true;
    f.start_worker("c", 100);
    let Some(EtcdWork::CheckRegistration { conn_id, .. }) = f.etcd.pending.pop_front() else {
        panic!("c's Hello asks etcd for its registration");
    };
    let lease = f.workers["c"].lease.expect("c has a lease");
    let stale = RegistrationRead {
        revision: f.etcd.term_start().revision,
        found: Some((lease, 1)),
    };
    // c's lease ends, and the watch says so before the read (made earlier) comes back.
    f.etcd.end_lease(lease);
    f.etcd.stalled = false;
    f.turn();
    f.d.on_etcd_done(EtcdDone::Registration {
        conn_id,
        read: Ok(stale),
    })
    .expect("not deposed");
    f.turn();
    assert!(
        matches!(
            f.workers["c"].refused.as_slice(),
            [HelloRefused::Unregistered { .. }]
        ),
        "refused: {:?}",
        f.workers["c"].refused
    );
    assert_eq!(f.d.membership.lease_of("c"), None);
}

/// The leader's table says a worker owns a shard only where etcd's key is on that worker's current
/// lease. Regression: a worker back under the same id while its old lease lived was handed its shards
/// on the old lease's keys; when that lease ended the keys went, and a later leader would have read the
/// shards as free while the worker ran their items (and keys parked meanwhile stayed parked).
#[tokio::test(start_paused = true)]
async fn a_worker_restarted_within_its_old_leases_ttl_owns_its_shards_only_on_its_new_lease() {
    let (mut f, keys) = a_and_b_with_a_busy().await;
    f.crash("a");
    f.start_worker("a", 100);
    f.advance(Duration::from_secs(1)).await;
    for k in &keys {
        assert_eq!(
            f.runner_of(k),
            None,
            "{k} waits while its shard's key is on a's old lease"
        );
    }
    f.advance(LEASE_TTL).await;
    for k in &keys {
        assert!(
            f.runner_of(k).is_some(),
            "{k} runs once the old lease ended"
        );
    }
    for (s, (owner, lease)) in &f.etcd.shards {
        assert_eq!(
            f.workers[owner].lease,
            Some(*lease),
            "shard {s}'s key is on {owner}'s current lease"
        );
    }
    assert!(f.owed.is_empty(), "no key is lost: {:?}", f.owed);
}
