//! Tests of the workqueue, on paused tokio time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::{Instant, advance};

use super::*;
use crate::queue::{QueueMetricsFamilies, default_controller_rate_limiter};

fn queue() -> WorkQueue<&'static str> {
    WorkQueue::new(
        "test",
        Box::new(default_controller_rate_limiter()),
        QueueMetrics::unregistered("test"),
    )
}

fn queue_with_reasons() -> WorkQueue<&'static str, &'static str> {
    WorkQueue::new(
        "test",
        Box::new(default_controller_rate_limiter()),
        QueueMetrics::unregistered("test"),
    )
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn a_key_added_twice_is_queued_once() {
    let mut q = queue();
    q.add("a");
    q.add("a");
    q.add("b");
    assert_eq!(q.len(), 2);
    assert_eq!(q.get(), Some("a"));
    assert_eq!(q.get(), Some("b"));
    assert_eq!(q.get(), None);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_key_is_not_handed_out_again_before_done() {
    let mut q = queue();
    q.add("a");
    assert_eq!(q.get(), Some("a"));
    q.add("a");
    assert_eq!(q.len(), 0, "a processing key is not ready");
    assert_eq!(q.get(), None);
    assert!(q.is_processing(&"a"));
    assert_eq!(q.processing_len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_key_re_added_during_processing_runs_once_more_after_done() {
    let mut q = queue();
    q.add("a");
    let key = q.get().unwrap();
    q.add("a");
    q.add("a");
    q.done(&key);
    assert!(!q.is_processing(&"a"));
    assert_eq!(q.get(), Some("a"));
    q.done(&"a");
    assert_eq!(q.get(), None, "the second run was not followed by a third");
}

#[tokio::test(start_paused = true)]
async fn done_without_a_re_add_does_not_requeue() {
    let mut q = queue();
    q.add("a");
    q.get();
    q.done(&"a");
    q.done(&"never-got");
    assert_eq!(q.get(), None);
    assert_eq!(q.processing_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn keys_come_out_in_the_order_they_were_added() {
    let mut q = queue();
    for key in ["c", "a", "b"] {
        q.add(key);
    }
    let order: Vec<_> = std::iter::from_fn(|| q.get()).collect();
    assert_eq!(order, vec!["c", "a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn add_after_holds_a_key_until_its_delay_has_passed() {
    let mut q = queue();
    let start = Instant::now();
    q.add_after("a", ms(100));
    assert_eq!(q.next_deadline(), Some(start + ms(100)));
    advance(ms(99)).await;
    assert_eq!(q.promote_due(Instant::now()), 0);
    assert_eq!(q.get(), None);
    advance(ms(1)).await;
    assert_eq!(q.promote_due(Instant::now()), 1);
    assert_eq!(q.next_deadline(), None);
    assert_eq!(q.get(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn add_after_keeps_the_earliest_ready_time_of_a_key() {
    let mut q = queue();
    let start = Instant::now();
    q.add_after("a", ms(500));
    q.add_after("a", ms(100));
    q.add_after("a", ms(300));
    assert_eq!(q.next_deadline(), Some(start + ms(100)));
    advance(ms(100)).await;
    assert_eq!(q.promote_due(Instant::now()), 1);
    assert_eq!(
        q.next_deadline(),
        None,
        "the later entries were merged, not kept"
    );
    assert_eq!(q.get(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn add_after_with_no_delay_queues_at_once() {
    let mut q = queue();
    q.add_after("a", Duration::ZERO);
    assert_eq!(q.next_deadline(), None);
    assert_eq!(q.get(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn due_keys_are_promoted_earliest_first() {
    let mut q = queue();
    q.add_after("late", ms(30));
    q.add_after("early", ms(10));
    q.add_after("middle", ms(20));
    advance(ms(30)).await;
    assert_eq!(q.promote_due(Instant::now()), 3);
    let order: Vec<_> = std::iter::from_fn(|| q.get()).collect();
    assert_eq!(order, vec!["early", "middle", "late"]);
}

#[tokio::test(start_paused = true)]
async fn an_absurd_delay_is_clamped_instead_of_overflowing() {
    let mut q = queue();
    q.add_after("a", Duration::MAX);
    assert_eq!(q.next_deadline(), Some(Instant::now() + MAX_DELAY));
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_backs_off_exponentially_and_forget_resets_it() {
    let mut q = queue();
    let start = Instant::now();
    q.add_rate_limited("a");
    assert_eq!(q.next_deadline(), Some(start + ms(5)));
    assert_eq!(q.num_requeues(&"a"), 1);
    advance(ms(5)).await;
    q.promote_due(Instant::now());
    let key = q.get().unwrap();
    q.add_rate_limited(key);
    q.done(&key);
    assert_eq!(q.next_deadline(), Some(Instant::now() + ms(10)));
    assert_eq!(q.num_requeues(&"a"), 2);
    q.forget(&"a");
    assert_eq!(q.num_requeues(&"a"), 0);
    q.add_rate_limited("b");
    q.add_rate_limited("a");
    assert_eq!(q.num_requeues(&"a"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_key_requeued_while_processing_runs_again_after_done_and_its_delay() {
    let mut q = queue();
    q.add("a");
    let key = q.get().unwrap();
    q.add_after(key, ms(50));
    q.done(&key);
    assert_eq!(q.get(), None);
    advance(ms(50)).await;
    q.promote_due(Instant::now());
    assert_eq!(q.get(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn after_shut_down_get_returns_none_and_adds_are_dropped() {
    let mut q = queue();
    q.add("a");
    q.add("b");
    let key = q.get().unwrap();
    q.add_after("c", ms(10));
    q.shut_down();
    assert!(q.shutting_down());
    q.add("d");
    q.add(key);
    q.add_after("e", ms(1));
    q.add_rate_limited("f");
    assert_eq!(q.get(), None);
    assert_eq!(q.len(), 0);
    assert_eq!(q.next_deadline(), None);
    assert!(q.is_processing(&key), "in-flight work is still tracked");
    q.done(&key);
    assert_eq!(q.processing_len(), 0);
    assert_eq!(q.get(), None);
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_adds_gets_retries_and_running_work() {
    let families = QueueMetricsFamilies::default();
    let metrics = families.for_queue("replicaset");
    let mut q: WorkQueue<&str> = WorkQueue::new(
        "replicaset",
        Box::new(default_controller_rate_limiter()),
        metrics.clone(),
    );
    q.add("a");
    q.add("a");
    q.add("b");
    assert_eq!(metrics.adds(), 2);
    assert_eq!(metrics.depth(), 2);
    let a = q.get().unwrap();
    assert_eq!(metrics.depth(), 1);
    q.add(a);
    assert_eq!(
        metrics.depth(),
        2,
        "a re-added key counts as client-go counts it"
    );
    assert_eq!(metrics.adds(), 3);
    q.add_rate_limited("c");
    q.add_after("d", ms(1));
    assert_eq!(metrics.retries(), 2);
    let b = q.get().unwrap();
    advance(ms(1500)).await;
    q.update_unfinished_work(Instant::now());
    assert!(
        (metrics.unfinished_work_seconds() - 3.0).abs() < 1e-9,
        "{}",
        metrics.unfinished_work_seconds()
    );
    assert!((metrics.longest_running_processor_seconds() - 1.5).abs() < 1e-9);
    q.done(&a);
    q.done(&b);
    q.update_unfinished_work(Instant::now());
    assert_eq!(metrics.unfinished_work_seconds(), 0.0);
    assert_eq!(metrics.longest_running_processor_seconds(), 0.0);
}

/// An operation of the property test; key indices are taken modulo the key space.
#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    Get,
    /// Done on the n-th key (mod how many) the model has in processing.
    Done(usize),
    AddAfter(u8, u64),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..6).prop_map(Op::Add),
        3 => Just(Op::Get),
        2 => any::<usize>().prop_map(Op::Done),
        2 => (0u8..6, 0u64..50).prop_map(|(k, d)| Op::AddAfter(k, d)),
        2 => (0u64..60).prop_map(Op::Advance),
    ]
}

/// The workqueue's semantics written out as plainly as possible.
#[derive(Default)]
struct Model {
    ready: VecDeque<u8>,
    processing: HashSet<u8>,
    /// Added while processing: queued again at done.
    rerun: HashSet<u8>,
    /// Ready time and insertion sequence of each waiting key.
    waiting: HashMap<u8, (Instant, u64)>,
    seq: u64,
}

impl Model {
    fn add(&mut self, k: u8) {
        if self.processing.contains(&k) {
            self.rerun.insert(k);
        } else if !self.ready.contains(&k) {
            self.ready.push_back(k);
        }
    }

    fn get(&mut self) -> Option<u8> {
        let k = self.ready.pop_front()?;
        self.processing.insert(k);
        Some(k)
    }

    fn done(&mut self, k: u8) {
        if self.processing.remove(&k) && self.rerun.remove(&k) {
            self.ready.push_back(k);
        }
    }

    fn add_after(&mut self, k: u8, ready_at: Instant) {
        match self.waiting.get(&k) {
            Some(&(existing, _)) if existing <= ready_at => {}
            _ => {
                self.waiting.insert(k, (ready_at, self.seq));
                self.seq += 1;
            }
        }
    }

    fn promote(&mut self, now: Instant) {
        let mut due: Vec<(Instant, u64, u8)> = self
            .waiting
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(&k, &(at, seq))| (at, seq, k))
            .collect();
        due.sort();
        for (_, _, k) in due {
            self.waiting.remove(&k);
            self.add(k);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn random_operations_match_the_reference_model_and_lose_no_key(ops in proptest::collection::vec(op(), 1..120)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async move {
            let mut q: WorkQueue<u8> =
                WorkQueue::new("prop", Box::new(default_controller_rate_limiter()), QueueMetrics::unregistered("prop"));
            let mut model = Model::default();
            // Keys added (now or later) since get last returned them: each must come out of get again.
            let mut owed: HashSet<u8> = HashSet::new();
            for op in ops {
                match op {
                    Op::Add(k) => {
                        q.add(k);
                        model.add(k);
                        owed.insert(k);
                    }
                    Op::Get => {
                        let got = q.get();
                        prop_assert_eq!(got, model.get());
                        if let Some(k) = got {
                            prop_assert_eq!(q.processing_len(), model.processing.len());
                            owed.remove(&k);
                        }
                    }
                    Op::Done(n) => {
                        let mut in_flight: Vec<u8> = model.processing.iter().copied().collect();
                        in_flight.sort();
                        if !in_flight.is_empty() {
                            let k = in_flight[n % in_flight.len()];
                            q.done(&k);
                            model.done(k);
                        }
                    }
                    Op::AddAfter(k, d) => {
                        q.add_after(k, ms(d));
                        if d == 0 {
                            model.add(k);
                        } else {
                            model.add_after(k, Instant::now() + ms(d));
                        }
                        owed.insert(k);
                    }
                    Op::Advance(d) => {
                        advance(ms(d)).await;
                        q.promote_due(Instant::now());
                        model.promote(Instant::now());
                    }
                }
                prop_assert_eq!(q.len(), model.ready.len(), "depth is the number of ready keys");
                prop_assert_eq!(q.next_deadline(), model.waiting.values().map(|(at, _)| *at).min());
                for k in &model.processing {
                    prop_assert!(q.is_processing(k));
                    prop_assert!(!q.queue.contains(k), "key {} is both queued and processing", k);
                }
                prop_assert!(q.queue.iter().all(|k| q.dirty.contains_key(k)), "dirty must contain every queued key");
            }
            // Finish everything in flight and let every delay pass: every owed key must come out.
            for _ in 0..4 {
                let in_flight: Vec<u8> = model.processing.iter().copied().collect();
                for k in in_flight {
                    q.done(&k);
                    model.done(k);
                }
                advance(Duration::from_secs(1)).await;
                q.promote_due(Instant::now());
                while let Some(k) = q.get() {
                    owed.remove(&k);
                    model.ready.retain(|r| *r != k);
                    model.processing.insert(k);
                }
            }
            prop_assert!(owed.is_empty(), "keys lost: {:?}", owed);
            prop_assert_eq!(q.waiting.len(), 0);
            Ok(())
        })?;
    }
}

#[test]
fn waiting_keeps_one_entry_per_key_at_its_earliest_time() {
    let mut waiting = Waiting::default();
    let t0 = Instant::now();
    waiting.insert("a", t0 + ms(20), ());
    waiting.insert("a", t0 + ms(10), ());
    waiting.insert("a", t0 + ms(30), ());
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting.ready_at(&"a"), Some(t0 + ms(10)));
}

#[tokio::test(start_paused = true)]
async fn a_key_runs_for_the_reason_of_the_add_that_made_it_dirty() {
    let mut q = queue_with_reasons();
    q.add_because("a", || "event");
    q.add_because("a", || "coalesced");
    assert_eq!(q.reason(&"a"), None, "not handed out yet");
    assert_eq!(q.get(), Some("a"));
    assert_eq!(q.reason(&"a"), Some(&"event"));
    // Re-added while processed: the next run has the re-add's reason, this one keeps its own.
    q.add_because("a", || "resync");
    assert_eq!(q.reason(&"a"), Some(&"event"));
    q.done(&"a");
    assert_eq!(q.reason(&"a"), None);
    assert_eq!(q.get(), Some("a"));
    assert_eq!(q.reason(&"a"), Some(&"resync"));
    q.done(&"a");
}

#[tokio::test(start_paused = true)]
async fn a_delayed_key_keeps_the_reason_of_its_earliest_entry() {
    let mut q = queue_with_reasons();
    q.add_after_because("a", ms(20), "requeue_after");
    q.add_after_because("a", ms(10), "retry");
    q.add_after_because("a", ms(30), "late");
    advance(ms(10)).await;
    q.promote_due(Instant::now());
    assert_eq!(q.get(), Some("a"));
    assert_eq!(q.reason(&"a"), Some(&"retry"));
    q.add_rate_limited_because("b", "failed");
    assert_eq!(q.get(), None, "a rate-limited key waits");
    advance(ms(5)).await;
    q.promote_due(Instant::now());
    assert_eq!(q.get(), Some("b"));
    assert_eq!(q.reason(&"b"), Some(&"failed"));
}

fn trace(n: u8) -> flotilla_common::TraceContext {
    flotilla_common::TraceContext::parse(&format!("00-{:032x}-{:016x}-01", n + 1, n + 1)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn traces_of_coalesced_adds_travel_with_the_key_to_its_run() {
    let mut q = queue_with_reasons();
    q.add_traced("a", || "first", Some(trace(1)));
    q.add_traced("a", || "second", None);
    q.add_traced("a", || "third", Some(trace(3)));
    assert_eq!(q.get(), Some("a"));
    assert_eq!(q.reason(&"a"), Some(&"first"));
    assert_eq!(q.traces(&"a").as_slice(), [trace(1), trace(3)]);
    // Added while processing: the next run carries only the traces added since.
    q.add_traced("a", || "fourth", Some(trace(4)));
    q.done(&"a");
    assert!(q.traces(&"a").is_empty(), "not processing any more");
    assert_eq!(q.get(), Some("a"));
    assert_eq!(q.traces(&"a").first(), Some(trace(4)));
}

#[tokio::test(start_paused = true)]
async fn untraced_adds_carry_no_traces() {
    let mut q = queue();
    q.add("a");
    q.add_after("b", Duration::ZERO);
    assert_eq!(q.get(), Some("a"));
    assert!(q.traces(&"a").is_empty());
    assert!(q.traces(&"zzz").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_retry_carries_the_failed_runs_trace_through_its_delay() {
    let mut q = queue_with_reasons();
    q.add_traced("a", || "changed", Some(trace(1)));
    assert_eq!(q.get(), Some("a"));
    let failed = q.traces(&"a").first();
    q.add_rate_limited_traced("a", "retry", failed);
    q.done(&"a");
    assert_eq!(q.get(), None, "the retry waits out its backoff");
    tokio::time::advance(ms(5)).await;
    q.promote_due(tokio::time::Instant::now());
    assert_eq!(q.get(), Some("a"));
    assert_eq!(q.reason(&"a"), Some(&"retry"));
    assert_eq!(q.traces(&"a").as_slice(), [trace(1)]);
    // Without a trace the delayed add carries none.
    q.add_after_because("a", ms(10), "later");
    q.done(&"a");
    tokio::time::advance(ms(10)).await;
    q.promote_due(tokio::time::Instant::now());
    assert_eq!(q.get(), Some("a"));
    assert!(q.traces(&"a").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_run_says_when_it_was_first_queued_and_what_it_waited_behind() {
    let mut q = queue();
    let t0 = Instant::now();
    q.add("a");
    advance(ms(5)).await;
    q.add("a");
    assert_eq!(q.get(), Some("a"));
    assert_eq!(
        q.queued(&"a"),
        Some((t0, t0 + ms(5), QueueWait::Queued)),
        "the first add counts"
    );
    assert_eq!(q.queued(&"b"), None);

    // Added while its run is out: behind the run.
    q.add("a");
    q.done(&"a");
    assert_eq!(q.get(), Some("a"));
    assert_eq!(q.queued(&"a").map(|(.., w)| w), Some(QueueWait::Running));

    // Added while the run's writes are awaited: behind the hold; the queue itself behaves the same.
    q.mark_held(&"a");
    q.add("a");
    assert_eq!(q.get(), None, "still processing");
    q.done(&"a");
    assert_eq!(q.get(), Some("a"));
    assert_eq!(q.queued(&"a").map(|(.., w)| w), Some(QueueWait::Held));
    q.done(&"a");

    // Back from a retry's backoff.
    q.add_rate_limited("b");
    let due = q.next_deadline().unwrap();
    advance(due.saturating_duration_since(Instant::now())).await;
    q.promote_due(Instant::now());
    assert_eq!(q.get(), Some("b"));
    assert_eq!(
        q.queued(&"b").map(|(.., w)| w),
        Some(QueueWait::RateLimited)
    );
    assert_eq!(QueueWait::RateLimited.label(), "rate_limited");
}

#[tokio::test(start_paused = true)]
async fn adding_each_key_of_an_event_once_leaves_the_queue_as_adding_every_repeat() {
    // The dispatcher collapses one event's repeated keys before adding them: the queue must end up
    // the same, as client-go's dirty set would (a repeat only coalesces and keeps the first reason).
    let event: [(&str, &str); 5] = [("a", "1"), ("b", "2"), ("a", "3"), ("c", "4"), ("b", "5")];
    let mut repeated = queue_with_reasons();
    let mut distinct = queue_with_reasons();
    for q in [&mut repeated, &mut distinct] {
        q.add_because("b", || "earlier");
        assert_eq!(q.get(), Some("b"), "b is running when the event comes");
    }
    for (key, reason) in event {
        repeated.add_because(key, || reason);
    }
    for (key, reason) in [("a", "1"), ("b", "2"), ("c", "4")] {
        distinct.add_because(key, || reason);
    }
    for q in [&mut repeated, &mut distinct] {
        q.done(&"b");
    }
    let drain = |q: &mut WorkQueue<&'static str, &'static str>| {
        let mut out = Vec::new();
        while let Some(key) = q.get() {
            out.push((key, *q.reason(&key).unwrap()));
            q.done(&key);
        }
        out
    };
    let order = drain(&mut repeated);
    assert_eq!(order, [("a", "1"), ("c", "4"), ("b", "2")]);
    assert_eq!(drain(&mut distinct), order);
}
