//! The sampled traces a queued key carries: the watch events whose adds made or kept the key dirty,
//! first one first. It travels with the key from enqueue to dispatch, where the first becomes the
//! parent of the dispatch (and so of the worker's reconcile) and every one a link.

use flotilla_common::TraceContext;

/// At most this many traces are kept per queued key: a hot key can coalesce thousands of events, and a
/// span with thousands of links helps no one (Jaeger shows the first few). The rest are counted.
pub const MAX_TRACE_LINKS: usize = 32;

/// The traces merged into one queued key. Empty (no allocation) when tracing is off or no event was
/// sampled; one trace inline; a vector only when sampled events coalesce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TraceLinks {
    /// No sampled event queued the key.
    #[default]
    None,
    /// One sampled event queued it.
    One(TraceContext),
    /// Several sampled events coalesced into it, first first (at most [`MAX_TRACE_LINKS`]).
    Many {
        /// The traces kept.
        traces: Vec<TraceContext>,
        /// How many more coalesced beyond the cap.
        dropped: u32,
    },
}

impl TraceLinks {
    /// Links holding `trace`, if any.
    pub fn of(trace: Option<TraceContext>) -> Self {
        trace.map_or(Self::None, Self::One)
    }

    /// Adds a trace that coalesced into the key; past [`MAX_TRACE_LINKS`] it is only counted.
    pub fn push(&mut self, trace: TraceContext) {
        match self {
            Self::None => *self = Self::One(trace),
            Self::One(first) => {
                *self = Self::Many {
                    traces: vec![*first, trace],
                    dropped: 0,
                }
            }
            Self::Many { traces, dropped } => {
                if traces.len() < MAX_TRACE_LINKS {
                    traces.push(trace);
                } else {
                    *dropped = dropped.saturating_add(1);
                }
            }
        }
    }

    /// The trace of the add that made the key dirty (the parent of its dispatch), if it was sampled —
    /// or else of the first sampled add that coalesced into it.
    pub fn first(&self) -> Option<TraceContext> {
        self.as_slice().first().copied()
    }

    /// Every trace kept, first first.
    pub fn as_slice(&self) -> &[TraceContext] {
        match self {
            Self::None => &[],
            Self::One(trace) => std::slice::from_ref(trace),
            Self::Many { traces, .. } => traces,
        }
    }

    /// How many traces coalesced beyond the cap and were not kept.
    pub fn dropped(&self) -> u32 {
        match self {
            Self::Many { dropped, .. } => *dropped,
            _ => 0,
        }
    }

    /// Whether no trace is carried.
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::None)
    }
}

/// What a queued key waited behind before its run, best effort, the first that applies: the key was
/// still running when added (`running`), or waiting for its last run's writes to be observed (`held`),
/// or came back from a retry's backoff or a requeue's delay (`rate_limited`); otherwise it only waited
/// its turn (`queued`). The dispatcher adds `no_worker` (no credits, or no owner of its shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueWait {
    /// Waited its turn in the queue.
    Queued,
    /// Added while a run of the key was out: the per-key serialization.
    Running,
    /// Added while the key was held for read-your-writes.
    Held,
    /// Added when a delay (backoff, requeue-after) ended.
    RateLimited,
}

impl QueueWait {
    /// The `wait.reason` of the `wait queue` span.
    pub fn label(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Held => "held",
            Self::RateLimited => "rate_limited",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(n: u8) -> TraceContext {
        TraceContext::parse(&format!(
            "00-{:032x}-{:016x}-01",
            u128::from(n) + 1,
            u64::from(n) + 1
        ))
        .expect("valid")
    }

    #[test]
    fn coalesced_traces_are_kept_first_first_up_to_the_cap_and_the_rest_counted() {
        let mut links = TraceLinks::of(None);
        assert!(links.is_empty());
        links.push(trace(0));
        assert_eq!(links, TraceLinks::One(trace(0)));
        for n in 1..40 {
            links.push(trace(n));
        }
        assert_eq!(links.as_slice().len(), MAX_TRACE_LINKS);
        assert_eq!(links.first(), Some(trace(0)));
        assert_eq!(links.as_slice()[31], trace(31));
        assert_eq!(links.dropped(), 40 - 32);
    }

    #[test]
    fn links_without_a_trace_stay_small() {
        // The queue's entries carry this on every key: no heap, and no bigger than a vector and a tag.
        assert!(std::mem::size_of::<TraceLinks>() <= 32);
    }
}
