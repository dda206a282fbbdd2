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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

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

/// The share of new traces kept, as `f64` bits; set by [`crate::init_telemetry`].
static RATIO: AtomicU64 = AtomicU64::new(0);

pub(crate) fn set_sample_ratio(ratio: f64) {
    RATIO.store(ratio.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
}

/// Whether a trace may start here: tracing is on and a draw against `--trace-sample-ratio` keeps it.
/// Called once where a trace is born (a watch event, a request, a reconcile with no parent), before any
/// span of [`TRACE_TARGET`] is made for it.
pub fn sample_new_trace() -> bool {
    if !tracing_enabled() {
        return false;
    }
    let ratio = f64::from_bits(RATIO.load(Ordering::Relaxed));
    ratio >= 1.0 || (ratio > 0.0 && rand::random::<f64>() < ratio)
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
}
