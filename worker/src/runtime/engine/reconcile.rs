//! Starting one reconcile, the I/O side of the machine's `Spawn`: its span (joined to the leader's
//! trace when the item carries one), its journal lines, the prefetch of what the leader could not ship,
//! and the task that runs it under the session's cancellation token and reports a [`Finished`] when it
//! ends on its own (a cancelled reconcile reports nothing).

use std::sync::Arc;

use flotilla_common::{Reason, TRACE_TARGET, sample_new_trace};
use flotilla_sdk::Context;
use flotilla_sdk::host::{Outcome, WorkItem, WriteJournal};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

use super::super::ledger::Assigned;
use super::super::prefetch;
use super::super::reconcile_journal::{self, JournalEntry, ReconcileJournal};
use super::super::wire::DoneOutcome;
use super::Shared;
use super::machine::Finished;

/// The `reconcile` span of `item` on `worker`, of the given target (exported) or the default one.
/// `reason` is the reason's short label, as on the leader's `dispatch` span, and `cause.kind` /
/// `cause.key` name the object when the reason does ([`record_cause`]). Numbers are `i64`: the
/// OpenTelemetry layer exports unsigned fields as strings.
macro_rules! reconcile_span {
    ($(target: $target:expr,)? parent: $parent:expr, $item:expr, $worker:expr) => {
        info_span!(
            $(target: $target,)?
            parent: $parent,
            "reconcile",
            controller = %$item.controller,
            key = %$item.key,
            shard = i64::from($item.shard),
            term = i64::try_from($item.term).unwrap_or(i64::MAX),
            worker = %$worker,
            attempt = i64::from($item.attempt),
            reason = $item.reason.name(),
            cause.kind = tracing::field::Empty,
            cause.key = tracing::field::Empty,
            outcome = tracing::field::Empty,
        )
    };
}

/// Records on `span` the object `reason` names, if it names one.
fn record_cause(span: &tracing::Span, reason: &Reason) {
    if let Reason::ObjectChanged { kind, key } = reason {
        span.record("cause.kind", kind.as_str());
        span.record("cause.key", key.as_str());
    }
}

/// Where a session's reconciles run and report.
pub(crate) struct Reconciles<'a> {
    pub(crate) shared: &'a Shared,
    /// Cancelled to stop every reconcile of the session; each runs under a child.
    pub(crate) cancel: &'a CancellationToken,
    /// Where they report when they end; a closed channel means the session is over.
    pub(crate) finished: &'a mpsc::Sender<Finished>,
    /// `--reconcile-journal`: every reconcile's start and end.
    pub(crate) journal: Option<&'a Arc<ReconcileJournal>>,
}

impl Reconciles<'_> {
    /// Starts reconciling `item` in a task of its own; an item of a controller this worker does not
    /// run is ignored (the ledger refuses those before they get here).
    pub(crate) fn spawn(&self, item: Assigned) {
        let Some(slot) = self.shared.controllers.get(&item.controller) else {
            return;
        };
        // Exported — the child of the leader's dispatch span, or (a retry, a key the leader did not
        // trace) a root the sampler keeps — a reconcile is a span of the trace target with no `tracing`
        // parent: under this session's span every reconcile would join one endless trace. Otherwise it
        // is a log span under the session span, which the exporter never sees.
        let traced = item.trace.as_ref().is_some_and(|t| t.parent.is_some()) || sample_new_trace();
        let span = if traced {
            reconcile_span!(target: TRACE_TARGET, parent: None, item, self.shared.worker_id)
        } else {
            let parent = tracing::Span::current().id();
            reconcile_span!(parent: parent, item, self.shared.worker_id)
        };
        record_cause(&span, &item.reason);
        if let Some(trace) = &item.trace {
            if let Some(dispatch) = &trace.parent {
                dispatch.set_parent_of(&span);
            }
            for merged in &trace.links {
                merged.link_from_as(&span, "coalesced");
            }
        }
        // Written here, before the task is spawned: the start line is in the file before the
        // reconcile can run, and the end line once it ended or was cancelled.
        let mut journalled = self.journal.cloned().map(|journal| {
            let entry = JournalEntry {
                key: item.key.clone(),
                controller: item.controller.clone(),
                worker: self.shared.worker_id.to_string(),
                start_ns: reconcile_journal::now_ns(),
                end_ns: 0,
                rv: reconcile_journal::resource_version(&item.object),
                reason: item.reason.to_string(),
            };
            journal.append(&entry);
            (journal, entry)
        });
        let cancel = self.cancel.child_token();
        let journal = WriteJournal::default();
        // What the leader could not ship with the item is read through the cache first; the reconcile
        // then sees the same Context as if it had come with the item.
        let left_out = prefetch::complete(
            self.shared.cache.client(),
            item.object.clone(),
            item.prefetched,
            item.prefetch_from_cache,
        );
        let (env, controller, ctx_span, ctx_cancel, ctx_journal) = (
            slot.env.clone(),
            slot.controller.clone(),
            span.clone(),
            cancel.clone(),
            journal.clone(),
        );
        let work = WorkItem {
            key: item.key.clone(),
            object: item.object.clone(),
            attempt: item.attempt,
            reason: item.reason,
        };
        let run = async move {
            match left_out.await {
                Ok(prefetched) => {
                    let ctx = Context::new(env, ctx_journal, prefetched, ctx_span, ctx_cancel);
                    controller.run(work, ctx).await
                }
                Err(err) => Outcome::error(format!("{:#}", anyhow::Error::from(err))),
            }
        };
        let metrics = slot.metrics.clone();
        let finished_tx = self.finished.clone();
        let (controller, key, term, item_id) = (item.controller, item.key, item.term, item.item_id);
        tokio::spawn(
            async move {
                metrics.started();
                let started = Instant::now();
                let outcome = tokio::select! {
                    biased;
                    () = cancel.cancelled() => None,
                    outcome = run => Some(DoneOutcome::from(outcome)),
                };
                if let Some((journal, entry)) = journalled.as_mut() {
                    entry.end_ns = reconcile_journal::now_ns();
                    journal.append(entry);
                }
                metrics.finished(
                    outcome.as_ref().map(DoneOutcome::label),
                    started.elapsed().as_secs_f64(),
                );
                tracing::Span::current().record(
                    "outcome",
                    outcome.as_ref().map_or("cancelled", DoneOutcome::label),
                );
                let Some(outcome) = outcome else {
                    debug!("reconcile cancelled");
                    return;
                };
                if !outcome.error.is_empty() {
                    warn!(error = %outcome.error, "reconcile failed");
                }
                let writes = journal.take();
                // A closed channel means the session ended; the item is no longer held by anyone here.
                let _ = finished_tx
                    .send(Finished {
                        controller,
                        key,
                        term,
                        item_id,
                        outcome,
                        writes,
                    })
                    .await;
            }
            .instrument(span),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_common::{AttrValue, SpanCapture, TraceContext};

    use super::*;

    /// What the span macro reads of an item.
    struct Item {
        controller: String,
        key: String,
        shard: u32,
        term: u64,
        attempt: u32,
        reason: Reason,
    }

    #[test]
    fn the_reconcile_span_has_the_reasons_label_its_cause_numbers_as_ints_and_typed_links() {
        let capture = SpanCapture::start();
        let item = Item {
            controller: "replicaset".into(),
            key: "ns/web".into(),
            shard: 7,
            term: 3,
            attempt: 1,
            reason: Reason::ObjectChanged {
                kind: "v1/pods".into(),
                key: "ns/web-1".into(),
            },
        };
        let merged =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        {
            let span = reconcile_span!(target: TRACE_TARGET, parent: None, item, "w0");
            record_cause(&span, &item.reason);
            merged.link_from_as(&span, "coalesced");
        }
        let spans = capture.spans();
        let [span] = &spans[..] else {
            panic!("one span: {spans:#?}")
        };
        let text = |s: &str| Some(AttrValue::Str(s.into()));
        assert_eq!(span.attr("reason").cloned(), text("object_changed"));
        assert_eq!(span.attr("cause.kind").cloned(), text("v1/pods"));
        assert_eq!(span.attr("cause.key").cloned(), text("ns/web-1"));
        for (key, n) in [("shard", 7), ("term", 3), ("attempt", 1)] {
            assert_eq!(span.attr(key), Some(&AttrValue::Int(n)), "{key}");
        }
        assert_eq!(
            span.links,
            [(
                "00f067aa0ba902b7".to_owned(),
                vec![(
                    "flotilla.link.type".to_owned(),
                    AttrValue::Str("coalesced".into())
                )]
            )]
        );
    }
}
