//! One look at a node (upstream's `monitorNodeHealth` for one node, `doNoScheduleTaintingPass` and
//! `doNoExecuteTaintingPass`): observe its heartbeats, mark it Unknown once its grace period ran out
//! (after re-reading its Lease live), keep its NoSchedule taints, mark its pods not ready, and add its
//! NoExecute taint at its zone's rate — then come back exactly when something is due. The loop does
//! the I/O; [`super::observation`], [`super::status`], [`super::taints`], [`super::zones`] and
//! [`super::limiter`] decide.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_sdk::k8s_openapi::api::coordination::v1::Lease;
use flotilla_sdk::k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, Patch, PatchParams};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, EventType, Request};
use parking_lot::Mutex;

use super::config::Config;
use super::limiter::{Decision, ZoneLimiter, zone_rate};
use super::observation::{Health, Observations, Signals};
use super::pods::not_ready_patch;
use super::status::{condition, marked_unknown, ready_status, status_patch, unknown_conditions};
use super::taints::{
    has_no_execute, no_execute_key, plan, taints_patch, with_no_execute, without_no_execute,
};
use super::zones::{ZoneView, zone_key, zone_state};

/// The namespace of the nodes' Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// How many grace periods a node may go unlooked-at before this worker forgets it.
const FORGET_AFTER_GRACE_PERIODS: u32 = 10;

/// Errors of one look; the key is retried with the fleet's rate limiter (a 409 means the node or
/// pod changed since the cache's copy: the retry decides again on the fresher one).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache could not be read.
    #[error("cannot read the cache")]
    Cache(#[source] CacheError),
    /// The node's Lease could not be read live.
    #[error("cannot read the lease of node {node}")]
    Lease {
        /// The node.
        node: String,
        /// Why.
        source: kube::Error,
    },
    /// Marking the node Unknown failed.
    #[error("cannot update the status of node {node}")]
    Status {
        /// The node.
        node: String,
        /// Why.
        source: kube::Error,
    },
    /// Writing the node's taints failed.
    #[error("cannot update the taints of node {node}")]
    Taints {
        /// The node.
        node: String,
        /// Why.
        source: kube::Error,
    },
    /// Marking a pod not ready failed.
    #[error("cannot mark pod {pod} not ready")]
    Pod {
        /// `namespace/name`.
        pod: String,
        /// Why.
        source: kube::Error,
    },
}

/// What the controller keeps on this worker between looks; every mutex is held for a decision only,
/// never across an await.
#[derive(Debug)]
pub struct NodeLifecycle {
    config: Config,
    observations: Mutex<Observations>,
    limiter: Mutex<ZoneLimiter>,
    /// The last zone view listed from the cache, with when it was taken.
    view: Mutex<Option<(Instant, Arc<ZoneView>)>>,
}

impl NodeLifecycle {
    /// A controller state with `config`.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            observations: Mutex::new(Observations::default()),
            limiter: Mutex::new(ZoneLimiter::default()),
            view: Mutex::new(None),
        }
    }

    /// A zone view taken no earlier than `not_before`: the cached one, or a fresh list of the cache.
    /// Sharing one keeps a worker's many held-back nodes at one list per `--node-monitor-period`.
    async fn view(&self, ctx: &Context, not_before: Instant) -> Result<Arc<ZoneView>, Error> {
        if let Some((taken, view)) = &*self.view.lock()
            && *taken >= not_before
        {
            return Ok(Arc::clone(view));
        }
        let taken = Instant::now();
        let nodes: Vec<Node> = ctx
            .cache()
            .list(&CacheQuery::all())
            .await
            .map_err(Error::Cache)?;
        let view = Arc::new(ZoneView::of(&nodes));
        *self.view.lock() = Some((taken, Arc::clone(&view)));
        Ok(view)
    }
}

/// Looks at one node.
///
/// # Errors
/// [`Error`] when the cache, the Lease or a write fails.
pub async fn reconcile(
    request: Request<Node>,
    ctx: Context,
    nl: Arc<NodeLifecycle>,
) -> Result<Action, Error> {
    let name = request.name().to_owned();
    let Some(cached) = request.object() else {
        if let Some(uid) = nl.observations.lock().forget(&name) {
            let message = format!("Node {name} event: Removing Node {name} from Controller");
            node_event(&ctx, &name, uid, "RemovingNode", message);
        }
        return Ok(Action::await_change());
    };
    let config = nl.config;
    let mut node: Node = (**cached).clone();
    let (now_i, now) = (Instant::now(), Timestamp::now());

    let lease = lease_of(&ctx, &name).await?;
    let signals = signals_of(&node, lease.as_ref());
    let grace = if signals.has_ready {
        config.node_monitor_grace_period
    } else {
        config.node_startup_grace_period
    };
    let (mut health, first) = nl.observations.lock().observe(&name, signals, grace, now_i);
    if first {
        let message = format!("Node {name} event: Registered Node {name} in Controller");
        node_event(
            &ctx,
            &name,
            node.metadata.uid.clone(),
            "RegisteredNode",
            message,
        );
        nl.observations
            .lock()
            .prune(now_i, grace * FORGET_AFTER_GRACE_PERIODS);
    }

    let mut flipped = false;
    if health == Health::Stale {
        // The cache may be behind (a stalled watch, a new leader still listing): only a Lease read
        // live may confirm that the node went quiet.
        let live = live_lease(&ctx, &name).await?;
        let renewed = live.as_ref().and_then(renew_time);
        if renewed.is_some() && renewed != lease.as_ref().and_then(renew_time) {
            nl.observations.lock().renewed(&name, renewed, now_i);
            health = Health::Fresh { left: grace };
        } else if let Some(conditions) = unknown_conditions(&node, now) {
            let was_ready = ready_status(&node) == Some("True");
            tracing::info!(node = %name, "node stopped posting its status: marking it Unknown");
            node = Api::<Node>::all(ctx.client())
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(status_patch(&node, &conditions)),
                )
                .await
                .map_err(|source| Error::Status {
                    node: name.clone(),
                    source,
                })?;
            flipped = was_ready;
        }
    }
    let mut requeue = match health {
        Health::Fresh { left } => Some(left),
        Health::Stale => None,
    };

    if let Some(next) = plan(&node, now) {
        node = write_taints(&ctx, &node, &next).await?;
    }
    if flipped {
        let message = format!("Node {name} status is now: NodeNotReady");
        node_event(
            &ctx,
            &name,
            node.metadata.uid.clone(),
            "NodeNotReady",
            message,
        );
    }
    if marked_unknown(&node) {
        mark_pods_not_ready(&ctx, &name, now).await?;
    }

    match no_execute_key(ready_status(&node)) {
        None => nl.observations.lock().ready(&name),
        Some(key) if has_no_execute(&node, key) => {}
        Some(key) => {
            let since = nl.observations.lock().not_ready_since(&name, now_i);
            let due = since + config.node_monitor_period;
            let wait = if now_i < due {
                Some(due - now_i)
            } else {
                taint_no_execute(&ctx, &nl, &node, key, due, now_i, now).await?
            };
            requeue = earliest(requeue, wait);
        }
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Decides, at its zone's rate, whether the not-ready `node` gets its NoExecute taint `key` now; in
/// master disruption mode removes every lifecycle NoExecute taint instead. Returns when to look
/// again.
async fn taint_no_execute(
    ctx: &Context,
    nl: &NodeLifecycle,
    node: &Node,
    key: &str,
    due: Instant,
    now_i: Instant,
    now: Timestamp,
) -> Result<Option<Duration>, Error> {
    let config = nl.config;
    let period = config.node_monitor_period;
    // A view taken after the node's wait ended sees every node that went dark with it.
    let not_before = due.max(now_i.checked_sub(period).unwrap_or(now_i));
    let mut view = (*nl.view(ctx, not_before).await?).clone();
    view.update(node);
    if view.all_fully_disrupted(config.unhealthy_zone_threshold) {
        tracing::info!(
            "every zone is fully disrupted: no NoExecute taints (master disruption mode)"
        );
        for tainted in view.tainted() {
            let name = tainted.metadata.name.clone().unwrap_or_default();
            if let Err(err) = write_taints(ctx, tainted, &without_no_execute(tainted)).await {
                tracing::warn!(node = %name, error = %err, "cannot remove a NoExecute taint");
            }
        }
        return Ok(Some(period));
    }
    let zone = zone_key(node);
    let health = view.zone(&zone);
    let state = zone_state(
        health.ready,
        health.not_ready,
        config.unhealthy_zone_threshold,
    );
    let rate = zone_rate(state, health.size(), &config);
    let decision = nl
        .limiter
        .lock()
        .try_reserve(&zone, rate, health.newest_taint, now);
    match decision {
        Decision::Taint => {
            tracing::info!(node = ?node.metadata.name, ?state, taint = key, "tainting node NoExecute");
            write_taints(ctx, node, &with_no_execute(node, key, now)).await?;
            Ok(None)
        }
        Decision::Wait(left) => Ok(Some(left)),
        Decision::Never => Ok(Some(period)),
    }
}

/// Sets the node's taints, conditional on the resourceVersion they were decided on.
async fn write_taints(
    ctx: &Context,
    node: &Node,
    taints: &[flotilla_sdk::k8s_openapi::api::core::v1::Taint],
) -> Result<Node, Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    Api::<Node>::all(ctx.client())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(taints_patch(node, taints)),
        )
        .await
        .map_err(|source| Error::Taints { node: name, source })
}

/// Marks the ready pods on node `name` not ready, recording upstream's Warning on each one written.
async fn mark_pods_not_ready(ctx: &Context, name: &str, now: Timestamp) -> Result<(), Error> {
    let pods: Vec<Pod> = ctx
        .cache()
        .list(&CacheQuery::all().index("node-name", name))
        .await
        .map_err(Error::Cache)?;
    let mut failed = None;
    for pod in &pods {
        let Some(patch) = not_ready_patch(pod, name, now) else {
            continue;
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let result = Api::<Pod>::namespaced(ctx.client(), ns)
            .patch_status(pod_name, &PatchParams::default(), &Patch::Strategic(patch))
            .await;
        match result {
            Ok(_) => {
                ctx.recorder()
                    .event(pod, EventType::Warning, "NodeNotReady", "Node is not ready")
            }
            // Gone already: nothing left to do for it.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                tracing::warn!(pod = %format!("{ns}/{pod_name}"), error = %source, "cannot mark pod not ready");
                failed.get_or_insert(Error::Pod {
                    pod: format!("{ns}/{pod_name}"),
                    source,
                });
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

/// The node's Lease from the cache, or read live when the cache has none (a fleet scoped to some
/// namespaces does not watch `kube-node-lease`; a new Lease may not have arrived yet).
async fn lease_of(ctx: &Context, name: &str) -> Result<Option<Lease>, Error> {
    let cached = ctx
        .cache()
        .get::<Lease>(Some(LEASE_NAMESPACE), name)
        .await
        .map_err(Error::Cache)?;
    match cached {
        Some(lease) => Ok(Some(lease)),
        None => live_lease(ctx, name).await,
    }
}

/// The node's Lease read from the API.
async fn live_lease(ctx: &Context, name: &str) -> Result<Option<Lease>, Error> {
    Api::<Lease>::namespaced(ctx.client(), LEASE_NAMESPACE)
        .get_opt(name)
        .await
        .map_err(|source| Error::Lease {
            node: name.to_owned(),
            source,
        })
}

fn renew_time(lease: &Lease) -> Option<Timestamp> {
    lease.spec.as_ref()?.renew_time.as_ref().map(|t| t.0)
}

fn signals_of(node: &Node, lease: Option<&Lease>) -> Signals {
    let ready = condition(node, "Ready");
    Signals {
        uid: node.metadata.uid.clone(),
        has_ready: ready.is_some(),
        heartbeat: ready.and_then(|c| c.last_heartbeat_time.as_ref().map(|t| t.0)),
        lease_renewed: lease.and_then(renew_time),
    }
}

/// Records a Normal Event about node `name` as upstream's `RecordNodeEvent` does: a reference of
/// kind, name and uid only.
fn node_event(ctx: &Context, name: &str, uid: Option<String>, reason: &str, message: String) {
    let regarding = ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Node".to_owned()),
        name: Some(name.to_owned()),
        uid,
        ..ObjectReference::default()
    };
    ctx.recorder()
        .event_on_reference(&regarding, EventType::Normal, reason, message);
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
