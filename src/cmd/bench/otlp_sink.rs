//! An OTLP/gRPC trace receiver inside the benchmark process that counts the spans it is sent and drops
//! them, so `bench dispatch --trace-sample-ratio` measures the cost of producing and exporting spans
//! without a collector to run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio_stream::wrappers::TcpListenerStream;

/// The receiver: its endpoint and the spans received so far. Serving stops when it is dropped.
pub(super) struct OtlpSink {
    /// `http://127.0.0.1:<port>`, for `--otlp-endpoint`.
    pub(super) endpoint: String,
    spans: Arc<AtomicU64>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Counter(Arc<AtomicU64>);

#[tonic::async_trait]
impl TraceService for Counter {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .into_inner()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.fetch_add(spans as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl OtlpSink {
    /// Serves on a free loopback port.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub(super) async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let spans = Arc::new(AtomicU64::new(0));
        let serve = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Counter(spans.clone())))
            .serve_with_incoming(TcpListenerStream::new(listener));
        let server = tokio::spawn(async move {
            if let Err(err) = serve.await {
                tracing::warn!(%err, "the benchmark's OTLP receiver stopped");
            }
        });
        Ok(Self {
            endpoint,
            spans,
            server,
        })
    }

    /// Spans received so far.
    pub(super) fn spans(&self) -> u64 {
        self.spans.load(Ordering::Relaxed)
    }
}

impl Drop for OtlpSink {
    fn drop(&mut self) {
        self.server.abort();
    }
}
