//! One allocation pass, run by the anchor namespace's key: find the Nodes without ranges in the
//! cache; if there are any, read every Node live, plan ([`super::allocation::plan`]) and write each
//! planned Node's `podCIDR`/`podCIDRs` on the condition that it is still the version planned from.

use std::sync::Arc;
use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::{Namespace, Node, ObjectReference};
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, ListParams, Patch, PatchParams};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, EventType, Request};
use futures::StreamExt;
use serde_json::json;

use super::allocation::{Assignment, pending, plan};
use super::cidr::Cidr;
use super::config::Pool;

/// The namespace whose key runs the pass wherever the fleet sees it (every cluster has it and
/// kube-apiserver refuses to delete it).
pub const ANCHOR_NAMESPACE: &str = "kube-system";

/// How many Nodes a pass polls the cache for per second at most (see [`next_pass`]).
const NODES_PER_SECOND: u64 = 1000;

/// The shortest and longest wait between passes.
const MIN_PERIOD: Duration = Duration::from_secs(1);
const MAX_PERIOD: Duration = Duration::from_secs(10);

/// How many tries a Node's write gets before `CIDRAssignmentFailed` (upstream `cidrUpdateRetries`).
const WRITE_TRIES: usize = 3;

/// How many Node writes a pass has in flight at once (the worker's API limiter paces them anyway).
const PARALLEL_WRITES: usize = 16;

/// Live lists are read in pages of this many Nodes.
const PAGE: u32 = 500;

/// Errors of one pass; the key is retried with the fleet's rate limiter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache could not list namespaces or Nodes.
    #[error("cannot read the cache")]
    Cache(#[source] CacheError),
    /// The live list of Nodes failed: nothing was allocated.
    #[error("cannot list nodes")]
    List(#[source] kube::Error),
    /// Some Nodes could not be given their ranges (each has a `CIDRAssignmentFailed` Event).
    #[error("cannot set the pod CIDRs of {0} node(s)")]
    Writes(usize),
}

/// The allocator's configuration, resolved once from the flags.
#[derive(Debug, Clone)]
pub struct Allocator {
    /// The pools, one per cluster CIDR; empty when allocation is off.
    pub pools: Vec<Pool>,
    /// `--service-cluster-ip-range`.
    pub service_ranges: Vec<Cidr>,
}

/// Runs the pass if `request` is the anchor namespace's key and allocation is on; every other key is
/// done at once.
///
/// # Errors
/// [`Error`] when the cache or the live list cannot be read, or a Node's write keeps failing.
pub async fn reconcile(
    request: Request<Namespace>,
    ctx: Context,
    allocator: Arc<Allocator>,
) -> Result<Action, Error> {
    if allocator.pools.is_empty()
        || request.object().is_none()
        || !is_anchor(&request, &ctx).await?
    {
        return Ok(Action::await_change());
    }
    let cached: Vec<Node> = ctx
        .cache()
        .list(&CacheQuery::all())
        .await
        .map_err(Error::Cache)?;
    let next = Action::requeue(next_pass(cached.len()));
    if !cached.iter().any(pending) {
        return Ok(next);
    }
    // The cache may lag behind this pass's predecessor (a failover to a coordinator whose informer
    // is behind): only a quorum read is sure to show every range already written.
    let nodes = list_live(&ctx).await?;
    let plan = plan(&allocator.pools, &allocator.service_ranges, &nodes);
    for (node, value) in &plan.garbage {
        tracing::warn!(
            node,
            value,
            "node podCIDRs entry is not a CIDR; it occupies nothing"
        );
    }
    for name in &plan.unavailable {
        if let Some(node) = nodes
            .iter()
            .find(|n| n.metadata.name.as_ref() == Some(name))
        {
            record_status_change(&ctx, node, "CIDRNotAvailable");
        }
    }
    let failed = futures::stream::iter(plan.assignments)
        .map(|assignment| {
            let ctx = ctx.clone();
            let node = nodes
                .iter()
                .find(|n| n.metadata.name.as_ref() == Some(&assignment.node))
                .cloned();
            async move { write(&ctx, &assignment, node.as_ref()).await }
        })
        .buffer_unordered(PARALLEL_WRITES)
        .filter(|ok| futures::future::ready(!ok))
        .count()
        .await;
    if failed > 0 {
        return Err(Error::Writes(failed));
    }
    Ok(next)
}

/// The wait before the next pass: a second per [`NODES_PER_SECOND`] cached Nodes, within
/// [`MIN_PERIOD`] ..= [`MAX_PERIOD`], so polling a large cluster stays cheap.
pub fn next_pass(nodes: usize) -> Duration {
    let secs = (nodes as u64).div_ceil(NODES_PER_SECOND);
    Duration::from_secs(secs).clamp(MIN_PERIOD, MAX_PERIOD)
}

/// Writes one Node's ranges; whether it is done (written, or no longer the Node planned for: the
/// next pass plans it again).
async fn write(ctx: &Context, assignment: &Assignment, node: Option<&Node>) -> bool {
    let api: Api<Node> = Api::all(ctx.client());
    // Upstream's `PatchNodeCIDRs`, conditional on the version planned from: a Node changed since
    // (given ranges by someone else, deleted and created again) is left to the next pass.
    let patch = json!({
        "metadata": {"resourceVersion": assignment.resource_version},
        "spec": {"podCIDR": assignment.cidrs[0], "podCIDRs": assignment.cidrs},
    });
    let mut last = None;
    for _ in 0..WRITE_TRIES {
        match api
            .patch(
                &assignment.node,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(node = %assignment.node, cidrs = ?assignment.cidrs, "set node pod CIDRs");
                return true;
            }
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                tracing::debug!(node = %assignment.node, code = status.code, "node changed since the pass read it");
                return true;
            }
            Err(err) => last = Some(err),
        }
    }
    if let Some(err) = last {
        tracing::warn!(node = %assignment.node, error = %err, "failed to set node pod CIDRs");
    }
    if let Some(node) = node {
        record_status_change(ctx, node, "CIDRAssignmentFailed");
    }
    false
}

/// Upstream `RecordNodeStatusChange`: a Normal Event `<status>` on the Node.
fn record_status_change(ctx: &Context, node: &Node, status: &str) {
    let name = node.metadata.name.clone().unwrap_or_default();
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.clone()),
        uid: node.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    ctx.recorder().event_on_reference(
        &reference,
        EventType::Normal,
        status,
        format!("Node {name} status is now: {status}"),
    );
}

/// Every Node, read from the API server (a quorum read, page by page).
async fn list_live(ctx: &Context) -> Result<Vec<Node>, Error> {
    let api: Api<Node> = Api::all(ctx.client());
    let mut nodes = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await.map_err(Error::List)?;
        nodes.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(nodes),
        }
    }
}

/// Whether this namespace's key runs the pass: `kube-system` where the fleet sees it, otherwise (a
/// fleet scoped to some namespaces) the first cached namespace by name.
async fn is_anchor(request: &Request<Namespace>, ctx: &Context) -> Result<bool, Error> {
    if request.name() == ANCHOR_NAMESPACE {
        return Ok(true);
    }
    let cache = ctx.cache();
    if cache
        .get::<Namespace>(None, ANCHOR_NAMESPACE)
        .await
        .map_err(Error::Cache)?
        .is_some()
    {
        return Ok(false);
    }
    let first = cache
        .list::<Namespace>(&CacheQuery::all())
        .await
        .map_err(Error::Cache)?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .min();
    Ok(first.as_deref() == Some(request.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_cluster_is_polled_less_often_within_bounds() {
        assert_eq!(next_pass(0), MIN_PERIOD);
        assert_eq!(next_pass(50), MIN_PERIOD);
        assert_eq!(next_pass(2500), Duration::from_secs(3));
        assert_eq!(next_pass(1_000_000), MAX_PERIOD);
    }
}
