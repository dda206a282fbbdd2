//! The workqueue at its documented bound of a million keys (README, "Bounds"): every key comes out
//! exactly once however often it was added, in the order it was first added, and a key added again while
//! it is processed comes out once more after its `done`, not sooner. Nothing here asserts time or
//! memory: `flotilla bench bounds` measures those.

use super::*;
use crate::queue::default_controller_rate_limiter;

/// The bound: a million keys in one controller's queue.
const KEYS: usize = 1_000_000;

/// Key `i`, shaped like the dispatcher's `namespace/name` keys.
fn key(i: usize) -> String {
    format!("ns-{}/object-{i}", i / 1000)
}

/// The `i` of a [`key`].
fn index(key: &str) -> usize {
    key.rsplit('-').next().and_then(|i| i.parse().ok()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_million_keys_added_twice_come_out_exactly_once_in_order_and_requeue_once_after_done() {
    let mut q: WorkQueue<String> = WorkQueue::new(
        "bounds",
        Box::new(default_controller_rate_limiter()),
        QueueMetrics::unregistered("bounds"),
    );
    for _ in 0..2 {
        for i in 0..KEYS {
            q.add(key(i));
        }
    }
    assert_eq!(q.len(), KEYS, "a key added twice is queued once");

    // Every key handed out once, in order; every tenth added again while it is processed.
    let mut handed = Vec::with_capacity(KEYS);
    while let Some(k) = q.get() {
        assert_eq!(index(&k), handed.len(), "keys come out in the order added");
        if handed.len() % 10 == 0 {
            q.add(k.clone());
        }
        handed.push(k);
    }
    assert_eq!(handed.len(), KEYS);
    assert_eq!(q.processing_len(), KEYS);
    assert_eq!(q.len(), 0, "a key added while processed waits for its done");
    assert_eq!(q.get(), None);

    for k in &handed {
        q.done(k);
    }
    assert_eq!(q.processing_len(), 0);
    assert_eq!(
        q.len(),
        KEYS / 10,
        "each key added while processed is queued once more"
    );

    let mut again = 0;
    while let Some(k) = q.get() {
        assert_eq!(
            index(&k),
            again * 10,
            "requeued in the order they were done"
        );
        q.done(&k);
        again += 1;
    }
    assert_eq!(again, KEYS / 10);
    assert!(q.is_empty());
    assert_eq!(q.processing_len(), 0);
}
