//! Trace export over OTLP: the flags every process shares (`--otlp-endpoint`, `--otlp-protocol`,
//! `--trace-sampler`, `--trace-sample-ratio`, each with its standard `OTEL_*` variable;
//! `OTEL_SDK_DISABLED=true` turns tracing off), the resource that names the process, the sampler
//! (`trace_sampler`), and the tracer provider the `tracing` layer feeds.
//!
//! Transport: gRPC (tonic, the workspace's gRPC stack) by default, or HTTP/protobuf over hyper (the
//! HTTP stack kube already brings, so no second client such as reqwest); plain-text endpoints only for
//! HTTP (`http://`), as the hyper client here has no TLS connector.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::{EnvResourceDetector, ResourceDetector};
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::trace_sampler::{FleetSampler, TraceSampler};

/// The OTLP transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (collectors listen on 4317).
    #[default]
    #[value(name = "grpc")]
    Grpc,
    /// OTLP/HTTP with protobuf bodies (collectors listen on 4318; `/v1/traces` is appended to an
    /// endpoint without a path).
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

/// Trace flags shared by the coordinator, every worker binary and `flotilla up`.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceFlags {
    /// Export traces over OTLP to this endpoint (e.g. `http://localhost:4317`); without it (and without
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`) nothing is traced and the key path carries no trace context.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport: `grpc` or `http/protobuf`.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL", value_enum, default_value_t = OtlpProtocol::Grpc)]
    pub otlp_protocol: OtlpProtocol,
    /// The sampler, as the OpenTelemetry SDK specification names them: `always_on`, `always_off`,
    /// `traceidratio`, `parentbased_always_on`, `parentbased_always_off`, `parentbased_traceidratio`.
    /// Unset: `parentbased_always_on`, or `parentbased_traceidratio` when `--trace-sample-ratio` is
    /// below 1 (so the ratio alone keeps working as it did before this flag). An unsupported value
    /// (`jaeger_remote`, `xray`, …) is logged and the default used, as the specification says.
    #[arg(long, env = "OTEL_TRACES_SAMPLER")]
    pub trace_sampler: Option<String>,
    /// Fraction of new traces kept (0 to 1) by the ratio samplers, decided once where a trace starts
    /// (the watch event); spans whose parent was sampled are kept by the parent-based samplers.
    /// OpenTelemetry's default, 1, keeps every trace: lower it on large clusters.
    #[arg(long, env = "OTEL_TRACES_SAMPLER_ARG", default_value_t = 1.0, value_parser = parse_ratio)]
    pub trace_sample_ratio: f64,
}

impl Default for TraceFlags {
    /// Off; the default sampler and a ratio of 1 as the flags' defaults.
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::Grpc,
            trace_sampler: None,
            trace_sample_ratio: 1.0,
        }
    }
}

/// Whether `OTEL_SDK_DISABLED` (its value `value`) turns the SDK off: `true`, case-insensitive, as the
/// specification says; anything else leaves it on.
fn sdk_disabled(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{text:?} is not a ratio between 0 and 1")),
    }
}

impl TraceFlags {
    /// The flags as arguments, for a process that starts others (`flotilla up`); empty when tracing is
    /// off.
    pub fn to_args(&self) -> Vec<String> {
        let Some(endpoint) = &self.otlp_endpoint else {
            return Vec::new();
        };
        let protocol = match self.otlp_protocol {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        };
        let mut args = vec![
            "--otlp-endpoint".into(),
            endpoint.clone(),
            "--otlp-protocol".into(),
            protocol.into(),
            "--trace-sample-ratio".into(),
            self.trace_sample_ratio.to_string(),
        ];
        if self.trace_sampler.is_some() {
            // Resolved: a child neither warns again nor reads a value it would refuse.
            args.extend(["--trace-sampler".into(), self.sampler().0.name().into()]);
        }
        args
    }

    /// The sampler these flags choose (see `--trace-sampler`), and the value that was refused for it
    /// (to warn about) when an unsupported one was given.
    pub fn sampler(&self) -> (TraceSampler, Option<String>) {
        match self.trace_sampler.as_deref() {
            Some(text) if !text.trim().is_empty() => match TraceSampler::parse(text) {
                Ok(sampler) => (sampler, None),
                Err(refused) => (TraceSampler::default(), Some(refused)),
            },
            _ if self.trace_sample_ratio < 1.0 => (TraceSampler::ParentBasedTraceIdRatio, None),
            _ => (TraceSampler::default(), None),
        }
    }

    /// Checks what start-up would refuse, touching nothing.
    ///
    /// # Errors
    /// [`TraceExportError::Endpoint`] for an endpoint that is not an `http://` or `https://` URI.
    pub fn validate(&self) -> Result<(), TraceExportError> {
        match &self.otlp_endpoint {
            None => Ok(()),
            Some(e) if e.trim().is_empty() => Ok(()),
            Some(e) => {
                let uri: http::Uri = e
                    .parse()
                    .map_err(|_| TraceExportError::Endpoint(e.clone()))?;
                match uri.scheme_str() {
                    Some("http" | "https") if uri.host().is_some() => Ok(()),
                    _ => Err(TraceExportError::Endpoint(e.clone())),
                }
            }
        }
    }

    /// Whether an endpoint is set (an empty `OTEL_EXPORTER_OTLP_ENDPOINT` counts as unset) and
    /// `OTEL_SDK_DISABLED` is not `true`.
    pub fn enabled(&self) -> bool {
        self.otlp_endpoint
            .as_deref()
            .is_some_and(|e| !e.trim().is_empty())
            && !sdk_disabled(std::env::var("OTEL_SDK_DISABLED").ok().as_deref())
    }
}

/// Why trace export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceExportError {
    /// The endpoint is not a URI with an `http` or `https` scheme and a host.
    #[error("--otlp-endpoint {0:?} is not an http:// or https:// URI")]
    Endpoint(String),
    /// The OTLP exporter refused its configuration.
    #[error("cannot build the OTLP exporter")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// Who this process is in its traces: `service.name` (unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` says otherwise) and `service.instance.id` (the fleet identity: worker id
/// or coordinator id).
#[derive(Debug, Clone)]
pub struct ServiceIdentity {
    /// `flotilla-coordinator`, `flotilla-worker`, or a custom controller's name.
    pub name: String,
    /// Unique per process in the fleet.
    pub instance_id: String,
}

impl ServiceIdentity {
    /// An identity named `name` with instance `instance_id`.
    pub fn new(name: impl Into<String>, instance_id: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            instance_id: instance_id.into(),
        }
    }
}

/// The resource: defaults first, then `OTEL_RESOURCE_ATTRIBUTES`, then `OTEL_SERVICE_NAME` (the
/// specification's precedence). `k8s.pod.name` / `k8s.namespace.name` come from `POD_NAME` /
/// `POD_NAMESPACE` (the downward API; the Helm chart sets both) when set.
pub(crate) fn resource(identity: &ServiceIdentity) -> Resource {
    let mut attributes = vec![
        KeyValue::new("service.name", identity.name.clone()),
        KeyValue::new("service.instance.id", identity.instance_id.clone()),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    ];
    for (var, key) in [
        ("POD_NAME", "k8s.pod.name"),
        ("POD_NAMESPACE", "k8s.namespace.name"),
    ] {
        if let Some(value) = std::env::var(var).ok().filter(|v| !v.is_empty()) {
            attributes.push(KeyValue::new(key, value));
        }
    }
    let mut builder = Resource::builder_empty()
        .with_attributes(attributes)
        .with_attributes(
            EnvResourceDetector::new()
                .detect()
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        );
    if let Some(name) = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
    {
        builder = builder.with_service_name(name);
    }
    builder.build()
}

/// The tracer provider exporting to `flags`' endpoint with `flags`' sampler. Must be called
/// inside a tokio runtime (the gRPC channel's connection task runs on it).
///
/// # Errors
/// [`TraceExportError`] for a bad endpoint or an exporter that cannot be built.
pub(crate) fn provider(
    flags: &TraceFlags,
    identity: &ServiceIdentity,
) -> Result<SdkTracerProvider, TraceExportError> {
    flags.validate()?;
    let endpoint = flags.otlp_endpoint.clone().unwrap_or_default();
    let timeout = Duration::from_secs(10);
    let exporter = match flags.otlp_protocol {
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(timeout)
            .build(),
        OtlpProtocol::HttpProtobuf => {
            let client =
                opentelemetry_http::hyper::HyperClient::with_default_connector(timeout, None);
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_http_client(client)
                .with_endpoint(http_traces_endpoint(&endpoint))
                .with_timeout(timeout)
                .build()
        }
    }
    .map_err(TraceExportError::Exporter)?;
    // A new trace is decided where it is born, before its first span exists
    // (`trace_context::sample_new_trace`); the SDK sampler decides the rest (`trace_sampler`).
    let sampler = FleetSampler::new(flags.sampler().0, flags.trace_sample_ratio);
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(resource(identity))
        .build())
}

/// The provider's tracer for the `tracing` layer.
pub(crate) fn tracer(provider: &SdkTracerProvider) -> opentelemetry_sdk::trace::Tracer {
    provider.tracer("flotilla")
}

/// An OTLP/HTTP base endpoint gets the traces path, as `OTEL_EXPORTER_OTLP_ENDPOINT` does; an endpoint
/// with a path is taken as the full URL.
fn http_traces_endpoint(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let path = trimmed
        .split_once("://")
        .map_or(trimmed, |(_, rest)| rest)
        .split_once('/')
        .map(|(_, path)| path);
    match path {
        None | Some("") => format!("{trimmed}/v1/traces"),
        Some(_) => endpoint.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: TraceFlags,
    }

    #[test]
    fn an_http_base_endpoint_gets_the_traces_path_and_a_full_url_is_kept() {
        assert_eq!(
            http_traces_endpoint("http://jaeger:4318"),
            "http://jaeger:4318/v1/traces"
        );
        assert_eq!(
            http_traces_endpoint("http://jaeger:4318/"),
            "http://jaeger:4318/v1/traces"
        );
        assert_eq!(
            http_traces_endpoint("http://c:4318/custom/traces"),
            "http://c:4318/custom/traces"
        );
    }

    #[test]
    fn the_sample_ratio_is_a_fraction_and_the_endpoint_a_url() {
        let cli = Cli::try_parse_from(["x", "--trace-sample-ratio", "0.01"]).unwrap();
        assert_eq!(cli.flags.trace_sample_ratio, 0.01);
        assert!(Cli::try_parse_from(["x", "--trace-sample-ratio", "1.5"]).is_err());
        assert!(Cli::try_parse_from(["x", "--trace-sample-ratio", "-0.1"]).is_err());
        let cli = Cli::try_parse_from(["x", "--otlp-endpoint", "localhost:4317"]).unwrap();
        assert!(cli.flags.validate().is_err(), "a scheme is required");
        let cli = Cli::try_parse_from([
            "x",
            "--otlp-endpoint",
            "http://localhost:4317",
            "--otlp-protocol",
            "http/protobuf",
        ])
        .unwrap();
        cli.flags.validate().unwrap();
        assert!(cli.flags.enabled());
        assert_eq!(cli.flags.otlp_protocol, OtlpProtocol::HttpProtobuf);
    }

    #[test]
    fn flags_pass_on_as_arguments_only_when_tracing_is_on() {
        assert!(TraceFlags::default().to_args().is_empty());
        let mut flags = TraceFlags {
            otlp_endpoint: Some("http://j:4317".into()),
            otlp_protocol: OtlpProtocol::Grpc,
            trace_sampler: None,
            trace_sample_ratio: 0.5,
        };
        let cli =
            Cli::try_parse_from(std::iter::once("x".to_owned()).chain(flags.to_args())).unwrap();
        assert_eq!(cli.flags.otlp_endpoint.as_deref(), Some("http://j:4317"));
        assert_eq!(cli.flags.trace_sample_ratio, 0.5);
        assert_eq!(cli.flags.trace_sampler, None);
        flags.trace_sampler = Some("xray".into());
        let cli =
            Cli::try_parse_from(std::iter::once("x".to_owned()).chain(flags.to_args())).unwrap();
        assert_eq!(
            cli.flags.trace_sampler.as_deref(),
            Some("parentbased_always_on"),
            "a child gets the sampler resolved, not the refused value"
        );
    }

    #[test]
    fn the_sampler_flag_takes_the_specifications_values_and_falls_back_to_the_default() {
        let sampler = |args: &[&str]| {
            let cli =
                Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap();
            cli.flags.sampler()
        };
        for (value, expected) in [
            ("always_on", TraceSampler::AlwaysOn),
            ("always_off", TraceSampler::AlwaysOff),
            ("traceidratio", TraceSampler::TraceIdRatio),
            ("parentbased_always_on", TraceSampler::ParentBasedAlwaysOn),
            ("parentbased_always_off", TraceSampler::ParentBasedAlwaysOff),
            (
                "parentbased_traceidratio",
                TraceSampler::ParentBasedTraceIdRatio,
            ),
        ] {
            assert_eq!(
                sampler(&["--trace-sampler", value]),
                (expected, None),
                "{value}"
            );
        }
        assert_eq!(
            sampler(&["--trace-sampler", "jaeger_remote"]),
            (
                TraceSampler::ParentBasedAlwaysOn,
                Some("jaeger_remote".into())
            ),
            "an unsupported sampler is reported for a warning and the default used"
        );
        assert_eq!(sampler(&[]).0, TraceSampler::ParentBasedAlwaysOn);
        assert_eq!(
            sampler(&["--trace-sample-ratio", "0.01"]).0,
            TraceSampler::ParentBasedTraceIdRatio,
            "a ratio alone samples by ratio, as before the sampler flag"
        );
        assert_eq!(
            sampler(&[
                "--trace-sample-ratio",
                "0.01",
                "--trace-sampler",
                "always_on"
            ])
            .0,
            TraceSampler::AlwaysOn,
            "a sampler named wins"
        );
    }

    #[test]
    fn otel_sdk_disabled_true_turns_tracing_off() {
        assert!(sdk_disabled(Some("true")));
        assert!(sdk_disabled(Some(" TRUE ")));
        for value in [None, Some("false"), Some(""), Some("1"), Some("yes")] {
            assert!(!sdk_disabled(value), "{value:?}");
        }
    }

    #[test]
    fn the_resource_names_the_service_and_instance() {
        let r = resource(&ServiceIdentity::new("flotilla-worker", "w-1"));
        let get = |k: &str| {
            r.get(&opentelemetry::Key::from(k.to_owned()))
                .map(|v| v.to_string())
        };
        // OTEL_SERVICE_NAME is not set in the unit tests' environment.
        if std::env::var("OTEL_SERVICE_NAME").is_err() {
            assert_eq!(get("service.name").as_deref(), Some("flotilla-worker"));
        }
        assert_eq!(get("service.instance.id").as_deref(), Some("w-1"));
    }
}
