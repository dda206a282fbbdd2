//! Exported spans captured in-process, for unit tests of the code that makes them (the worker's API
//! client layers, the leader's spans): what the OTLP exporter would have sent, with each attribute's
//! type kept, so a test can check that a number is exported as a number.
//!
//! Not for production: starting a capture turns tracing on for the whole process and makes the
//! capture's provider the global one (what [`crate::record_wait`] uses); the `tracing` subscriber is
//! the calling thread's only, so run the code under test on that thread (a current-thread runtime).
//! Captures are taken one at a time in a process (a second `start` waits for the first capture to be
//! dropped), so spans made through the global provider reach the capture that is running.

use std::sync::Arc;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use parking_lot::Mutex;
use tracing_subscriber::layer::SubscriberExt;

use crate::trace_context::{TRACE_TARGET, set_tracing_enabled};

/// An attribute's value as exported.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// An OTLP int.
    Int(i64),
    /// An OTLP double.
    Double(f64),
    /// An OTLP string.
    Str(String),
    /// An OTLP bool.
    Bool(bool),
    /// Anything else, printed.
    Other(String),
}

/// One ended span as the exporter received it.
#[derive(Debug, Clone)]
pub struct CapturedSpan {
    /// The exported name (`otel.name` when set).
    pub name: String,
    /// Trace id, 32 hex digits.
    pub trace_id: String,
    /// Span id, 16 hex digits.
    pub span_id: String,
    /// The parent's span id (all zeros for a root).
    pub parent_span_id: String,
    /// The attributes, in order.
    pub attributes: Vec<(String, AttrValue)>,
    /// Each link's span id and attributes.
    pub links: Vec<(String, Vec<(String, AttrValue)>)>,
}

impl CapturedSpan {
    /// The attribute `key`.
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// Keeps what it is sent.
#[derive(Debug, Clone, Default)]
struct Kept(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Kept {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().extend(batch);
        Ok(())
    }
}

/// Held by the running capture.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A capture of every span of [`TRACE_TARGET`] made on this thread while it lives.
pub struct SpanCapture {
    kept: Kept,
    _provider: SdkTracerProvider,
    _guard: tracing::subscriber::DefaultGuard,
    // Last: released once the rest is gone.
    _turn: parking_lot::MutexGuard<'static, ()>,
}

impl SpanCapture {
    /// Starts capturing (see the module documentation for what it changes process-wide).
    pub fn start() -> Self {
        let turn = ONE_AT_A_TIME.lock();
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("flotilla"))
            .with_location(false)
            .with_threads(false);
        let subscriber =
            tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(
                layer,
                tracing_subscriber::filter::filter_fn(|meta| meta.target() == TRACE_TARGET),
            ));
        let guard = tracing::subscriber::set_default(subscriber);
        set_tracing_enabled(true);
        Self {
            kept,
            _provider: provider,
            _guard: guard,
            _turn: turn,
        }
    }

    /// Every span ended so far, in the order they ended.
    pub fn spans(&self) -> Vec<CapturedSpan> {
        self.kept.0.lock().iter().map(captured).collect()
    }
}

fn attributes<'a>(
    kvs: impl IntoIterator<Item = &'a opentelemetry::KeyValue>,
) -> Vec<(String, AttrValue)> {
    kvs.into_iter()
        .map(|kv| {
            let value = match &kv.value {
                opentelemetry::Value::I64(i) => AttrValue::Int(*i),
                opentelemetry::Value::F64(f) => AttrValue::Double(*f),
                opentelemetry::Value::String(s) => AttrValue::Str(s.to_string()),
                opentelemetry::Value::Bool(b) => AttrValue::Bool(*b),
                other => AttrValue::Other(other.to_string()),
            };
            (kv.key.to_string(), value)
        })
        .collect()
}

fn captured(span: &SpanData) -> CapturedSpan {
    CapturedSpan {
        name: span.name.to_string(),
        trace_id: span.span_context.trace_id().to_string(),
        span_id: span.span_context.span_id().to_string(),
        parent_span_id: span.parent_span_id.to_string(),
        attributes: attributes(&span.attributes),
        links: span
            .links
            .links
            .iter()
            .map(|l| {
                (
                    l.span_context.span_id().to_string(),
                    attributes(&l.attributes),
                )
            })
            .collect(),
    }
}
