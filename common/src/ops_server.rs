//! The operational HTTP endpoints every Flotilla process serves: `/metrics` (Prometheus text),
//! `/healthz` (the process is alive) and `/readyz` (the process can do its job).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

/// Readiness and liveness flags that the process's parts flip; cheap to clone.
#[derive(Clone, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
    healthy: Arc<AtomicBool>,
    reason: Arc<Mutex<String>>,
}

impl Health {
    /// A process that is healthy but not yet ready.
    pub fn new() -> Self {
        let health = Self::default();
        health.healthy.store(true, Ordering::SeqCst);
        *health.reason.lock() = "starting".into();
        health
    }

    /// Marks the process ready (`/readyz` answers 200) or not, with the reason shown in the body.
    pub fn set_ready(&self, ready: bool, reason: &str) {
        self.ready.store(ready, Ordering::SeqCst);
        *self.reason.lock() = reason.to_owned();
    }

    /// Marks the process unhealthy: `/healthz` answers 500 so the kubelet restarts it.
    pub fn set_unhealthy(&self, reason: &str) {
        self.healthy.store(false, Ordering::SeqCst);
        *self.reason.lock() = reason.to_owned();
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// Errors of the ops server.
#[derive(Debug, thiserror::Error)]
pub enum OpsServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A running ops server.
pub struct OpsServer {
    addr: SocketAddr,
}

#[derive(Clone)]
struct OpsState {
    registry: Arc<Mutex<Registry>>,
    health: Health,
}

impl OpsServer {
    /// Binds `addr` and serves until `stop` is cancelled.
    ///
    /// # Errors
    /// [`OpsServerError::Bind`] when the address is taken.
    pub async fn start(
        addr: SocketAddr,
        registry: Arc<Mutex<Registry>>,
        health: Health,
        stop: CancellationToken,
    ) -> Result<Self, OpsServerError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| OpsServerError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| OpsServerError::Bind { addr, source })?;
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(OpsState { registry, health });
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
            if let Err(err) = served {
                tracing::warn!(error = %err, "ops server stopped");
            }
        });
        Ok(Self { addr })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

async fn metrics(State(state): State<OpsState>) -> impl IntoResponse {
    let mut body = String::new();
    let encoded = prometheus_client::encoding::text::encode(&mut body, &state.registry.lock());
    match encoded {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            err.to_string(),
        ),
    }
}

async fn healthz(State(state): State<OpsState>) -> impl IntoResponse {
    if state.health.healthy.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            state.health.reason.lock().clone(),
        )
    }
}

async fn readyz(State(state): State<OpsState>) -> impl IntoResponse {
    let reason = state.health.reason.lock().clone();
    if state.health.is_ready() {
        (StatusCode::OK, reason)
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, reason)
    }
}
