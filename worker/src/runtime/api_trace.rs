//! A client span per Kubernetes API request (`kube_api`), a child of the span current where the request
//! is made — the reconcile's, since reconciles call the API from their own task — with the verb,
//! resource and response code (`verb`, `resource`, `code`, as `flotilla_kube_requests_total` names
//! them), so a trace shows each call a reconcile made and how long it waited and took.
//!
//! Names: `<verb> <resource>` (`patch replicasets`) for a resource request, `<METHOD> <path>`
//! (`GET /api/v1`) for a discovery or other non-resource request. `code` is an integer attribute. As
//! OpenTelemetry's HTTP client conventions say, a failed request has `error.type`: the status code as
//! text for a 4xx or 5xx answer, `transport` for a request that got no response (and so no `code`).
//!
//! Before a mutating request (POST, PUT, PATCH, DELETE) whose path names its object, the layer sends a
//! write intent — the object and this span's `traceparent` — to the worker's [`WriteIntents`], so the
//! leader can link the write's echo to this span (see `write_intents`).
//!
//! The layer sits above the rate limiter: the span includes the wait for a token, which is where a
//! throttled reconcile spends its time (a `wait client_rate_limit` child covers that wait). With
//! tracing off it passes requests through untouched.

use std::task::{Context, Poll};

use flotilla_common::{TRACE_TARGET, TraceContext, in_exported_span, object_of, verb_and_resource};
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use tower::{Layer, Service};
use tracing::{Instrument, field, info_span};

use super::write_intents::WriteIntents;
#[cfg(test)]
use flotilla_proto as proto;

/// Wraps each request in a `kube_api` client span while tracing is on, and sends the write intents of
/// traced writes to `intents` (when there is one).
#[derive(Clone, Default)]
pub(crate) struct ApiTraceLayer {
    intents: Option<WriteIntents>,
}

impl ApiTraceLayer {
    /// The layer; `intents` receives the write intents of traced writes (`None`: none are sent).
    pub(crate) fn new(intents: Option<WriteIntents>) -> Self {
        Self { intents }
    }
}

impl<S> Layer<S> for ApiTraceLayer {
    type Service = ApiTrace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiTrace {
            inner,
            intents: self.intents.clone(),
        }
    }
}

/// The service of [`ApiTraceLayer`].
#[derive(Clone)]
pub(crate) struct ApiTrace<S> {
    inner: S,
    intents: Option<WriteIntents>,
}

/// The span name and `verb` of a request: `("patch replicasets", "patch")` for a resource request,
/// `("GET /api/v1", "get")` for one that names no resource.
fn span_name(method: &Method, uri: &http::Uri) -> (String, String, String) {
    let (verb, resource) = verb_and_resource(method, uri);
    if resource.is_empty() {
        let verb = method.as_str().to_ascii_lowercase();
        (format!("{method} {}", uri.path()), verb, resource)
    } else {
        (format!("{verb} {resource}"), verb.to_owned(), resource)
    }
}

/// Whether `method` changes what it names.
fn mutates(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

impl<S, B, RB> Service<Request<B>> for ApiTrace<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // A span only under an exported reconcile: one of a log-only reconcile would be a root of its own.
        if !in_exported_span() {
            return Box::pin(self.inner.call(request));
        }
        let (name, verb, resource) = span_name(request.method(), request.uri());
        let span = info_span!(
            target: TRACE_TARGET,
            "kube_api",
            otel.name = name,
            otel.kind = "client",
            otel.status_code = field::Empty,
            verb,
            resource,
            code = field::Empty,
            error.type = field::Empty,
            http.request.method = %request.method(),
            url.path = request.uri().path(),
        );
        if let Some(intents) = &self.intents
            && mutates(request.method())
            && let Some(object) = object_of(request.uri())
            && let Some(cx) = TraceContext::of_span(&span)
        {
            // Before the request leaves: the echo may reach the leader before the response reaches us.
            intents.send(object, &cx);
        }
        let response = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        Box::pin(
            async move {
                let result = response.await;
                let span = tracing::Span::current();
                match &result {
                    Ok(response) => {
                        let status = response.status();
                        // As i64: the OpenTelemetry layer exports unsigned fields as strings.
                        span.record("code", i64::from(status.as_u16()));
                        if status.is_client_error() || status.is_server_error() {
                            span.record("error.type", status.as_str());
                            span.record("otel.status_code", "ERROR");
                        }
                    }
                    Err(_) => {
                        span.record("error.type", "transport");
                        span.record("otel.status_code", "ERROR");
                    }
                }
                result
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use flotilla_common::{AttrValue, SpanCapture};
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    use super::super::rate_limit::{RateLimitLayer, TokenBucket};
    use super::*;

    /// An API that answers 200 to everything but creates (201).
    fn api() -> impl Service<
        Request<()>,
        Response = Response<()>,
        Error = std::convert::Infallible,
        Future = impl Send + 'static,
    > + Clone
    + Send
    + 'static {
        tower::service_fn(|request: Request<()>| async move {
            let status = match *request.method() {
                Method::POST => 201,
                Method::DELETE => 404,
                _ => 200,
            };
            Ok(Response::builder().status(status).body(()).unwrap())
        })
    }

    fn request(method: Method, uri: &str) -> Request<()> {
        Request::builder().method(method).uri(uri).body(()).unwrap()
    }

    #[tokio::test]
    async fn a_traced_write_on_a_named_object_sends_its_intent_and_its_span_and_wait_are_exported()
    {
        let capture = SpanCapture::start();
        let intents = WriteIntents::new(Counter::default());
        // One token, then one every 20 ms: the second call waits.
        let bucket = Arc::new(TokenBucket::new(50.0, 1));
        let service = tower::ServiceBuilder::new()
            .layer(ApiTraceLayer::new(Some(intents.clone())))
            .layer(RateLimitLayer::new(bucket))
            .service(api());
        let reconcile = tracing::info_span!(target: TRACE_TARGET, "reconcile");
        async {
            let patch = "/apis/apps/v1/namespaces/ns/replicasets/web";
            for uri in [patch, patch] {
                service
                    .clone()
                    .oneshot(request(Method::PATCH, uri))
                    .await
                    .unwrap();
            }
            for (method, uri) in [
                (Method::POST, "/api/v1/namespaces/ns/pods"),
                (Method::GET, "/api/v1"),
                (Method::DELETE, "/api/v1/namespaces/ns/pods/gone"),
            ] {
                service.clone().oneshot(request(method, uri)).await.unwrap();
            }
        }
        .instrument(reconcile)
        .await;

        let spans = capture.spans();
        let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
        let patches = named("patch replicasets");
        assert_eq!(patches.len(), 2, "{spans:#?}");
        for patch in &patches {
            assert_eq!(patch.attr("code"), Some(&AttrValue::Int(200)), "an int");
            assert_eq!(patch.attr("verb"), Some(&AttrValue::Str("patch".into())));
        }
        let [create] = &named("create pods")[..] else {
            panic!("one create: {spans:#?}")
        };
        assert_eq!(create.attr("code"), Some(&AttrValue::Int(201)));
        let [discovery] = &named("GET /api/v1")[..] else {
            panic!("a non-resource request is named by method and path: {spans:#?}")
        };
        assert_eq!(discovery.attr("verb"), Some(&AttrValue::Str("get".into())));
        let [gone] = &named("delete pods")[..] else {
            panic!("one delete: {spans:#?}")
        };
        assert_eq!(gone.attr("code"), Some(&AttrValue::Int(404)));
        assert_eq!(gone.attr("error.type"), Some(&AttrValue::Str("404".into())));
        assert_eq!(patches[0].attr("error.type"), None);

        // The intents: one per write on a named object (the delete of `gone` too), none for the
        // create by collection.
        let sent: Vec<proto::WriteIntent> = intents
            .take()
            .into_iter()
            .flat_map(|m| match m.msg {
                Some(proto::worker_message::Msg::Intents(batch)) => batch.items,
                _ => Vec::new(),
            })
            .collect();
        let names: Vec<&str> = sent.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["web", "web", "gone"]);
        for (intent, patch) in sent.iter().zip(&patches) {
            assert_eq!(
                (
                    intent.group.as_str(),
                    intent.version.as_str(),
                    intent.resource.as_str(),
                    intent.namespace.as_str(),
                    intent.name.as_str()
                ),
                ("apps", "v1", "replicasets", "ns", "web")
            );
            assert_eq!(
                intent.traceparent,
                format!("00-{}-{}-01", patch.trace_id, patch.span_id),
                "the intent carries the request's span"
            );
        }

        // The first call took the only token; every later one waited for its own, and a wait span
        // under its request covers that wait.
        let waits = named("wait client_rate_limit");
        let under = |span: &str| waits.iter().filter(|w| w.parent_span_id == span).count();
        assert_eq!(under(&patches[0].span_id), 0, "no wait, no span");
        assert_eq!(under(&patches[1].span_id), 1, "{spans:#?}");
        assert_eq!(under(&create.span_id), 1);
        let wait = waits[0];
        assert_eq!(
            wait.attr("wait.reason"),
            Some(&AttrValue::Str("client_rate_limit".into()))
        );
        assert!(
            matches!(wait.attr("wait.ms"), Some(AttrValue::Double(ms)) if *ms > 5.0),
            "{:?}",
            wait.attr("wait.ms")
        );
    }

    fn name(method: Method, uri: &str) -> (String, String, String) {
        span_name(&method, &uri.parse().unwrap())
    }

    #[test]
    fn resource_requests_are_named_by_verb_and_resource_and_others_by_method_and_path() {
        assert_eq!(
            name(Method::PATCH, "/apis/apps/v1/namespaces/ns/replicasets/web"),
            (
                "patch replicasets".into(),
                "patch".into(),
                "replicasets".into()
            )
        );
        assert_eq!(
            name(Method::GET, "/api/v1"),
            ("GET /api/v1".into(), "get".into(), String::new())
        );
        assert_eq!(
            name(Method::GET, "/version?timeout=32s"),
            ("GET /version".into(), "get".into(), String::new())
        );
        assert_eq!(
            name(Method::GET, "/apis"),
            ("GET /apis".into(), "get".into(), String::new())
        );
    }

    #[test]
    fn only_writes_mutate() {
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(mutates(&method), "{method}");
        }
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(!mutates(&method), "{method}");
        }
    }
}
