//! A sampled trace's position as it travels with a key: W3C trace context (`traceparent`) in a small
//! `Copy` value, and the span operations that join a `tracing` span to one (parent, links).
//!
//! Only *sampled* contexts are ever made: an unsampled watch event carries nothing, so everything on
//! the key path that holds an `Option<TraceContext>` holds `None` when tracing is off or the event was
//! not sampled, and allocates nothing.
//!
//! The sampling decision is made *before* a trace's first span exists ([`sample_new_trace`]), and only
//! spans of [`TRACE_TARGET`] reach the exporter: an unsampled key makes no span the exporter sees, so
//! its cost with tracing on is that of tracing off (one random draw where a trace could start).
//!
//! Spans whose times are known only afterwards (a wait: [`record_wait`]) are made through the
//! OpenTelemetry API directly, with explicit start and end times, under a parent's context.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::trace_sampler::TraceSampler;

/// The link attribute that says why a span links to another trace: `write` (the watch event is the
/// echo of a write the linked span made) or `coalesced` (the linked event was merged into this run).
pub const LINK_TYPE: &str = "flotilla.link.type";

/// Whether spans are exported; set once by [`crate::init_telemetry`]. The key path checks it before it
/// builds any span, so with tracing off it costs one relaxed load.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports traces (an OTLP endpoint was configured at start-up).
pub fn tracing_enabled() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

pub(crate) fn set_tracing_enabled(on: bool) {
    EXPORTING.store(on, Ordering::Relaxed);
}

/// The `tracing` target of every span that is exported; spans of other targets (task spans, log
/// context) stay in the logs. A span of this target must be a sampled trace's: a root that
/// [`sample_new_trace`] kept, or a child of such a span.
pub const TRACE_TARGET: &str = "flotilla::trace";

/// Whether the current span is exported (of [`TRACE_TARGET`]) while tracing is on: spans made under it
/// belong to its trace. A span made under a log-only span would be a root of its own, so the layers
/// that trace a reconcile's calls make none there.
pub fn in_exported_span() -> bool {
    tracing_enabled()
        && tracing::Span::current()
            .metadata()
            .is_some_and(|meta| meta.target() == TRACE_TARGET)
}

/// The share of new traces kept, as `f64` bits; set by [`crate::init_telemetry`].
static RATIO: AtomicU64 = AtomicU64::new(0);

pub(crate) fn set_sample_ratio(ratio: f64) {
    RATIO.store(ratio.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
}

/// The sampler (`--trace-sampler`), as [`TraceSampler::to_u8`]; set by [`crate::init_telemetry`].
static SAMPLER: AtomicU8 = AtomicU8::new(3);

pub(crate) fn set_sampler(sampler: TraceSampler) {
    SAMPLER.store(sampler.to_u8(), Ordering::Relaxed);
}

/// Whether a trace may start here: tracing is on and the sampler (`--trace-sampler`, with its ratio
/// `--trace-sample-ratio`) keeps it. Called once where a trace is born (a watch event, a request, a
/// reconcile with no parent), before any span of [`TRACE_TARGET`] is made for it. With `traceidratio`
/// the root is made and the SDK decides by its trace id (see `trace_sampler`).
pub fn sample_new_trace() -> bool {
    if !tracing_enabled() {
        return false;
    }
    let ratio = f64::from_bits(RATIO.load(Ordering::Relaxed));
    TraceSampler::from_u8(SAMPLER.load(Ordering::Relaxed))
        .keeps_new_trace(ratio, rand::random::<f64>)
}

/// Records a finished wait as a span `wait <reason>` under `parent`, from `start` to `end`, with
/// `wait.reason`, `wait.ms` (a double) and `attributes`. For waits measured afterwards (a rate limiter's
/// token, a key held for read-your-writes): the span is made through the OpenTelemetry API with those
/// times, so it covers exactly the wait whatever span is current. Does nothing when tracing is off; the
/// sampler decides it as any child of `parent` (kept under a sampled parent by the `parentbased_*`
/// samplers).
pub fn record_wait(
    parent: &TraceContext,
    reason: &str,
    start: SystemTime,
    end: SystemTime,
    attributes: impl IntoIterator<Item = KeyValue>,
) {
    if !tracing_enabled() {
        return;
    }
    let end = end.max(start);
    wait_span(
        &opentelemetry::global::tracer("flotilla"),
        parent,
        reason,
        start,
        end,
        wait_attributes(reason, start, end, attributes),
    );
}

/// `wait.reason`, `wait.ms` (a double: the length from `start` to `end`, 0 if `end` is earlier), then
/// `extra`.
fn wait_attributes(
    reason: &str,
    start: SystemTime,
    end: SystemTime,
    extra: impl IntoIterator<Item = KeyValue>,
) -> Vec<KeyValue> {
    let ms = end.duration_since(start).unwrap_or_default().as_secs_f64() * 1000.0;
    let mut all = vec![
        KeyValue::new("wait.reason", reason.to_owned()),
        KeyValue::new("wait.ms", ms),
    ];
    all.extend(extra);
    all
}

/// The span of [`record_wait`] on `tracer`, ended at `end`; `attributes` are all of its attributes.
fn wait_span<T: opentelemetry::trace::Tracer>(
    tracer: &T,
    parent: &TraceContext,
    reason: &str,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
) {
    let cx = opentelemetry::Context::new().with_remote_span_context(parent.span_context());
    let mut span = tracer
        .span_builder(format!("wait {reason}"))
        .with_kind(SpanKind::Internal)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(tracer, &cx);
    span.end_with_timestamp(end);
}

/// The W3C trace context of a sampled span: trace id, span id, flags (always sampled). 25 bytes, `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

/// The only `traceparent` version this understands (W3C Trace Context level 1).
const VERSION: &str = "00";
/// The sampled bit of the trace flags.
const SAMPLED: u8 = 0x01;

impl TraceContext {
    /// The context of `span` if it is exported and sampled; `None` when tracing is off, the span is
    /// disabled, or the sampler dropped it. Starts the span in OpenTelemetry's view (the sampling
    /// decision happens here, once).
    pub fn of_span(span: &tracing::Span) -> Option<Self> {
        if !tracing_enabled() || span.is_disabled() {
            return None;
        }
        let cx = span.context();
        let otel = cx.span();
        Self::from_span_context(otel.span_context())
    }

    /// A context of a sampled, valid OpenTelemetry span context.
    pub fn from_span_context(sc: &SpanContext) -> Option<Self> {
        (sc.is_valid() && sc.is_sampled()).then(|| Self {
            trace_id: sc.trace_id().to_bytes(),
            span_id: sc.span_id().to_bytes(),
            flags: sc.trace_flags().to_u8() | SAMPLED,
        })
    }

    /// Parses a `traceparent` header value (`00-<32 hex>-<16 hex>-<2 hex>`). `None` for anything
    /// malformed, an all-zero id, or an unsampled context (which carries nothing here). The text comes
    /// from a peer: it is checked, never trusted.
    pub fn parse(traceparent: &str) -> Option<Self> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if version != VERSION || parts.next().is_some() {
            return None;
        }
        let trace_id = hex::<16>(trace)?;
        let span_id = hex::<8>(span)?;
        let [flags] = hex::<1>(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] || flags & SAMPLED == 0 {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The `traceparent` header value.
    pub fn traceparent(&self) -> String {
        let mut out = String::with_capacity(55);
        out.push_str(VERSION);
        out.push('-');
        push_hex(&mut out, &self.trace_id);
        out.push('-');
        push_hex(&mut out, &self.span_id);
        out.push('-');
        push_hex(&mut out, &[self.flags]);
        out
    }

    /// The trace id as 32 lowercase hex digits (what Jaeger shows and searches by).
    pub fn trace_id_hex(&self) -> String {
        let mut out = String::with_capacity(32);
        push_hex(&mut out, &self.trace_id);
        out
    }

    /// This context as a remote OpenTelemetry span context (it came from another span, maybe another
    /// process).
    pub fn span_context(&self) -> SpanContext {
        SpanContext::new(
            TraceId::from_bytes(self.trace_id),
            SpanId::from_bytes(self.span_id),
            TraceFlags::new(self.flags),
            true,
            TraceState::default(),
        )
    }

    /// Makes this context the parent of `span`, which must not have been entered yet (create it with
    /// `parent: None` so it does not also inherit the current span). Does nothing when tracing is off.
    pub fn set_parent_of(&self, span: &tracing::Span) {
        if tracing_enabled() {
            let cx = opentelemetry::Context::new().with_remote_span_context(self.span_context());
            // Fails only for a disabled span or one already started: it then stays a root.
            let _ = span.set_parent(cx);
        }
    }

    /// Adds a link from `span` to this context (a trace that was merged into the span's work).
    pub fn link_from(&self, span: &tracing::Span) {
        if tracing_enabled() {
            span.add_link(self.span_context());
        }
    }

    /// Adds a link from `span` to this context whose [`LINK_TYPE`] attribute is `link_type`
    /// (`coalesced`, `write`).
    pub fn link_from_as(&self, span: &tracing::Span, link_type: &'static str) {
        if tracing_enabled() {
            span.add_link_with_attributes(
                self.span_context(),
                vec![KeyValue::new(LINK_TYPE, link_type)],
            );
        }
    }
}

fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        let pair = text.get(2 * i..2 * i + 2)?;
        // Lowercase only, as the W3C format requires.
        if pair.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips() {
        let cx = TraceContext::parse(SAMPLE).expect("valid");
        assert_eq!(cx.traceparent(), SAMPLE);
        assert_eq!(cx.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let sc = cx.span_context();
        assert!(sc.is_sampled() && sc.is_remote() && sc.is_valid());
        assert_eq!(TraceContext::from_span_context(&sc), Some(cx));
    }

    #[test]
    fn malformed_zero_or_unsampled_contexts_carry_nothing() {
        for bad in [
            "",
            "garbage",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e47é6-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn with_tracing_off_a_span_has_no_context() {
        assert_eq!(TraceContext::of_span(&tracing::info_span!("x")), None);
    }

    #[test]
    fn a_wait_is_a_span_with_its_reason_and_length_in_milliseconds_as_a_double() {
        use std::sync::{Arc, Mutex};

        use opentelemetry::trace::TracerProvider as _;
        use opentelemetry_sdk::error::OTelSdkResult;
        use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

        /// Keeps what it is sent.
        #[derive(Debug, Clone, Default)]
        struct Kept(Arc<Mutex<Vec<SpanData>>>);
        impl SpanExporter for Kept {
            async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
                self.0.lock().expect("not poisoned").extend(batch);
                Ok(())
            }
        }

        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .build();
        let tracer = provider.tracer("test");
        let parent = TraceContext::parse(SAMPLE).expect("valid");
        let start = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000);
        let end = start + std::time::Duration::from_micros(12_500);
        wait_span(
            &tracer,
            &parent,
            "client_rate_limit",
            start,
            end,
            wait_attributes(
                "client_rate_limit",
                start,
                end,
                [KeyValue::new("controller", "x")],
            ),
        );
        let spans = kept.0.lock().expect("not poisoned").clone();
        let [span] = &spans[..] else {
            panic!("one span expected, got {spans:?}")
        };
        assert_eq!(span.name, "wait client_rate_limit");
        assert_eq!(span.parent_span_id, parent.span_context().span_id());
        assert_eq!(
            span.span_context.trace_id(),
            parent.span_context().trace_id()
        );
        assert_eq!((span.start_time, span.end_time), (start, end));
        let attr = |k: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(
            attr("wait.reason"),
            Some(opentelemetry::Value::from("client_rate_limit"))
        );
        assert_eq!(attr("wait.ms"), Some(opentelemetry::Value::F64(12.5)));
        assert_eq!(attr("controller"), Some(opentelemetry::Value::from("x")));
    }
}
