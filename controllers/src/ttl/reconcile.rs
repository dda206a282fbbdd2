//! One Node's TTL (upstream `updateNodeIfNeeded`): compare the Node's annotation with the cluster's
//! TTL and patch the annotation when they differ.

use std::sync::Arc;
use std::time::Instant;

use flotilla_sdk::k8s_openapi::api::core::v1::Node;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, Patch, PatchParams};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, Request};
use serde_json::json;

use super::boundaries::TTL_ANNOTATION;
use super::census::{Census, cluster_ttl, ttl_of};

/// Errors of one Node; the key is retried with the fleet's rate limiter, as upstream's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache could not list the Nodes.
    #[error("cannot list nodes from the cache")]
    Cache(#[source] CacheError),
    /// The patch of the annotation failed.
    #[error("cannot set the ttl annotation of node {node}")]
    Patch {
        /// The Node.
        node: String,
        /// Why.
        source: kube::Error,
    },
}

/// Sets the TTL annotation of the requested Node to the cluster's TTL if it differs.
///
/// # Errors
/// [`Error`] when the cache cannot be read or the patch fails.
pub async fn reconcile(
    request: Request<Node>,
    ctx: Context,
    census: Arc<Census>,
) -> Result<Action, Error> {
    let Some(node) = request.object() else {
        return Ok(Action::await_change());
    };
    let now = Instant::now();
    let desired = match census.fresh(now) {
        Some(ttl) => ttl,
        None => {
            let nodes: Vec<Node> = ctx
                .cache()
                .list(&CacheQuery::all())
                .await
                .map_err(Error::Cache)?;
            let ttl = cluster_ttl(&nodes);
            census.record(now, ttl);
            ttl
        }
    };
    if ttl_of(node) == Some(desired) {
        return Ok(Action::await_change());
    }
    // Upstream's two-way strategic merge patch of the Node with the annotation set is exactly this.
    let patch = json!({"metadata": {"annotations": {TTL_ANNOTATION: desired.to_string()}}});
    let nodes: Api<Node> = Api::all(ctx.client());
    match nodes
        .patch(
            request.name(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        Ok(_) => {
            tracing::debug!(
                node = request.name(),
                ttl = desired,
                "changed ttl annotation"
            );
            Ok(Action::await_change())
        }
        // Gone meanwhile: nothing to annotate.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        Err(source) => Err(Error::Patch {
            node: request.name().to_owned(),
            source,
        }),
    }
}
