//! The bound on Cache List answers in flight: bytes of objects being encoded or sent at once, in total
//! and per worker (`--max-cache-list-inflight-bytes`, `--max-cache-list-inflight-bytes-per-worker`). A
//! List takes its answer's size from the budget before the answer leaves the handler and gives it back
//! when the answer has been handed to the connection (see `until_sent`), so the coordinator's memory
//! for answers is bounded by the flags whatever the number of callers. Without it, 200 concurrent Lists
//! of 8.5 MB took a coordinator from 51 MB to 1.7 GB.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bounds, from the coordinator's flags (see `CoordinatorConfig`, which documents the defaults and
/// checks them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheListLimits {
    /// Bytes of List answers in flight at once, over every worker.
    pub total_bytes: usize,
    /// Bytes of List answers one worker may have in flight at once.
    pub per_worker_bytes: usize,
    /// How long a List waits for room before it is refused.
    pub wait: Duration,
}

impl Default for CacheListLimits {
    /// 256 MiB in total, 64 MiB per worker, 2 s of waiting: the flags' defaults.
    fn default() -> Self {
        Self {
            total_bytes: 256 * 1024 * 1024,
            per_worker_bytes: 64 * 1024 * 1024,
            wait: Duration::from_secs(2),
        }
    }
}

/// Why a List got no room.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetExhausted {
    /// The worker's own share is taken by its other Lists.
    #[error(
        "worker has {limit} bytes of cache List answers in flight (--max-cache-list-inflight-bytes-per-worker) and this one ({bytes} bytes) found no room within {wait:?}: retry later, or narrow it by namespace, selector or index"
    )]
    Worker {
        /// The answer's size.
        bytes: usize,
        /// The share.
        limit: usize,
        /// How long it waited.
        wait: Duration,
    },
    /// The fleet's Lists together fill the budget.
    #[error(
        "the coordinator has {limit} bytes of cache List answers in flight (--max-cache-list-inflight-bytes) and this one ({bytes} bytes) found no room within {wait:?}: retry later"
    )]
    Total {
        /// The answer's size.
        bytes: usize,
        /// The budget.
        limit: usize,
        /// How long it waited.
        wait: Duration,
    },
}

/// Permits count KiB, so a budget of gigabytes fits the semaphore's `u32` requests.
const UNIT: usize = 1024;

/// The budget; cheap to clone (clones share it).
#[derive(Clone, Debug)]
pub struct ListBudget {
    limits: CacheListLimits,
    total: Arc<Semaphore>,
    /// Worker id → its share. An entry lives while a List of the worker holds or waits for room, so
    /// the map holds at most the workers listing right now (ids of past pods do not pile up).
    workers: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

/// Room for one List answer: give it back by dropping it.
#[derive(Debug)]
pub struct ListPermit {
    // Given back in `drop` before `_share` looks whether the worker's share is whole.
    total: Option<OwnedSemaphorePermit>,
    worker: Option<OwnedSemaphorePermit>,
    _share: ShareEntry,
}

/// Removes a worker's share from the map once no List holds or waits for it.
#[derive(Debug)]
struct ShareEntry {
    workers: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
    worker: String,
}

impl Drop for ShareEntry {
    fn drop(&mut self) {
        let mut workers = self.workers.lock();
        // Under the lock nobody can take a new reference: one left is the map's own.
        if workers
            .get(&self.worker)
            .is_some_and(|share| Arc::strong_count(share) == 1)
        {
            workers.remove(&self.worker);
        }
    }
}

impl Drop for ListPermit {
    fn drop(&mut self) {
        // The permits first (they hold the share's semaphore), then `_share` drops and cleans up.
        self.total.take();
        self.worker.take();
    }
}

fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT).max(1)
}

impl ListBudget {
    /// A budget of `limits` (checked at start-up: both at least 1 MiB, the share at most the total).
    pub fn new(limits: CacheListLimits) -> Self {
        Self {
            limits,
            total: Arc::new(Semaphore::new(units(limits.total_bytes))),
            workers: Arc::default(),
        }
    }

    /// Room for an answer of `bytes` to `worker`: its share first, then the total, waiting up to the
    /// limits' `wait` for both together. An answer larger than the share takes the whole share (and
    /// so runs alone) rather than waiting for room that can never come.
    ///
    /// # Errors
    /// [`BudgetExhausted`] when the wait ends without room; nothing is held then.
    ///
    /// # Cancel safety
    /// Dropping the future gives back whatever it took.
    pub async fn acquire(&self, worker: &str, bytes: usize) -> Result<ListPermit, BudgetExhausted> {
        let share_units = units(self.limits.per_worker_bytes);
        let wanted = units(bytes).min(share_units);
        let wanted = u32::try_from(wanted).unwrap_or(u32::MAX);
        let share = self
            .workers
            .lock()
            .entry(worker.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(share_units)))
            .clone();
        let mut permit = ListPermit {
            total: None,
            worker: None,
            _share: ShareEntry {
                workers: self.workers.clone(),
                worker: worker.to_owned(),
            },
        };
        let wait = self.limits.wait;
        let deadline = tokio::time::Instant::now() + wait;
        // Semaphores here are never closed, so only the timeout fails.
        let acquired = tokio::time::timeout_at(deadline, share.acquire_many_owned(wanted)).await;
        permit.worker = match acquired {
            Ok(Ok(held)) => Some(held),
            _ => {
                return Err(BudgetExhausted::Worker {
                    bytes,
                    limit: self.limits.per_worker_bytes,
                    wait,
                });
            }
        };
        let acquired =
            tokio::time::timeout_at(deadline, self.total.clone().acquire_many_owned(wanted)).await;
        permit.total = match acquired {
            Ok(Ok(held)) => Some(held),
            _ => {
                return Err(BudgetExhausted::Total {
                    bytes,
                    limit: self.limits.total_bytes,
                    wait,
                });
            }
        };
        Ok(permit)
    }

    /// Bytes of answers in flight now (rounded up to KiB per answer).
    pub fn in_flight_bytes(&self) -> usize {
        (units(self.limits.total_bytes) - self.total.available_permits()) * UNIT
    }

    /// How many workers hold or wait for room now.
    #[cfg(test)]
    fn workers_listing(&self) -> usize {
        self.workers.lock().len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    fn budget(total_mib: usize, per_worker_mib: usize) -> ListBudget {
        ListBudget::new(CacheListLimits {
            total_bytes: total_mib * MIB,
            per_worker_bytes: per_worker_mib * MIB,
            wait: Duration::from_secs(2),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_beyond_the_budget_waits_then_is_refused_and_holds_nothing() {
        let budget = budget(8, 8);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(budget.acquire("w0", 2 * MIB).await.unwrap());
        }
        assert_eq!(budget.in_flight_bytes(), 8 * MIB);
        let started = tokio::time::Instant::now();
        let refused = budget.acquire("w0", 2 * MIB).await.unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(2), "it waited first");
        assert!(
            matches!(refused, BudgetExhausted::Worker { .. }),
            "{refused}"
        );
        assert_eq!(budget.in_flight_bytes(), 8 * MIB, "a refusal holds nothing");
        drop(held);
        assert_eq!(budget.in_flight_bytes(), 0);
        assert_eq!(budget.workers_listing(), 0, "no entry outlives its Lists");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_list_gets_the_room_an_answer_gives_back() {
        let budget = budget(4, 4);
        let first = budget.acquire("w0", 3 * MIB).await.unwrap();
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.acquire("w1", 3 * MIB).await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished());
        drop(first);
        waiting.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn one_worker_listing_hard_leaves_the_rest_of_the_budget_to_the_others() {
        let budget = budget(8, 2);
        let _greedy = budget.acquire("greedy", 2 * MIB).await.unwrap();
        let refused = budget.acquire("greedy", MIB).await.unwrap_err();
        assert!(
            matches!(refused, BudgetExhausted::Worker { .. }),
            "{refused}"
        );
        assert!(
            refused
                .to_string()
                .contains("--max-cache-list-inflight-bytes-per-worker")
        );
        let _others: Vec<_> = [
            budget.acquire("w1", 2 * MIB).await.unwrap(),
            budget.acquire("w2", 2 * MIB).await.unwrap(),
            budget.acquire("w3", 2 * MIB).await.unwrap(),
        ]
        .into();
        let refused = budget.acquire("w4", MIB).await.unwrap_err();
        assert!(
            matches!(refused, BudgetExhausted::Total { .. }),
            "{refused}"
        );
        assert!(
            refused
                .to_string()
                .contains("--max-cache-list-inflight-bytes)")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_larger_than_the_share_runs_alone_rather_than_never() {
        let budget = budget(4, 1);
        let big = budget.acquire("w0", 3 * MIB).await.unwrap();
        assert_eq!(budget.in_flight_bytes(), MIB);
        assert!(budget.acquire("w0", 1).await.is_err());
        drop(big);
        budget.acquire("w0", 1).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_gives_back_what_it_took() {
        let budget = budget(2, 2);
        let held = budget.acquire("w0", 2 * MIB).await.unwrap();
        let waiting = budget.acquire("w1", MIB);
        assert!(
            tokio::time::timeout(Duration::from_millis(10), waiting)
                .await
                .is_err()
        );
        drop(held);
        assert_eq!(budget.in_flight_bytes(), 0);
        assert_eq!(budget.workers_listing(), 0);
    }
}
