//! HTTP routes to stop and start simulated nodes, for a process that hosts the simulator (e.g.
//! `flotilla devcluster` through `DevClusterConfig::extension`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

use super::SimNodesHandle;

/// `POST /flotilla/v1/nodes/{name}/stop` and `POST /flotilla/v1/nodes/{name}/start`.
///
/// Both answer 200 with `{"node": name, "running": bool}`, or 404 with a Kubernetes `Status`
/// (reason NotFound) when `name` is not a simulated node.
pub fn control_router(handle: SimNodesHandle) -> axum::Router {
    axum::Router::new()
        .route("/flotilla/v1/nodes/{name}/stop", post(stop))
        .route("/flotilla/v1/nodes/{name}/start", post(start))
        .with_state(handle)
}

async fn stop(State(handle): State<SimNodesHandle>, Path(name): Path<String>) -> Response {
    answer(&handle, &name, handle.stop_node(&name))
}

async fn start(State(handle): State<SimNodesHandle>, Path(name): Path<String>) -> Response {
    answer(&handle, &name, handle.start_node(&name))
}

fn answer(handle: &SimNodesHandle, name: &str, result: Result<(), super::SimError>) -> Response {
    match result {
        Ok(()) => Json(json!({"node": name, "running": handle.is_running(name)})).into_response(),
        Err(err) => (
            StatusCode::NOT_FOUND,
            Json(json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": err.to_string(),
                "reason": "NotFound",
                "details": {"name": name, "kind": "nodes"},
                "code": 404,
            })),
        )
            .into_response(),
    }
}
