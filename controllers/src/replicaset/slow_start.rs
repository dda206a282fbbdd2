//! Slow start (upstream `slowStartBatch`): creates go out in batches of 1, 2, 4, … so that a template
//! the API rejects costs one failed call, not hundreds.

use std::future::Future;

/// The most pods one sync creates or deletes (upstream `BurstReplicas`); the rest wait for the next
/// sync, so one large ReplicaSet cannot monopolise the API.
pub const BURST_REPLICAS: usize = 500;

/// The batch sizes for `count` calls starting at `initial`: doubling, the last one trimmed.
pub fn batch_sizes(count: usize, initial: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut remaining = count;
    let mut batch = initial.max(1);
    while remaining > 0 {
        let size = batch.min(remaining);
        sizes.push(size);
        remaining -= size;
        batch = batch.saturating_mul(2);
    }
    sizes
}

/// Runs `call` `count` times in slow-start batches, each batch concurrently; stops after the first
/// batch with a failure. Returns how many calls succeeded and the first error.
pub async fn slow_start<F, Fut, E>(count: usize, call: F) -> (usize, Option<E>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut succeeded = 0;
    for size in batch_sizes(count, 1) {
        let results = futures::future::join_all((0..size).map(|_| call())).await;
        let mut first_error = None;
        for result in results {
            match result {
                Ok(()) => succeeded += 1,
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        if first_error.is_some() {
            return (succeeded, first_error);
        }
    }
    (succeeded, None)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn batches_double_from_one_and_the_last_is_trimmed() {
        assert_eq!(batch_sizes(10, 1), [1, 2, 4, 3]);
        assert_eq!(batch_sizes(1, 1), [1]);
        assert_eq!(batch_sizes(0, 1), Vec::<usize>::new());
    }

    #[tokio::test]
    async fn all_calls_run_when_none_fails() {
        let calls = AtomicUsize::new(0);
        let (ok, err) = slow_start(7, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<(), ()>(())
        })
        .await;
        assert_eq!((ok, err), (7, None));
        assert_eq!(calls.load(Ordering::SeqCst), 7);
    }

    #[tokio::test]
    async fn a_failure_stops_after_its_batch() {
        let calls = AtomicUsize::new(0);
        // The 2nd call fails: it is in the batch of 2, so the batch of 4 never starts.
        let (ok, err) = slow_start(10, || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move { if n == 1 { Err("quota") } else { Ok(()) } }
        })
        .await;
        assert_eq!(err, Some("quota"));
        assert_eq!(ok, 2);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }
}
