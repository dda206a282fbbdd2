//! The workqueue of one controller: client-go's queue, delaying queue and rate-limiting queue as one
//! synchronous value owned by a single task.

use std::collections::VecDeque;
use std::hash::Hash;
use std::time::Duration;

use flotilla_common::TraceContext;
use foldhash::HashMap;
use tokio::time::Instant;

use super::delaying::Waiting;
use super::metrics::QueueMetrics;
use super::rate_limiter::RateLimiter;
use super::traces::{QueueWait, TraceLinks};

/// Longest delay `add_after` honours; longer ones are clamped so `now + delay` cannot overflow.
const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The workqueue of one controller, with client-go's guarantees:
///
/// * a key is queued at most once however often it is added (dirty set);
/// * a key is handed out by [`WorkQueue::get`] to at most one processor at a time (processing set);
/// * a key added while it is processed is queued again when [`WorkQueue::done`] is called, once;
/// * keys come out in the order they became ready.
///
/// Each key carries a reason `R` (why it needs a run; `()` when the owner does not care): the reason of
/// the add that made it dirty. Adds of a key already dirty coalesce into it and keep the first reason;
/// [`WorkQueue::reason`] tells a processed key's reason until its [`WorkQueue::done`].
///
/// Each key also carries the sampled traces of the adds that made it dirty or coalesced into it
/// ([`WorkQueue::add_traced`], [`WorkQueue::traces`]); with tracing off they are empty and cost nothing.
///
/// It has no locks and no tasks: one owner (the dispatcher) calls it, reads time from tokio's clock, and must
/// call [`WorkQueue::promote_due`] when [`WorkQueue::next_deadline`] passes and
/// [`WorkQueue::update_unfinished_work`] every 500 ms (client-go's period).
pub struct WorkQueue<K: Clone + Eq + Hash, R = ()> {
    name: String,
    /// Keys ready to hand out, oldest first. No duplicates; every key here is in `dirty` and not in
    /// `processing`.
    queue: VecDeque<K>,
    /// Keys that need (another) run, with the time they were first added since their last `get`,
    /// that add's reason, the traces of every traced add since and what that first add waited behind.
    /// `dirty ⊇ queue`, and a dirty key missing from `queue` is in `processing`: `done` queues it again.
    dirty: HashMap<K, (Instant, R, TraceLinks, QueueWait)>,
    /// Keys handed out by `get` and not yet `done`, with the time they were handed out, the reason
    /// they run, the traces merged into the run, and when and behind what the run was queued.
    /// Disjoint from `queue`.
    processing: HashMap<K, (Instant, R, TraceLinks, Queued)>,
    /// Keys waiting out an `add_after` delay, with why and the sampled trace they continue; independent
    /// of the sets above (a key may wait and be queued).
    waiting: Waiting<K, (R, Option<TraceContext>)>,
    rate_limiter: Box<dyn RateLimiter<K> + Send>,
    metrics: QueueMetrics,
    /// Once set, nothing is queued again and `get` returns `None`.
    shutting_down: bool,
}

impl<K: Clone + Eq + Hash, R> WorkQueue<K, R> {
    /// An empty queue called `name` (the controller; used in logs) that backs off with `rate_limiter` and
    /// reports to `metrics`.
    pub fn new(
        name: &str,
        rate_limiter: Box<dyn RateLimiter<K> + Send>,
        metrics: QueueMetrics,
    ) -> Self {
        Self {
            name: name.to_owned(),
            queue: VecDeque::new(),
            dirty: HashMap::default(),
            processing: HashMap::default(),
            waiting: Waiting::default(),
            rate_limiter,
            metrics,
            shutting_down: false,
        }
    }

    /// The name given to [`WorkQueue::new`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Marks `key` as needing a run. A key already queued stays where it is; a key being processed is queued
    /// again after its [`WorkQueue::done`]. Dropped after [`WorkQueue::shut_down`].
    pub fn add(&mut self, key: K)
    where
        R: Default,
    {
        self.add_because(key, R::default);
    }

    /// [`WorkQueue::add`] for `reason`, which is built only when the key was not dirty yet.
    pub fn add_because(&mut self, key: K, reason: impl FnOnce() -> R) {
        let _ = self.add_traced(key, reason, None);
    }

    /// [`WorkQueue::add_because`] for an add that belongs to the sampled trace `trace`: the key carries
    /// it to [`WorkQueue::traces`], and an add that coalesces into a dirty key adds its trace there
    /// (up to [`super::traces::MAX_TRACE_LINKS`]). With `None` nothing is allocated. Returns whether the key
    /// became dirty (false: it coalesced into a dirty key, or the queue is shutting down).
    pub fn add_traced(
        &mut self,
        key: K,
        reason: impl FnOnce() -> R,
        trace: Option<TraceContext>,
    ) -> bool {
        self.add_inner(key, reason, trace, false)
    }

    /// [`WorkQueue::add_traced`]; `delayed`: the add ends a rate limiter's or a requeue's delay.
    fn add_inner(
        &mut self,
        key: K,
        reason: impl FnOnce() -> R,
        trace: Option<TraceContext>,
        delayed: bool,
    ) -> bool {
        if self.shutting_down {
            return false;
        }
        if let Some(entry) = self.dirty.get_mut(&key) {
            if let Some(trace) = trace {
                entry.2.push(trace);
            }
            return false;
        }
        self.metrics.adds.inc();
        // What the add waits behind, the first that applies (for the `wait queue` span).
        let wait = match self.processing.get(&key) {
            Some((.., queued)) if queued.held => QueueWait::Held,
            Some(_) => QueueWait::Running,
            None => {
                self.queue.push_back(key.clone());
                if delayed {
                    QueueWait::RateLimited
                } else {
                    QueueWait::Queued
                }
            }
        };
        self.dirty
            .insert(key, (Instant::now(), reason(), TraceLinks::of(trace), wait));
        self.update_depth();
        true
    }

    /// Hands out the oldest ready key and moves it to processing, or `None` when nothing is ready or the
    /// queue is shut down. Never blocks: the owner waits for its own wake-ups.
    ///
    /// The caller must call [`WorkQueue::done`] exactly once for every key it gets; until then the key is not
    /// handed out again.
    pub fn get(&mut self) -> Option<K> {
        if self.shutting_down {
            return None;
        }
        let key = self.queue.pop_front()?;
        let now = Instant::now();
        // Every queued key is dirty (the invariant above), so its reason is there.
        let (added, reason, traces, wait) = self.dirty.remove(&key)?;
        self.metrics
            .queue_duration
            .observe(now.saturating_duration_since(added).as_secs_f64());
        let queued = Queued {
            since: added,
            wait,
            held: false,
        };
        self.processing
            .insert(key.clone(), (now, reason, traces, queued));
        self.update_depth();
        Some(key)
    }

    /// Why `key`, handed out by [`WorkQueue::get`] and not done yet, runs; `None` for any other key.
    pub fn reason(&self, key: &K) -> Option<&R> {
        self.processing.get(key).map(|(_, reason, ..)| reason)
    }

    /// The sampled traces merged into the run of `key` (handed out by [`WorkQueue::get`], not done
    /// yet), first first; empty for any other key, and always with tracing off.
    pub fn traces(&self, key: &K) -> &TraceLinks {
        static NONE: TraceLinks = TraceLinks::None;
        self.processing
            .get(key)
            .map_or(&NONE, |(_, _, traces, _)| traces)
    }

    /// When the run of `key` (handed out by [`WorkQueue::get`], not done yet) was first added, when
    /// it was handed out, and what it waited behind; `None` for any other key.
    pub fn queued(&self, key: &K) -> Option<(Instant, Instant, QueueWait)> {
        self.processing
            .get(key)
            .map(|(started, _, _, queued)| (queued.since, *started, queued.wait))
    }

    /// Notes that the run of `key` (processing) ended and the key now waits for its writes to be
    /// observed: an add from now on waits behind that ([`QueueWait::Held`]). Changes nothing else.
    pub fn mark_held(&mut self, key: &K) {
        if let Some((.., queued)) = self.processing.get_mut(key) {
            queued.held = true;
        }
    }

    /// Ends the processing of `key` (returned by [`WorkQueue::get`]); if it was added meanwhile, it is queued
    /// again. A key that is not being processed is ignored.
    pub fn done(&mut self, key: &K) {
        let Some((started, ..)) = self.processing.remove(key) else {
            return;
        };
        self.metrics.work_duration.observe(
            Instant::now()
                .saturating_duration_since(started)
                .as_secs_f64(),
        );
        if !self.shutting_down && self.dirty.contains_key(key) {
            self.queue.push_back(key.clone());
        }
    }

    /// Adds `key` once `delay` has passed (immediately when it is zero). A key already waiting keeps the earlier
    /// of its two ready times. Delays over a year are clamped to a year. Counts as a retry in the metrics, like
    /// client-go. Dropped after [`WorkQueue::shut_down`].
    pub fn add_after(&mut self, key: K, delay: Duration)
    where
        R: Default,
    {
        self.add_after_because(key, delay, R::default());
    }

    /// [`WorkQueue::add_after`] for `reason`.
    pub fn add_after_because(&mut self, key: K, delay: Duration, reason: R) {
        self.add_after_traced(key, delay, reason, None);
    }

    /// [`WorkQueue::add_after_because`] continuing the sampled trace `trace`: the add, when its delay
    /// is over, is traced as [`WorkQueue::add_traced`]'s (if the key already waits, the earlier entry
    /// and its trace stay).
    pub fn add_after_traced(
        &mut self,
        key: K,
        delay: Duration,
        reason: R,
        trace: Option<TraceContext>,
    ) {
        if self.shutting_down {
            return;
        }
        self.metrics.retries.inc();
        if delay.is_zero() {
            let _ = self.add_traced(key, || reason, trace);
            return;
        }
        self.waiting
            .insert(key, Instant::now() + delay.min(MAX_DELAY), (reason, trace));
    }

    /// Adds `key` after the delay the rate limiter gives it, recording one more failure of `key`.
    pub fn add_rate_limited(&mut self, key: K)
    where
        R: Default,
    {
        self.add_rate_limited_because(key, R::default());
    }

    /// [`WorkQueue::add_rate_limited`] for `reason`.
    pub fn add_rate_limited_because(&mut self, key: K, reason: R) {
        self.add_rate_limited_traced(key, reason, None);
    }

    /// [`WorkQueue::add_rate_limited_because`] continuing the sampled trace `trace` (see
    /// [`WorkQueue::add_after_traced`]): a retry stays in the trace of the change that failed.
    pub fn add_rate_limited_traced(&mut self, key: K, reason: R, trace: Option<TraceContext>) {
        if self.shutting_down {
            return;
        }
        let delay = self.rate_limiter.when(&key, Instant::now());
        self.add_after_traced(key, delay, reason, trace);
    }

    /// Stops the rate limiter tracking `key`, so its next failure backs off from the start. Call it when `key`
    /// succeeded; it does not remove the key from the queue.
    pub fn forget(&mut self, key: &K) {
        self.rate_limiter.forget(key);
    }

    /// How many failures of `key` the rate limiter counts.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.rate_limiter.num_requeues(key)
    }

    /// Adds every waiting key whose ready time is at or before `now`, earliest first, and returns how many left
    /// the waiting set (a key that was already queued is not queued twice).
    pub fn promote_due(&mut self, now: Instant) -> usize {
        let mut promoted = 0;
        while let Some((key, (reason, trace))) = self.waiting.pop_due(now) {
            let _ = self.add_inner(key, || reason, trace, true);
            promoted += 1;
        }
        promoted
    }

    /// When the next waiting key becomes ready: the owner should call [`WorkQueue::promote_due`] then.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.next_ready_at()
    }

    /// Keys ready to hand out (not processing, not waiting). The `workqueue_depth` gauge also counts keys
    /// re-added while they are processed, as client-go's does.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no key is ready to hand out.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether `key` was handed out and is not done yet.
    pub fn is_processing(&self, key: &K) -> bool {
        self.processing.contains_key(key)
    }

    /// How many keys are handed out and not done yet.
    pub fn processing_len(&self) -> usize {
        self.processing.len()
    }

    /// Stops the queue: ready and waiting keys are dropped, later adds are ignored and [`WorkQueue::get`]
    /// returns `None`. Keys being processed stay until their [`WorkQueue::done`], which then does not requeue.
    /// Unlike client-go there is no draining `get`: a coordinator that stops dispatching (lost leadership) must
    /// not hand out more work.
    pub fn shut_down(&mut self) {
        self.shutting_down = true;
        self.queue.clear();
        self.dirty.clear();
        self.waiting.clear();
        self.update_depth();
    }

    /// Whether [`WorkQueue::shut_down`] was called.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Sets `workqueue_unfinished_work_seconds` (summed age of all keys being processed) and
    /// `workqueue_longest_running_processor_seconds` (the oldest one's age) as of `now`.
    pub fn update_unfinished_work(&self, now: Instant) {
        let (total, oldest) =
            self.processing
                .values()
                .fold((0.0, 0.0_f64), |(total, oldest), (started, ..)| {
                    let age = now.saturating_duration_since(*started).as_secs_f64();
                    (total + age, oldest.max(age))
                });
        self.metrics.unfinished_work.set(total);
        self.metrics.longest_running.set(oldest);
    }

    /// `workqueue_depth` counts every key that needs a run, including those re-added while processing, as
    /// client-go does; `len()` counts only those ready now.
    fn update_depth(&self) {
        self.metrics
            .depth
            .set(i64::try_from(self.dirty.len()).unwrap_or(i64::MAX));
    }
}

/// When and behind what a processing key's run was queued (for the `wait queue` span).
#[derive(Debug, Clone, Copy)]
struct Queued {
    /// The first add of the run.
    since: Instant,
    /// What that add waited behind.
    wait: QueueWait,
    /// The run ended and its writes are awaited ([`WorkQueue::mark_held`]).
    held: bool,
}

#[cfg(test)]
#[path = "work_queue_tests.rs"]
#[allow(clippy::unwrap_used)]
mod tests;

#[cfg(test)]
#[path = "work_queue_bounds_tests.rs"]
#[allow(clippy::unwrap_used)]
mod bounds_tests;
