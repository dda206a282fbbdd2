//! Counts a process's Kubernetes API requests by method and response code, under client-go's name
//! `rest_client_requests_total`, so a fleet's request budget can be read off `/metrics` and compared
//! with kube-controller-manager's; and by Kubernetes verb, resource and code
//! (`flotilla_kube_requests_total`, labelled as kube-apiserver's `apiserver_request_total`), to see
//! which requests a rollout spends.
//!
//! The layer sits below the rate limiter: it counts requests that were sent, not requests that wait
//! for a token. A request is counted once, when its response head (or its error) arrives — a watch
//! counts when it is established, as in client-go. A request whose future is dropped before either is
//! not counted. Labels stay low-cardinality: the method (`GET`, `POST`, …) and the status code, or
//! `<error>` when no response came back (client-go's label for transport errors); client-go's `host`
//! label is left out because a process talks to one API server.

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::{Layer, Service};

use crate::api_verb::verb_and_resource;

/// Labels of `rest_client_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The HTTP status code as digits, or `<error>`.
    code: String,
    /// The HTTP method, upper case.
    method: String,
}

/// Labels of `flotilla_kube_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection` or `other`.
    verb: String,
    /// The resource, with its subresource: `pods`, `deployments/status`.
    resource: String,
    /// The HTTP status code as digits, or `<error>`.
    code: String,
}

/// The two counter families; cheap to clone, clones count into the same series.
#[derive(Clone, Debug, Default)]
pub struct RequestCounter {
    /// `rest_client_requests_total`.
    pub by_method: Family<RequestLabels, Counter>,
    /// `flotilla_kube_requests_total`.
    pub by_verb: Family<VerbLabels, Counter>,
}

impl RequestCounter {
    /// Registers both families in `registry`, under client-go's and kube-apiserver's names.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            // client-go's name (`_total` is appended), so kube-controller-manager dashboards apply.
            "rest_client_requests",
            "Kubernetes API requests sent, by method and status code (<error>: no response)",
            self.by_method.clone(),
        );
        registry.register(
            "flotilla_kube_requests",
            "Kubernetes API requests sent, by verb, resource (with subresource) and status code, as \
             kube-apiserver's apiserver_request_total labels them",
            self.by_verb.clone(),
        );
    }
}

/// The `code` label of a request that ended without a response.
const ERROR_CODE: &str = "<error>";

/// Counts every request that passes through into a shared [`RequestCounter`].
#[derive(Clone)]
pub struct RequestCountLayer {
    requests: RequestCounter,
}

impl RequestCountLayer {
    /// A layer counting into `requests`.
    pub fn new(requests: RequestCounter) -> Self {
        Self { requests }
    }
}

impl<S> Layer<S> for RequestCountLayer {
    type Service = RequestCount<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestCount {
            inner,
            requests: self.requests.clone(),
        }
    }
}

/// The service of [`RequestCountLayer`].
#[derive(Clone)]
pub struct RequestCount<S> {
    inner: S,
    requests: RequestCounter,
}

impl<S, B, RB> Service<Request<B>> for RequestCount<S>
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
        let method = request.method().as_str().to_owned();
        let (verb, resource) = verb_and_resource(request.method(), request.uri());
        let requests = self.requests.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(response) => response.status().as_str().to_owned(),
                Err(_) => ERROR_CODE.to_owned(),
            };
            requests
                .by_verb
                .get_or_create(&VerbLabels {
                    verb: verb.to_owned(),
                    resource,
                    code: code.clone(),
                })
                .inc();
            requests
                .by_method
                .get_or_create(&RequestLabels { code, method })
                .inc();
            result
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::{Method, StatusCode};
    use tower::ServiceExt;

    /// Answers GETs with 200, POSTs with 409 and fails everything else.
    fn api()
    -> impl Service<
        Request<()>,
        Response = Response<()>,
        Error = &'static str,
        Future: Send + 'static,
    > + Clone {
        tower::service_fn(|request: Request<()>| async move {
            let status = match *request.method() {
                Method::GET => StatusCode::OK,
                Method::POST => StatusCode::CONFLICT,
                _ => return Err("connection reset"),
            };
            Ok(Response::builder().status(status).body(()).unwrap())
        })
    }

    fn count(requests: &RequestCounter, method: &str, code: &str) -> u64 {
        requests
            .by_method
            .get_or_create(&RequestLabels {
                code: code.to_owned(),
                method: method.to_owned(),
            })
            .get()
    }

    #[tokio::test]
    async fn each_response_is_counted_by_method_and_status_code_and_errors_as_error() {
        let requests = RequestCounter::default();
        let service = RequestCountLayer::new(requests.clone()).layer(api());
        for method in [
            Method::GET,
            Method::GET,
            Method::POST,
            Method::DELETE,
            Method::GET,
        ] {
            let request = Request::builder().method(method).body(()).unwrap();
            let _ = service.clone().oneshot(request).await;
        }
        assert_eq!(count(&requests, "GET", "200"), 3);
        assert_eq!(count(&requests, "POST", "409"), 1);
        assert_eq!(count(&requests, "DELETE", "<error>"), 1);
        assert_eq!(count(&requests, "POST", "200"), 0);
        let by_verb = |verb: &str, code: &str| {
            requests
                .by_verb
                .get_or_create(&VerbLabels {
                    verb: verb.to_owned(),
                    resource: String::new(),
                    code: code.to_owned(),
                })
                .get()
        };
        assert_eq!(by_verb("other", "200"), 3, "no path: no verb, no resource");
        assert_eq!(by_verb("other", "409"), 1);
    }

    #[tokio::test]
    async fn requests_are_counted_by_verb_and_resource() {
        let requests = RequestCounter::default();
        let service = RequestCountLayer::new(requests.clone()).layer(api());
        let request = Request::builder()
            .method(Method::GET)
            .uri("/apis/apps/v1/namespaces/ns/replicasets/web")
            .body(())
            .unwrap();
        service.oneshot(request).await.unwrap();
        let labels = VerbLabels {
            verb: "get".into(),
            resource: "replicasets".into(),
            code: "200".into(),
        };
        assert_eq!(requests.by_verb.get_or_create(&labels).get(), 1);
    }

    #[tokio::test]
    async fn the_counter_is_exposed_under_client_go_s_name() {
        let mut registry = prometheus_client::registry::Registry::default();
        let requests = RequestCounter::default();
        registry.register(
            "rest_client_requests",
            "requests",
            requests.by_method.clone(),
        );
        let service = RequestCountLayer::new(requests).layer(api());
        let request = Request::builder().method(Method::GET).body(()).unwrap();
        service.oneshot(request).await.unwrap();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"rest_client_requests_total{code="200",method="GET"} 1"#),
            "{text}"
        );
    }
}
