//! A client span per Kubernetes API request (`kube_api`), a child of the span current where the request
//! is made — the reconcile's, since reconciles call the API from their own task — with the verb,
//! resource and response code (`verb`, `resource`, `code`, as `flotilla_kube_requests_total` names
//! them), so a trace shows each call a reconcile made and how long it waited and took.
//!
//! The layer sits above the rate limiter: the span includes the wait for a token, which is where a
//! throttled reconcile spends its time. With tracing off it passes requests through untouched.

use std::task::{Context, Poll};

use flotilla_common::{TRACE_TARGET, tracing_enabled};
use futures::future::BoxFuture;
use http::{Request, Response};
use tower::{Layer, Service};
use tracing::{Instrument, field, info_span};

use flotilla_common::verb_and_resource;

/// Wraps each request in a `kube_api` client span while tracing is on.
#[derive(Clone, Copy, Default)]
pub(crate) struct ApiTraceLayer;

impl<S> Layer<S> for ApiTraceLayer {
    type Service = ApiTrace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiTrace { inner }
    }
}

/// The service of [`ApiTraceLayer`].
#[derive(Clone)]
pub(crate) struct ApiTrace<S> {
    inner: S,
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
        let exported = tracing_enabled()
            && tracing::Span::current()
                .metadata()
                .is_some_and(|meta| meta.target() == TRACE_TARGET);
        if !exported {
            return Box::pin(self.inner.call(request));
        }
        let (verb, resource) = verb_and_resource(request.method(), request.uri());
        let span = info_span!(
            target: TRACE_TARGET,
            "kube_api",
            otel.name = format!("{verb} {resource}"),
            otel.kind = "client",
            otel.status_code = field::Empty,
            verb,
            resource = %resource,
            code = field::Empty,
            http.request.method = %request.method(),
            url.path = request.uri().path(),
        );
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
                        span.record("code", status.as_u16());
                        if status.is_client_error() || status.is_server_error() {
                            span.record("otel.status_code", "ERROR");
                        }
                    }
                    Err(_) => {
                        span.record("code", "<error>");
                        span.record("otel.status_code", "ERROR");
                    }
                }
                result
            }
            .instrument(span),
        )
    }
}
