//! What a bad restore or a hand edit leaves in etcd: shard keys on no lease, and shard keys held on a
//! lease that no registered worker names. Neither may stall the fleet, and neither may cost etcd a
//! refused transaction per shard per tick.

use std::time::Duration;

use super::{Fleet, SHARDS, keys_of_shard};

#[tokio::test(start_paused = true)]
async fn shard_keys_on_no_lease_are_claimed_over_by_the_next_leader() {
    let mut f = Fleet::new(1).await;
    for s in 0..SHARDS {
        f.etcd.shards.insert(s, ("ghost".into(), 0));
    }
    f.failover(2).await;
    f.start_worker("a", 4);
    f.advance(Duration::from_secs(3)).await;
    for s in 0..SHARDS {
        assert_eq!(f.etcd.shards[&s].0, "a", "shard {s}: {}", f.describe());
    }
    let key = keys_of_shard(0, 1).remove(0);
    f.enqueue(&[key.as_str()]);
    assert_eq!(f.runner_of(&key), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn refused_claims_wait_rather_than_retrying_every_tick_and_go_through_once_the_key_is_gone() {
    let mut f = Fleet::new(1).await;
    // Every shard held on a live lease that no registered worker names (its registration deleted).
    let orphan = f.etcd.grant();
    for s in 0..SHARDS {
        f.etcd.shards.insert(s, ("gone".into(), orphan));
    }
    f.failover(2).await;
    f.start_worker("a", 4);
    f.advance(Duration::from_secs(10)).await;
    // 40 ticks in 10 s; waits of 0.25, 0.5, 1, 2 and 4 s allow at most 6 claims of each shard.
    let refused = f.etcd.refused_writes;
    assert!(refused > 0, "claims were tried");
    assert!(
        refused <= 6 * SHARDS as usize,
        "{refused} refused claims of {SHARDS} shards in 10 s"
    );
    f.etcd.end_lease(orphan);
    f.advance(Duration::from_secs(5)).await;
    for s in 0..SHARDS {
        assert_eq!(f.etcd.shards[&s].0, "a", "shard {s}: {}", f.describe());
    }
}
