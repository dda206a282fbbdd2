//! The SDK's [`CacheBackend`] over gRPC: Get and List against the welcomed leader's `Cache` service,
//! every request carrying the worker's identity (`flotilla-worker-id`, `flotilla-lease-id`), for the
//! leader answers cache reads only for a worker registered on the lease it names.
//!
//! Under an exported reconcile each read is a client span, `cache get <resource>` or
//! `cache list <resource>`, with `cache.op`, `k8s.resource`, `key` (a get) or `namespace` (a list), and
//! `cache.objects`, the objects it returned: a trace shows what a reconcile waited for before its first
//! API call.

use std::sync::Arc;

use bytes::Bytes;
use flotilla_common::ResourceKind;
use flotilla_proto as proto;
use flotilla_sdk::{CacheBackend, CacheError, CacheQuery};
use futures::future::BoxFuture;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tracing::{Instrument, Span, field, info_span};

use flotilla_common::{TRACE_TARGET, in_exported_span};

/// The welcomed leader's cache, as this worker (on this lease) reads it; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct GrpcCache {
    channel: Channel,
    worker_id: Arc<str>,
    lease_id: i64,
}

/// Adds the worker's identity to every request.
#[derive(Clone)]
struct Identify {
    worker: MetadataValue<Ascii>,
    lease: MetadataValue<Ascii>,
}

impl Interceptor for Identify {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let metadata = request.metadata_mut();
        metadata.insert(proto::WORKER_ID_METADATA, self.worker.clone());
        metadata.insert(proto::LEASE_ID_METADATA, self.lease.clone());
        Ok(request)
    }
}

impl GrpcCache {
    /// The cache behind `channel` (the leader's), read as worker `worker_id` on lease `lease_id`.
    pub(crate) fn new(channel: Channel, worker_id: Arc<str>, lease_id: i64) -> Self {
        Self {
            channel,
            worker_id,
            lease_id,
        }
    }

    fn client(
        &self,
    ) -> Result<proto::cache_client::CacheClient<InterceptedService<Channel, Identify>>, CacheError>
    {
        // A worker id is checked at start-up (a DNS-1123 subdomain), so it is valid metadata; a failure
        // would be a bug, reported as a refused request rather than a panic.
        let worker = MetadataValue::try_from(&*self.worker_id)
            .map_err(|_| rpc(tonic::Status::internal("worker id is not valid metadata")))?;
        let identify = Identify {
            worker,
            lease: MetadataValue::from(self.lease_id),
        };
        Ok(
            proto::cache_client::CacheClient::with_interceptor(self.channel.clone(), identify)
                .max_decoding_message_size(proto::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(proto::MAX_MESSAGE_BYTES),
        )
    }
}

/// The span of one cache read under the current (exported) span; a disabled span otherwise.
fn read_span(op: &'static str, kind: &ResourceKind, key: Option<String>, namespace: &str) -> Span {
    if !in_exported_span() {
        return Span::none();
    }
    info_span!(
        target: TRACE_TARGET,
        "cache_read",
        otel.name = format!("cache {op} {}", kind.plural),
        otel.kind = "client",
        otel.status_code = field::Empty,
        cache.op = op,
        k8s.resource = %kind.plural,
        key = key,
        namespace = (!namespace.is_empty()).then_some(namespace),
        cache.objects = field::Empty,
    )
}

/// Records the outcome of a read on its span: the objects returned, or an error status.
fn record_read<T>(span: &Span, result: &Result<T, CacheError>, objects: impl Fn(&T) -> usize) {
    match result {
        // As i64: the OpenTelemetry layer exports unsigned fields as strings.
        Ok(value) => {
            span.record(
                "cache.objects",
                i64::try_from(objects(value)).unwrap_or(i64::MAX),
            );
        }
        Err(_) => {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// A refused or failed request; the status (code and message) stays as the source.
fn rpc(status: tonic::Status) -> CacheError {
    CacheError::Request(Box::new(status))
}

impl CacheBackend for GrpcCache {
    fn get<'a>(
        &'a self,
        kind: &'a ResourceKind,
        namespace: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Bytes>, CacheError>> {
        let key = match namespace {
            Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
            _ => name.to_owned(),
        };
        let span = read_span("get", kind, Some(key), "");
        Box::pin(async move {
            let read = async {
                let request = proto::GetRequest {
                    kind: Some(kind.into()),
                    namespace: namespace.unwrap_or_default().to_owned(),
                    name: name.to_owned(),
                };
                let response = self.client()?.get(request).await.map_err(rpc)?;
                Ok(response.into_inner().object)
            };
            let result = read.instrument(span.clone()).await;
            record_read(&span, &result, |o: &Option<Bytes>| usize::from(o.is_some()));
            result
        })
    }

    fn list<'a>(
        &'a self,
        kind: &'a ResourceKind,
        query: &'a CacheQuery,
    ) -> BoxFuture<'a, Result<Vec<Bytes>, CacheError>> {
        let span = read_span(
            "list",
            kind,
            None,
            query.namespace_filter().unwrap_or_default(),
        );
        Box::pin(async move {
            let result = self.list_pages(kind, query).instrument(span.clone()).await;
            record_read(&span, &result, Vec::len);
            result
        })
    }
}

impl GrpcCache {
    /// Every page of a List.
    async fn list_pages(
        &self,
        kind: &ResourceKind,
        query: &CacheQuery,
    ) -> Result<Vec<Bytes>, CacheError> {
        let (index, index_value) = query.index_filter().unwrap_or_default();
        let mut request = proto::ListRequest {
            kind: Some(kind.into()),
            namespace: query.namespace_filter().unwrap_or_default().to_owned(),
            label_selector: query.label_filter().unwrap_or_default().to_owned(),
            index: index.to_owned(),
            index_value: index_value.to_owned(),
            r#continue: String::new(),
        };
        // The coordinator answers in pages of a few MiB (however large the objects); read them all.
        let mut objects = Vec::new();
        loop {
            let page = self
                .client()?
                .list(request.clone())
                .await
                .map_err(rpc)?
                .into_inner();
            objects.extend(page.objects);
            if page.r#continue.is_empty() || page.r#continue <= request.r#continue {
                return Ok(objects);
            }
            request.r#continue = page.r#continue;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use parking_lot::Mutex;
    use tokio_stream::wrappers::TcpListenerStream;

    use super::*;

    /// A Cache service that notes the identity metadata and the request of every call.
    #[derive(Clone, Default)]
    struct Noting {
        calls: Arc<Mutex<Vec<(String, String, String)>>>,
    }

    impl Noting {
        fn note(&self, metadata: &tonic::metadata::MetadataMap, what: String) {
            let value = |key| {
                metadata
                    .get(key)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned()
            };
            self.calls.lock().push((
                value(proto::WORKER_ID_METADATA),
                value(proto::LEASE_ID_METADATA),
                what,
            ));
        }
    }

    #[tonic::async_trait]
    impl proto::cache_server::Cache for Noting {
        async fn get(
            &self,
            request: tonic::Request<proto::GetRequest>,
        ) -> Result<tonic::Response<proto::GetResponse>, tonic::Status> {
            let r = request.get_ref();
            self.note(
                request.metadata(),
                format!("get {}/{}", r.namespace, r.name),
            );
            Ok(tonic::Response::new(proto::GetResponse {
                object: Some(Bytes::from_static(b"{}")),
            }))
        }

        async fn list(
            &self,
            request: tonic::Request<proto::ListRequest>,
        ) -> Result<tonic::Response<proto::ListResponse>, tonic::Status> {
            let r = request.get_ref();
            let what = format!(
                "list {}|{}|{}={}",
                r.namespace, r.label_selector, r.index, r.index_value
            );
            self.note(request.metadata(), what);
            Err(tonic::Status::permission_denied("not for you"))
        }
    }

    /// `service` as a Cache server on a loopback port, and a channel to it; abort the task to stop it.
    async fn serve(
        service: Noting,
    ) -> (
        tonic::transport::Channel,
        tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(proto::cache_server::CacheServer::new(service))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        (channel, server)
    }

    #[tokio::test]
    async fn every_cache_request_carries_the_worker_id_and_lease_and_a_refusal_keeps_its_status() {
        let service = Noting::default();
        let (channel, server) = serve(service.clone()).await;
        let cache = GrpcCache::new(channel, Arc::from("worker-7"), 0x1f);
        let kind = ResourceKind::new("", "v1", "ConfigMap", "configmaps", true);
        let got = cache.get(&kind, Some("ns"), "a").await.unwrap();
        assert_eq!(got.as_deref(), Some(&b"{}"[..]));
        let query = CacheQuery::all()
            .namespace("ns")
            .labels("app=x")
            .owned_by("u-1");
        let err = cache.list(&kind, &query).await.unwrap_err();
        let CacheError::Request(source) = err else {
            panic!("expected a refused request, got {err:?}");
        };
        let status = source.downcast_ref::<tonic::Status>().unwrap();
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            *service.calls.lock(),
            [
                ("worker-7".into(), "31".into(), "get ns/a".into()),
                (
                    "worker-7".into(),
                    "31".into(),
                    "list ns|app=x|owner-uid=u-1".into()
                ),
            ]
        );
        server.abort();
    }

    #[tokio::test]
    async fn under_a_traced_reconcile_each_read_is_a_client_span_with_what_it_returned() {
        use flotilla_common::{AttrValue, SpanCapture};

        let capture = SpanCapture::start();
        let (channel, server) = serve(Noting::default()).await;
        let cache = GrpcCache::new(channel, Arc::from("worker-7"), 1);
        let kind = ResourceKind::new("", "v1", "ConfigMap", "configmaps", true);
        let query = CacheQuery::all().namespace("ns");
        async {
            cache.get(&kind, Some("ns"), "a").await.unwrap();
            let _ = cache.list(&kind, &query).await;
        }
        .instrument(info_span!(target: TRACE_TARGET, "reconcile"))
        .await;
        // Outside an exported span: no span.
        cache.get(&kind, Some("ns"), "b").await.unwrap();
        server.abort();

        let spans = capture.spans();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["cache get configmaps", "cache list configmaps", "reconcile"]
        );
        let (get, list) = (&spans[0], &spans[1]);
        assert_eq!(get.attr("cache.op"), Some(&AttrValue::Str("get".into())));
        assert_eq!(get.attr("key"), Some(&AttrValue::Str("ns/a".into())));
        assert_eq!(get.attr("cache.objects"), Some(&AttrValue::Int(1)));
        assert_eq!(
            get.attr("k8s.resource"),
            Some(&AttrValue::Str("configmaps".into()))
        );
        assert_eq!(list.attr("namespace"), Some(&AttrValue::Str("ns".into())));
        assert_eq!(list.attr("cache.objects"), None, "the list was refused");
        assert_eq!(get.parent_span_id, spans[2].span_id);
    }
}
