//! A deadline-ordered queue of pending pod transitions, polled by one task instead of one sleep per pod.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use tokio::time::Instant;

/// Items due at instants; items with equal deadlines come out in insertion order.
pub(crate) struct Timers<T> {
    heap: BinaryHeap<Reverse<Entry<T>>>,
    seq: u64,
}

struct Entry<T> {
    at: Instant,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl<T> Timers<T> {
    pub(crate) fn new() -> Self {
        Timers {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    pub(crate) fn push(&mut self, at: Instant, item: T) {
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            at,
            seq: self.seq,
            item,
        }));
    }

    /// The earliest deadline, if anything is queued.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(entry)| entry.at)
    }

    /// Removes and returns every item due at or before `now`, earliest first.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Vec<T> {
        let mut due = Vec::new();
        while self
            .heap
            .peek()
            .is_some_and(|Reverse(entry)| entry.at <= now)
        {
            if let Some(Reverse(entry)) = self.heap.pop() {
                due.push(entry.item);
            }
        }
        due
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn items_come_out_by_deadline_then_insertion_order() {
        let now = Instant::now();
        let mut timers = Timers::new();
        timers.push(now + Duration::from_millis(20), "late");
        timers.push(now + Duration::from_millis(10), "first");
        timers.push(now + Duration::from_millis(10), "second");
        assert_eq!(
            timers.next_deadline(),
            Some(now + Duration::from_millis(10))
        );
        assert_eq!(timers.pop_due(now), Vec::<&str>::new());
        assert_eq!(
            timers.pop_due(now + Duration::from_millis(10)),
            vec!["first", "second"]
        );
        assert_eq!(timers.pop_due(now + Duration::from_secs(1)), vec!["late"]);
        assert_eq!(timers.next_deadline(), None);
    }
}
