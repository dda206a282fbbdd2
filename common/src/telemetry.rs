//! Logging and trace set-up: human-readable log lines by default, JSON lines on request
//! (`--log-format json`), filtered by `RUST_LOG` (default `info`); and, when an OTLP endpoint is
//! configured, the same `tracing` spans exported as OpenTelemetry traces (see `trace_export`).

use std::time::Duration;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::trace_context::{TRACE_TARGET, set_sample_ratio, set_sampler, set_tracing_enabled};
use crate::trace_export::{ServiceIdentity, TraceExportError, TraceFlags, provider, tracer};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per event, for log pipelines.
    Json,
}

/// How long [`Telemetry::shutdown`] waits for the last spans to reach the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Installs the global subscriber once, logging only; later calls do nothing (tests start several
/// roles in one process).
pub fn init_logging(format: LogFormat) {
    let _ = install(format, None);
}

/// What [`init_telemetry`] set up. Call [`Telemetry::shutdown`] before the process exits, so the
/// spans still buffered are sent.
#[must_use = "call shutdown() before exiting, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes and stops the trace exporter (bounded by 5 s: a collector that is gone must not hold
    /// the process's exit). Does nothing when tracing is off.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        set_tracing_enabled(false);
        // The batch processor's shutdown blocks its caller until the export finishes; the export runs
        // on this runtime, so it must not block one of its threads.
        let flush = tokio::task::spawn_blocking(move || provider.shutdown());
        match tokio::time::timeout(FLUSH_TIMEOUT, flush).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(err))) => eprintln!("trace export shutdown: {err}"),
            Ok(Err(err)) => eprintln!("trace export shutdown: {err}"),
            Err(_) => eprintln!("trace export shutdown: not flushed within {FLUSH_TIMEOUT:?}"),
        }
    }
}

/// Installs the global subscriber: logging as [`init_logging`] does and, when `traces` names an
/// endpoint, span export as `identity`. Must be called inside a tokio runtime. A second call installs
/// nothing and exports nothing.
///
/// # Errors
/// [`TraceExportError`] for an endpoint or exporter configuration that cannot work.
pub fn init_telemetry(
    format: LogFormat,
    traces: &TraceFlags,
    identity: &ServiceIdentity,
) -> Result<Telemetry, TraceExportError> {
    let provider = if traces.enabled() {
        Some(provider(traces, identity)?)
    } else {
        None
    };
    let installed = install(format, provider.as_ref());
    let provider = provider.filter(|_| installed);
    let (sampler, refused) = traces.sampler();
    set_sample_ratio(traces.trace_sample_ratio);
    set_sampler(sampler);
    set_tracing_enabled(provider.is_some());
    if let Some(provider) = &provider {
        opentelemetry::global::set_tracer_provider(provider.clone());
        if let Some(refused) = refused {
            tracing::warn!(
                sampler = refused,
                using = sampler.name(),
                "unsupported trace sampler (OTEL_TRACES_SAMPLER / --trace-sampler); using the default"
            );
        }
        tracing::info!(
            endpoint = traces.otlp_endpoint.as_deref().unwrap_or_default(),
            protocol = ?traces.otlp_protocol,
            sampler = sampler.name(),
            sample_ratio = traces.trace_sample_ratio,
            service = %identity.name,
            "exporting traces over OTLP"
        );
    }
    Ok(Telemetry { provider })
}

/// Installs the subscriber; false when one was installed already.
fn install(format: LogFormat, provider: Option<&SdkTracerProvider>) -> bool {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let otel = provider.map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer(p))
            // Span fields only: which thread or source line ran a span says nothing to an operator.
            .with_location(false)
            .with_threads(false)
            // Only sampled traces' spans (see `trace_context`): a static per-callsite filter, so every
            // other span costs the exporter nothing.
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.target() == TRACE_TARGET
            }))
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init()
        .is_ok()
}
