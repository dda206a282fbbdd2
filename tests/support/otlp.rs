//! An OTLP/gRPC receiver inside the test (the collector's TraceService, served with tonic) that keeps
//! every span the fleet's processes export, and the helpers that read those spans as a user reads a
//! trace: by id, up the parents, and printed as an indented tree with its links.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use parking_lot::Mutex;
use tokio_stream::wrappers::TcpListenerStream;

/// One span as received, with the `service.name` of the process that sent it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The `service.name` of the resource the span came with.
    pub service: String,
    /// The span, as the exporter sent it.
    pub span: Span,
}

impl Received {
    /// The attribute `key` as text (numbers and booleans printed), if present.
    pub fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }

    /// The attribute `key` as received, to check its OTLP type.
    pub fn value(&self, key: &str) -> Option<&Value> {
        value(&self.span.attributes, key)
    }

    /// The trace id, in hex.
    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    /// Whether the span is the root of its trace.
    pub fn is_root(&self) -> bool {
        self.span.parent_span_id.is_empty()
    }

    /// Its interval, in Unix nanoseconds.
    pub fn interval(&self) -> (u64, u64) {
        (self.span.start_time_unix_nano, self.span.end_time_unix_nano)
    }
}

/// The value of attribute `key` among `attributes`, as received.
pub fn value<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()
}

/// The value of attribute `key` among `attributes` as text (numbers and booleans printed).
pub fn attr(attributes: &[KeyValue], key: &str) -> Option<String> {
    Some(match value(attributes, key)? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

/// Bytes (a trace or span id) in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The collector's TraceService, keeping every span it is sent.
#[derive(Clone, Default)]
struct Sink {
    spans: Arc<Mutex<Vec<Received>>>,
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|r| attr(&r.attributes, "service.name"))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push(Received {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP/gRPC receiver on a loopback port, served until it is dropped.
pub struct Receiver {
    /// Its `http://127.0.0.1:<port>` endpoint.
    pub endpoint: String,
    sink: Sink,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Receiver {
    /// Binds a loopback port and serves the TraceService there.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind the OTLP receiver");
        let addr = listener.local_addr().expect("its address");
        let sink = Sink::default();
        let server = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(sink.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener));
        let server = tokio::spawn(async move {
            let _ = server.await;
        });
        Self {
            endpoint: format!("http://{addr}"),
            sink,
            server,
        }
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<Received> {
        self.sink.spans.lock().clone()
    }

    /// The flags that make a process export here, keeping the given share of new traces.
    pub fn flags(&self, ratio: &str) -> Vec<String> {
        vec![
            "--otlp-endpoint".into(),
            self.endpoint.clone(),
            "--trace-sample-ratio".into(),
            ratio.into(),
        ]
    }
}

/// The span with `span_id` among `spans`.
pub fn by_id<'a>(spans: &'a [Received], span_id: &[u8]) -> Option<&'a Received> {
    spans.iter().find(|s| s.span.span_id == span_id)
}

/// The chain of parents of `span`, itself first, as far as received spans go.
pub fn ancestry<'a>(spans: &'a [Received], span: &'a Received) -> Vec<&'a Received> {
    let mut chain = vec![span];
    while let Some(parent) = chain
        .last()
        .filter(|s| !s.is_root())
        .and_then(|s| by_id(spans, &s.span.parent_span_id))
    {
        chain.push(parent);
        if chain.len() > 16 {
            break;
        }
    }
    chain
}

/// Prints the received trace `trace` as an indented tree (what docs/tracing.md shows).
pub fn print_tree(spans: &[Received], trace: &str) {
    eprintln!("trace {trace}:\n{}", tree(spans, trace, None));
}

/// The received trace `trace` as an indented tree, one span a line: name, service, start (from
/// `origin`, in Unix nanoseconds, when given), duration and attributes; each link on a line of its own
/// below its span, naming the linked span when it was received too.
pub fn tree(spans: &[Received], trace: &str, origin: Option<u64>) -> String {
    let mine: Vec<&Received> = spans.iter().filter(|s| s.trace_id() == trace).collect();
    let mut children: HashMap<&[u8], Vec<&Received>> = HashMap::new();
    for s in &mine {
        children
            .entry(s.span.parent_span_id.as_slice())
            .or_default()
            .push(s);
    }
    let mut out = String::new();
    let mut roots: Vec<&Received> = mine
        .iter()
        .copied()
        .filter(|s| s.is_root() || by_id(spans, &s.span.parent_span_id).is_none())
        .collect();
    roots.sort_by_key(|s| s.span.start_time_unix_nano);
    for root in roots {
        walk(spans, root, 0, &children, origin, &mut out);
    }
    out
}

fn walk(
    all: &[Received],
    s: &Received,
    depth: usize,
    children: &HashMap<&[u8], Vec<&Received>>,
    origin: Option<u64>,
    out: &mut String,
) {
    let (start, end) = s.interval();
    let ms = |ns: u64| ns as f64 / 1e6;
    let fields: Vec<String> = s
        .span
        .attributes
        .iter()
        .filter(|kv| {
            !kv.key.starts_with("otel.")
                && !kv.key.starts_with("busy")
                && !kv.key.starts_with("idle")
                && kv.key != "target"
        })
        .filter_map(|kv| {
            Some(format!(
                "{}={}",
                kv.key,
                attr(std::slice::from_ref(kv), &kv.key)?
            ))
        })
        .collect();
    let at = origin
        .map(|o| format!("+{:.1} ms ", ms(start.saturating_sub(o))))
        .unwrap_or_default();
    let indent = "  ".repeat(depth);
    out.push_str(&format!(
        "{indent}{} [{}] {at}{:.2} ms {}\n",
        s.span.name,
        s.service,
        ms(end.saturating_sub(start)),
        fields.join(" ")
    ));
    for link in &s.span.links {
        let kind = attr(&link.attributes, "flotilla.link.type").unwrap_or_else(|| "?".into());
        let target = by_id(all, &link.span_id)
            .filter(|t| t.span.trace_id == link.trace_id)
            .map(|t| format!("`{}` [{}]", t.span.name, t.service))
            .unwrap_or_else(|| format!("span {}", hex(&link.span_id)));
        out.push_str(&format!(
            "{indent}  ⤷ link ({kind}) to {target} in trace {}\n",
            hex(&link.trace_id)
        ));
    }
    let mut kids = children
        .get(s.span.span_id.as_slice())
        .cloned()
        .unwrap_or_default();
    kids.sort_by_key(|k| k.span.start_time_unix_nano);
    for k in kids {
        walk(all, k, depth + 1, children, origin, out);
    }
}
