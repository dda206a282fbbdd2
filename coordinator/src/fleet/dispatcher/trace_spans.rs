//! The leader's spans of a traced key. A trace is born at the watch event (`watch_event`, a root span:
//! the sampling decision is made there, once); each key the event queues gets an `enqueue` span under
//! it, whose context rides in the queue with the key; the dispatch of the key (`dispatch`, child of the
//! first such context) hands the trace to the worker as `Assign.traceparent`, with every coalesced
//! event's context in `Assign.trace_links`.
//!
//! Nothing here runs unless a trace was kept where it was born ([`sample_new_trace`]): with tracing off,
//! or for an unsampled event, the key path makes no span and carries no context.
//!
//! Exported names and attributes follow OpenTelemetry's conventions where they exist (`k8s.*`), and
//! every number is exported as a number: `tracing-opentelemetry` turns `u64` and `usize` fields into
//! strings (it has no `record_u64`), so numbers are recorded as `i64`.

use std::time::{Duration, SystemTime};

use flotilla_common::{Reason, TRACE_TARGET, TraceContext, record_wait, sample_new_trace};
use opentelemetry::KeyValue;
use tracing::{Span, field, info_span};

use super::super::mapping::Via;
use crate::informer::CachedObject;
use crate::queue::{QueueWait, TraceLinks};

/// A number as an exported integer attribute (saturating: none of ours come near `i64::MAX`).
fn int(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// The root span of a sampled cause (a watch event, a request), kept open while its keys are queued.
pub(super) struct EventSpan {
    span: Span,
}

impl EventSpan {
    /// The root span of a watch event (`added`, `modified` or `deleted`) on `object`, if tracing is on
    /// and the sampler keeps it; `None` otherwise (an unsampled event carries nothing). An event that
    /// echoes a traced write (`echoes`: the write request's span) is kept whatever the sampler says,
    /// and links to that request: the link is the causal edge across controllers, a link and not a
    /// parent because the event is a trace of its own (its keys, their runs) that the write caused,
    /// as OpenTelemetry advises for a batch or a message whose producer is another trace.
    pub(super) fn start(
        object: &CachedObject,
        event: &'static str,
        echoes: Option<TraceContext>,
    ) -> Option<Self> {
        if echoes.is_none() && !sample_new_trace() {
            return None;
        }
        let resource = object.kind.plural.as_str();
        let name = match &object.namespace {
            Some(ns) => format!("{resource} {ns}/{} {event}", object.name),
            None => format!("{resource} {} {event}", object.name),
        };
        let span = info_span!(
            target: TRACE_TARGET,
            parent: None,
            "watch_event",
            otel.name = name.as_str(),
            kind = %object.kind,
            key = %object.key(),
            event,
            k8s.resource = resource,
            k8s.namespace.name = field::Empty,
            k8s.object.name = object.name.as_str(),
            resource_version = int(object.resource_version),
        );
        if let Some(ns) = &object.namespace {
            span.record("k8s.namespace.name", ns.as_str());
        }
        if let Some(write) = echoes {
            write.link_from_as(&span, "write");
        }
        TraceContext::of_span(&span)?;
        Some(Self { span })
    }

    /// The root span of a key enqueued on request (the admin API, a benchmark): that request is the
    /// key's cause, so its trace starts there, sampled as a watch event's is.
    pub(super) fn requested(controller: &str, key: &str) -> Option<Self> {
        if !sample_new_trace() {
            return None;
        }
        let name = format!("requested {controller} {key}");
        let span = info_span!(
            target: TRACE_TARGET,
            parent: None,
            "requested",
            otel.name = name.as_str(),
            controller,
            key,
        );
        TraceContext::of_span(&span)?;
        Some(Self { span })
    }

    /// The `enqueue` span under the event for `key` of `controller`, reached through the rules `via`
    /// (one per key and event; none for a requested key), ended at once; returns its context for the
    /// queue and the span, to record whether the add coalesced into a key already queued.
    pub(super) fn enqueue(
        &self,
        controller: &str,
        key: &str,
        via: Via,
    ) -> (Span, Option<TraceContext>) {
        let span = info_span!(
            target: TRACE_TARGET,
            parent: &self.span,
            "enqueue",
            controller,
            key,
            mapping = field::Empty,
            coalesced = field::Empty,
        );
        // A key queued on request was reached by no rule.
        if via != Via::default() {
            span.record("mapping", via.label().as_str());
        }
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
    pub(super) reason: Option<&'a Reason>,
}

/// The `dispatch` span of an item whose key carries `traces` (not empty): a child of the first trace,
/// ended at once. Returns the `traceparent` for `Assign` (the dispatch span's context), every carried
/// trace's `traceparent` for `Assign.trace_links`, and the dispatch span's context (the parent of what
/// the run's writes later wait for).
pub(super) fn dispatch(
    traces: &TraceLinks,
    item: &Dispatched<'_>,
) -> (String, Vec<String>, Option<TraceContext>) {
    let Some(first) = traces.first() else {
        return (String::new(), Vec::new(), None);
    };
    let span = info_span!(
        target: TRACE_TARGET,
        parent: None,
        "dispatch",
        controller = item.controller,
        key = item.key,
        shard = int(item.shard),
        term = int(item.term),
        worker = item.worker,
        attempt = int(item.attempt),
        reason = item.reason.map_or("unknown", Reason::name),
        cause.kind = field::Empty,
        cause.key = field::Empty,
        links = int(traces.as_slice().len()),
        links_dropped = int(traces.dropped()),
    );
    if let Some(Reason::ObjectChanged { kind, key }) = item.reason {
        span.record("cause.kind", kind.as_str());
        span.record("cause.key", key.as_str());
    }
    first.set_parent_of(&span);
    let cx = TraceContext::of_span(&span);
    let traceparent = cx.map(|cx| cx.traceparent()).unwrap_or_default();
    let links = traces
        .as_slice()
        .iter()
        .map(TraceContext::traceparent)
        .collect();
    (traceparent, links, cx)
}

/// Waits in the queue shorter than this make no span: a traced key that was dispatched at once has
/// nothing to explain.
const MIN_QUEUE_WAIT: Duration = Duration::from_millis(1);

/// The `wait queue` span of a traced run, under the first `enqueue` span it carries (`parent`): from
/// the run's first add (`queued`) to its dispatch now, if that is over [`MIN_QUEUE_WAIT`]. Why it
/// waited, best effort, the first that applies: behind what its add found (`wait`: the key running,
/// held, or delayed), else `no_worker` when it left the queue (`taken`) well before it could be sent
/// (no worker with credits, no owner of its shard, its shard moving), else `queued`.
pub(super) fn queue_wait(
    parent: &TraceContext,
    queued: tokio::time::Instant,
    taken: tokio::time::Instant,
    wait: QueueWait,
) {
    let now = tokio::time::Instant::now();
    let waited = now.saturating_duration_since(queued);
    if waited <= MIN_QUEUE_WAIT {
        return;
    }
    let why = match wait {
        QueueWait::Queued if now.saturating_duration_since(taken) > MIN_QUEUE_WAIT => "no_worker",
        other => other.label(),
    };
    let end = SystemTime::now();
    let start = end.checked_sub(waited).unwrap_or(end);
    record_wait(
        parent,
        "queue",
        start,
        end,
        [KeyValue::new(QUEUE_WAIT_CAUSE, why)],
    );
}

/// The attribute of a `wait queue` span saying what the key waited behind (`running`, `held`,
/// `rate_limited`, `no_worker`, `queued`); `wait.reason` is `queue`, as `record_wait` names the span.
const QUEUE_WAIT_CAUSE: &str = "wait.cause";
