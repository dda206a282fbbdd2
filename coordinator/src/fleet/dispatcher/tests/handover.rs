//! Handover without overlap: a shard moving from A to B sends nothing of itself to B before A's items of
//! it are Done or A's lease is gone, and keys of other shards keep flowing meanwhile.

use std::time::Duration;

use super::super::super::shards::ShardState;
use super::{Fleet, LEASE_TTL, SHARDS, keys_of_shard, shard};

/// A fleet of one worker `a` owning every shard, running one key of each shard.
async fn a_running_one_key_per_shard() -> (Fleet, Vec<String>) {
    let mut f = Fleet::new(100).await;
    f.start_worker("a", 100);
    f.advance(Duration::from_secs(1)).await;
    assert_eq!(
        f.etcd.shards.len(),
        SHARDS as usize,
        "a claims every shard once it is the only worker"
    );
    let keys: Vec<String> = (0..SHARDS).flat_map(|s| keys_of_shard(s, 1)).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    f.enqueue(&refs);
    for k in &keys {
        assert_eq!(f.runner_of(k), Some("a"), "{k} runs at a");
    }
    (f, keys)
}

/// Shards the dispatcher is moving from `from` to `to`.
fn moving(f: &Fleet, from: &str, to: &str) -> Vec<u32> {
    (0..SHARDS)
        .filter(|&s| {
            *f.d.handover.table().state(s)
                == ShardState::Moving {
                    from: from.into(),
                    to: to.into(),
                }
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_shard_goes_to_a_joining_worker_only_once_its_old_owner_finished_its_items() {
    let (mut f, keys) = a_running_one_key_per_shard().await;
    f.start_worker("b", 100);
    f.advance(Duration::from_secs(1)).await;
    let moving = moving(&f, "a", "b");
    assert!(
        !moving.is_empty() && moving.len() < SHARDS as usize,
        "b's share of the shards starts moving: {moving:?}"
    );
    for s in &moving {
        assert_eq!(
            f.etcd.shards[s].0, "a",
            "shard {s} stays a's in etcd while a holds an item of it"
        );
    }
    // Every key changes while it runs (so it runs again after), and each shard gets a new key.
    let fresh: Vec<String> = (0..SHARDS)
        .map(|s| keys_of_shard(s, 2)[1].clone())
        .collect();
    let all: Vec<&str> = keys.iter().chain(&fresh).map(String::as_str).collect();
    f.enqueue(&all);
    assert!(
        f.assignments_of_worker("b").is_empty(),
        "nothing of a moving shard goes anywhere while its old owner holds an item of it"
    );
    for k in &fresh {
        if !moving.contains(&shard(k)) {
            assert_eq!(f.runner_of(k), Some("a"), "a shard staying with a flows on");
        }
    }

    let (first, rest) = moving.split_first().expect("a moving shard");
    let key = &keys[*first as usize];
    f.finish("a", key);
    assert_eq!(
        f.etcd.shards[first].0, "b",
        "the move is written once a holds nothing of shard {first}"
    );
    assert_eq!(f.runner_of(key), Some("b"), "{key} runs again, at b");
    assert_eq!(f.assignments_of(key), ["a", "b"]);
    assert_eq!(f.runner_of(&fresh[*first as usize]), Some("b"));
    for s in rest {
        assert_eq!(f.etcd.shards[s].0, "a", "shard {s} still waits for a");
        assert_eq!(f.runner_of(&fresh[*s as usize]), None);
    }

    f.finish_all();
    f.finish_all();
    assert!(moving.iter().all(|s| f.etcd.shards[s].0 == "b"));
    assert!(
        f.owed.is_empty(),
        "every key ran after its change: {:?}",
        f.owed
    );
}

#[tokio::test(start_paused = true)]
async fn a_moving_shard_whose_old_owner_went_silent_moves_only_a_lease_ttl_after_the_revoke() {
    let (mut f, keys) = a_running_one_key_per_shard().await;
    f.start_worker("b", 100);
    f.advance(Duration::from_secs(1)).await;
    let moving = moving(&f, "a", "b");
    let s = moving[0];
    let key = keys[s as usize].clone();
    // a's stream breaks, but a runs on (a partition): its items are its own until its lease is gone.
    f.disconnect("a");
    f.enqueue(&[key.as_str()]);
    f.advance(Duration::from_secs(9)).await;
    assert_eq!(f.runner_of(&key), Some("a"));
    assert_eq!(
        f.assignments_of(&key),
        ["a"],
        "within the grace nothing moves"
    );

    // Past the reconnect grace the leader revokes a's lease; a stops within a TTL, and only then may
    // b run its keys (the harness fails any Assign of a key a still runs).
    f.advance(Duration::from_secs(2)).await;
    assert!(
        !f.etcd.registry.contains_key("a"),
        "a's lease is revoked past the grace"
    );
    assert_eq!(
        f.runner_of(&key),
        Some("a"),
        "a may still run until a TTL after"
    );
    f.advance(LEASE_TTL).await;
    assert_eq!(f.runner_of(&key), Some("b"));
    for k in &keys {
        assert_eq!(f.runner_of(k), Some("b"), "{k} runs again, at b");
    }
    assert!(f.owed.is_empty(), "no key is lost: {:?}", f.owed);
}

#[tokio::test(start_paused = true)]
async fn while_etcd_stalls_a_move_waits_and_keys_of_other_shards_still_flow() {
    let (mut f, keys) = a_running_one_key_per_shard().await;
    f.start_worker("b", 100);
    f.advance(Duration::from_secs(1)).await;
    let moving = moving(&f, "a", "b");
    let s = moving[0];
    f.etcd.stalled = true;
    f.finish("a", &keys[s as usize]);
    assert_eq!(
        f.etcd.pending.len(),
        1,
        "the move is handed to etcd, not awaited"
    );
    let next = keys_of_shard(s, 2)[1].clone();
    let elsewhere: Vec<String> = (0..SHARDS)
        .filter(|t| !moving.contains(t))
        .map(|t| keys_of_shard(t, 3)[2].clone())
        .collect();
    let all: Vec<&str> = elsewhere
        .iter()
        .chain([&next])
        .map(String::as_str)
        .collect();
    f.enqueue(&all);
    assert_eq!(
        f.runner_of(&next),
        None,
        "nothing of a shard whose move is with etcd is sent"
    );
    for k in &elsewhere {
        assert_eq!(
            f.runner_of(k),
            Some("a"),
            "a stalled etcd does not stop keys it does not concern"
        );
    }
    f.etcd.stalled = false;
    f.turn();
    assert_eq!(f.etcd.shards[&s].0, "b");
    assert_eq!(f.runner_of(&next), Some("b"));
}

impl Fleet {
    /// Keys worker `id` received, in order.
    fn assignments_of_worker(&self, id: &str) -> Vec<&str> {
        self.assigned
            .iter()
            .filter(|(w, _)| w == id)
            .map(|(_, k)| k.as_str())
            .collect()
    }
}
