//! The worker's Kubernetes HTTP stack, built once: a shared hyper client (one connection pool) with
//! kube's TLS, base URI, auth and header layers, behind the request counter. Each controller gets its
//! own rate limiter over it and a User-Agent naming it, as kube-controller-manager gives each
//! controller its own client with `--kube-api-qps` / `--kube-api-burst`; each reconcile gets its own
//! `kube::Client` over its controller's stack, with the write-recording layer on top. Events go out through one more limiter
//! of the same size shared by the worker's controllers, as kube-controller-manager's event broadcaster
//! has a client of its own: an Event never spends a controller's budget. A reconcile's client sends
//! the write intents of its traced writes to the worker's [`WriteIntents`].

use std::sync::Arc;

use bytes::Bytes;
use flotilla_sdk::host::{KubeClients, WriteJournal};
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder};

use super::api_trace::ApiTraceLayer;
use super::rate_limit::{RateLimitLayer, TokenBucket};
use super::recording::{KindTable, RecordingLayer};
use super::write_intents::WriteIntents;
use flotilla_common::{RequestCountLayer, RequestCounter, UserAgentLayer};

/// Response body of the shared stack.
pub(crate) type HttpBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

type BaseService = BoxCloneSyncService<Request<kube::client::Body>, Response<HttpBody>, BoxError>;

/// Errors of building the stack.
#[derive(Debug, thiserror::Error)]
pub enum KubeStackError {
    /// The kube configuration cannot be turned into a client (TLS material, auth plugin).
    #[error("cannot build the Kubernetes client stack")]
    Config(#[source] kube::Error),
}

/// The shared stack, or one controller's rate-limited view of it; cheap to clone.
#[derive(Clone)]
pub(crate) struct KubeStack {
    base: BaseService,
    /// `base` behind the events' own limiter.
    events: BaseService,
    default_namespace: String,
    kinds: Arc<KindTable>,
    /// Where reconciles' clients say which objects their traced writes are about to change.
    intents: WriteIntents,
}

impl KubeStack {
    /// Builds the stack from `config`, counting every request it sends into `requests`. It has no rate
    /// limit of its own (see [`KubeStack::for_controller`]) except for Events, behind `events`. The
    /// reconciles' clients send their write intents to `intents`.
    ///
    /// # Errors
    /// [`KubeStackError::Config`] when TLS or auth cannot be set up from the configuration.
    pub(crate) fn new(
        config: &kube::Config,
        kinds: KindTable,
        requests: RequestCounter,
        events: Arc<TokenBucket>,
        intents: WriteIntents,
    ) -> Result<Self, KubeStackError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(config.connect_timeout);
        let https = config
            .rustls_https_connector_with_connector(http)
            .map_err(KubeStackError::Config)?;
        let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
        let service = ServiceBuilder::new()
            // Below every limiter, so a request is counted when it is sent, not while it waits.
            .layer(RequestCountLayer::new(requests))
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer().map_err(KubeStackError::Config)?)
            .layer(
                config
                    .extra_headers_layer()
                    .map_err(KubeStackError::Config)?,
            )
            .map_response(|response: Response<hyper::body::Incoming>| {
                response.map(|body| body.map_err(BoxError::from).boxed())
            })
            .map_err(BoxError::from)
            .service(client);
        let base = BoxCloneSyncService::new(service);
        let events = BoxCloneSyncService::new(
            ServiceBuilder::new()
                .layer(RateLimitLayer::new(events))
                .service(base.clone()),
        );
        Ok(Self {
            base,
            events,
            default_namespace: config.default_namespace.clone(),
            kinds: Arc::new(kinds),
            intents,
        })
    }

    /// This stack as `controller`'s (its User-Agent names the controller, as kube-controller-manager's
    /// clients do), behind `bucket`: every request waits for a token first. The connection pool and
    /// the request counter stay shared.
    pub(crate) fn for_controller(&self, controller: &str, bucket: Arc<TokenBucket>) -> Self {
        let user_agent = UserAgentLayer::new(controller);
        let service = ServiceBuilder::new()
            .layer(RateLimitLayer::new(bucket))
            .layer(user_agent.clone())
            .service(self.base.clone());
        let events = ServiceBuilder::new()
            .layer(user_agent)
            .service(self.events.clone());
        Self {
            base: BoxCloneSyncService::new(service),
            events: BoxCloneSyncService::new(events),
            default_namespace: self.default_namespace.clone(),
            kinds: self.kinds.clone(),
            intents: self.intents.clone(),
        }
    }
}

/// What the SDK's contexts ask for: a recording client per reconcile, a plain one for Events.
impl KubeClients for KubeStack {
    /// A client for one reconcile whose successful writes land in `journal`.
    fn recording_client(&self, journal: &WriteJournal) -> kube::Client {
        let service = ServiceBuilder::new()
            // Outermost, so each call's span covers the wait for a token too.
            .layer(ApiTraceLayer::new(Some(self.intents.clone())))
            .layer(RecordingLayer::new(journal.clone(), self.kinds.clone()))
            .service(self.base.clone());
        kube::Client::new(service, self.default_namespace.clone())
    }

    /// A client that records nothing, for Events (which no key waits on), behind the events' limiter.
    /// Its writes (Events) send no write intents: an Event's echo starts no reconcile worth a link.
    fn plain_client(&self) -> kube::Client {
        let service = ServiceBuilder::new()
            .layer(ApiTraceLayer::new(None))
            .service(self.events.clone());
        kube::Client::new(service, self.default_namespace.clone())
    }
}
