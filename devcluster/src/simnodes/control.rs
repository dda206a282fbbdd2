//! HTTP routes to stop and start simulated nodes and to change the conditions they report, for a
//! process that hosts the simulator (e.g. `flotilla devcluster` through `DevClusterConfig::extension`).
//!
//! - `POST /flotilla/v1/nodes/{name}/stop`, `POST /flotilla/v1/nodes/{name}/start`: the node's
//!   "kubelet" stops or resumes its heartbeats and pod updates.
//! - `POST /flotilla/v1/nodes/{name}/conditions` with a JSON body naming the conditions to set, e.g.
//!   `{"MemoryPressure": true}`, `{"DiskPressure": false, "PIDPressure": true}` or
//!   `{"NetworkUnavailable": true}` (the others keep their value): the node reports them at once,
//!   with kubelet's reasons and messages, and on every heartbeat after.
//!
//! `flotilla devcluster --nodes N` mounts them on its API server; `flotilla simnodes
//! --control-listen ADDR`, which simulates nodes in a real cluster, serves them alone
//! ([`serve_control`]).
//!
//! The routes must exist before the API server starts, while the simulator can only start once the
//! server answers; a [`NodeControl`] bridges the two: build the router from it first, attach the
//! simulator's handle later.

use std::sync::{Arc, OnceLock};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

use super::{ConditionsChange, SimError, SimNodesHandle};

/// A slot for the handle of a node simulator that starts after the routes were built.
#[derive(Clone, Default)]
pub struct NodeControl {
    handle: Arc<OnceLock<SimNodesHandle>>,
}

impl NodeControl {
    /// An empty slot: the routes answer 503 until [`NodeControl::attach`] is called.
    pub fn new() -> Self {
        NodeControl::default()
    }

    /// Connects the routes to a running simulator. Only the first call has an effect.
    pub fn attach(&self, handle: SimNodesHandle) {
        let _ = self.handle.set(handle);
    }
}

/// `POST /v1/nodes/{name}/stop` and `POST /v1/nodes/{name}/start`, meant to be mounted under
/// `/flotilla` (as `DevClusterConfig::extension` is), giving `/flotilla/v1/nodes/{name}/stop`.
///
/// Both answer 200 with `{"node": name, "running": bool}`; 404 with a Kubernetes `Status` (reason
/// NotFound) when `name` is not a simulated node; 503 (reason ServiceUnavailable) while no simulator
/// is attached.
///
/// `POST /v1/nodes/{name}/conditions` takes a [`ConditionsChange`] and answers 200 with
/// `{"node": name, "conditions": {...}}`, every condition now reported; 400 (reason BadRequest) for a
/// body that is not one (an unknown condition type included), 404 and 503 as above.
pub fn control_router(control: NodeControl) -> axum::Router {
    axum::Router::new()
        .route("/v1/nodes/{name}/stop", post(stop))
        .route("/v1/nodes/{name}/start", post(start))
        .route("/v1/nodes/{name}/conditions", post(conditions))
        .with_state(control)
}

async fn stop(State(control): State<NodeControl>, Path(name): Path<String>) -> Response {
    match control.handle.get() {
        Some(handle) => answer(handle, &name, handle.stop_node(&name)),
        None => unavailable(),
    }
}

async fn start(State(control): State<NodeControl>, Path(name): Path<String>) -> Response {
    match control.handle.get() {
        Some(handle) => answer(handle, &name, handle.start_node(&name)),
        None => unavailable(),
    }
}

async fn conditions(
    State(control): State<NodeControl>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let Some(handle) = control.handle.get() else {
        return unavailable();
    };
    let change: ConditionsChange = match serde_json::from_slice(&body) {
        Ok(change) => change,
        Err(err) => {
            let message = format!(
                "the body must name conditions to set, e.g. {{\"MemoryPressure\": true}}: {err}"
            );
            return status(StatusCode::BAD_REQUEST, "BadRequest", &message);
        }
    };
    match handle.set_conditions(&name, change) {
        Ok(conditions) => Json(json!({"node": name, "conditions": conditions})).into_response(),
        Err(err) => status(StatusCode::NOT_FOUND, "NotFound", &err.to_string()),
    }
}

/// Serves the routes under `/flotilla` on `listener` (plain HTTP, meant for loopback) for the
/// simulator behind `handle`, until `shutdown` fires.
///
/// # Errors
/// When the server fails.
pub async fn serve_control(
    listener: tokio::net::TcpListener,
    handle: SimNodesHandle,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    let control = NodeControl::new();
    control.attach(handle);
    let app = axum::Router::new().nest("/flotilla", control_router(control));
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

fn answer(handle: &SimNodesHandle, name: &str, result: Result<(), SimError>) -> Response {
    match result {
        Ok(()) => Json(json!({"node": name, "running": handle.is_running(name)})).into_response(),
        Err(err) => status(StatusCode::NOT_FOUND, "NotFound", &err.to_string()),
    }
}

fn unavailable() -> Response {
    status(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        "the node simulator is not running (start devcluster with --nodes N)",
    )
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = Json(json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    }));
    (code, body).into_response()
}
