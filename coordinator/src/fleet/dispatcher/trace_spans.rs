//! The leader's spans of a traced key. A trace is born at the watch event (`watch_event`, a root span:
//! the sampling decision is made there, once); each key the event queues gets an `enqueue` span under
//! it, whose context rides in the queue with the key; the dispatch of the key (`dispatch`, child of the
//! first such context) hands the trace to the worker as `Assign.traceparent`, with every coalesced
//! event's context in `Assign.trace_links`.
//!
//! Nothing here runs unless a trace was kept where it was born ([`sample_new_trace`]): with tracing off,
//! or for an unsampled event, the key path makes no span and carries no context.

use flotilla_common::{TRACE_TARGET, TraceContext, sample_new_trace};
use tracing::{Span, field, info_span};

use crate::informer::CachedObject;
use crate::queue::TraceLinks;

/// The root span of a sampled cause (a watch event, a request), kept open while its keys are queued.
pub(super) struct EventSpan {
    span: Span,
}

impl EventSpan {
    /// The root span of a watch event (`added`, `modified` or `deleted`) on `object`, if tracing is on
    /// and the sampler keeps it; `None` otherwise (an unsampled event carries nothing).
    pub(super) fn start(object: &CachedObject, event: &'static str) -> Option<Self> {
        if !sample_new_trace() {
            return None;
        }
        let span = info_span!(
            target: TRACE_TARGET,
            parent: None,
            "watch_event",
            kind = %object.kind,
            key = %object.key(),
            event,
            resource_version = object.resource_version,
        );
        TraceContext::of_span(&span)?;
        Some(Self { span })
    }

    /// The root span of a key enqueued on request (the admin API, a benchmark): that request is the
    /// key's cause, so its trace starts there, sampled as a watch event's is.
    pub(super) fn requested(controller: &str, key: &str) -> Option<Self> {
        if !sample_new_trace() {
            return None;
        }
        let span = info_span!(target: TRACE_TARGET, parent: None, "requested", controller, key);
        TraceContext::of_span(&span)?;
        Some(Self { span })
    }

    /// An `enqueue` span under the event for `key` of `controller`, ended at once; returns its context
    /// for the queue and the span, to record whether the add coalesced into a key already queued.
    pub(super) fn enqueue(&self, controller: &str, key: &str) -> (Span, Option<TraceContext>) {
        let span = info_span!(
            target: TRACE_TARGET,
            parent: &self.span,
            "enqueue",
            controller,
            key,
            coalesced = field::Empty,
        );
        let cx = TraceContext::of_span(&span);
        (span, cx)
    }
}

/// What the dispatch of one item says of it.
pub(super) struct Dispatched<'a> {
    pub(super) controller: &'a str,
    pub(super) key: &'a str,
    pub(super) shard: u32,
    pub(super) term: u64,
    pub(super) worker: &'a str,
    pub(super) attempt: u32,
    pub(super) reason: &'static str,
}

/// The `dispatch` span of an item whose key carries `traces` (not empty): a child of the first trace,
/// ended at once. Returns the `traceparent` for `Assign` (the dispatch span's context) and every
/// carried trace's `traceparent` for `Assign.trace_links`.
pub(super) fn dispatch(traces: &TraceLinks, item: &Dispatched<'_>) -> (String, Vec<String>) {
    let Some(first) = traces.first() else {
        return (String::new(), Vec::new());
    };
    let span = info_span!(
        target: TRACE_TARGET,
        parent: None,
        "dispatch",
        controller = item.controller,
        key = item.key,
        shard = item.shard,
        term = item.term,
        worker = item.worker,
        attempt = item.attempt,
        reason = item.reason,
        links = traces.as_slice().len(),
        links_dropped = traces.dropped(),
    );
    first.set_parent_of(&span);
    let traceparent = TraceContext::of_span(&span)
        .map(|cx| cx.traceparent())
        .unwrap_or_default();
    let links = traces
        .as_slice()
        .iter()
        .map(TraceContext::traceparent)
        .collect();
    (traceparent, links)
}
