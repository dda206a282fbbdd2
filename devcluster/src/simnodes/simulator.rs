//! `NodeSimulator`: registers the simulated nodes, runs their heartbeats and the pod task, and lets
//! callers stop and restart individual nodes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::kubelet::{self, Control};
use super::node_conditions::{ConditionsChange, NodeConditions};
use super::nodes::{self, SimNode};
use super::{SimConfig, SimError};

/// State shared by the handle, the heartbeat task and the pod task.
pub(crate) struct Shared {
    pub(crate) config: SimConfig,
    pub(crate) nodes: Vec<SimNode>,
    by_name: HashMap<String, usize>,
    /// Nodes whose "kubelet" is down: no heartbeats, no pod updates.
    stopped: Mutex<HashSet<String>>,
    control: mpsc::UnboundedSender<Control>,
    heartbeat_now: Notify,
}

impl Shared {
    pub(crate) fn node(&self, name: &str) -> Option<&SimNode> {
        self.by_name.get(name).map(|&i| &self.nodes[i])
    }

    /// Whether `name` is a simulated node that is currently running.
    pub(crate) fn is_up(&self, name: &str) -> bool {
        self.by_name.contains_key(name) && !self.stopped.lock().contains(name)
    }
}

/// A cheap, cloneable handle to stop and start simulated nodes (used by the HTTP control routes).
#[derive(Clone)]
pub struct SimNodesHandle {
    shared: Arc<Shared>,
}

impl SimNodesHandle {
    /// The names of the simulated nodes, in index order.
    pub fn node_names(&self) -> Vec<String> {
        self.shared.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// Stops the node's "kubelet": its Lease and Ready condition are no longer renewed and its pods
    /// no longer change. The node is not marked NotReady here — noticing the stale heartbeat is the
    /// node-lifecycle controller's job. Stopping a stopped node is a no-op.
    ///
    /// # Errors
    /// [`SimError::UnknownNode`] when `name` is not a simulated node.
    pub fn stop_node(&self, name: &str) -> Result<(), SimError> {
        if self.shared.node(name).is_none() {
            return Err(SimError::UnknownNode(name.to_string()));
        }
        self.shared.stopped.lock().insert(name.to_string());
        tracing::info!(node = name, "simulated node stopped heartbeating");
        Ok(())
    }

    /// Resumes a stopped node: it heartbeats at once and its pods progress again.
    ///
    /// # Errors
    /// [`SimError::UnknownNode`] when `name` is not a simulated node.
    pub fn start_node(&self, name: &str) -> Result<(), SimError> {
        if self.shared.node(name).is_none() {
            return Err(SimError::UnknownNode(name.to_string()));
        }
        let was_stopped = self.shared.stopped.lock().remove(name);
        if was_stopped {
            tracing::info!(node = name, "simulated node resumed heartbeating");
            self.shared.heartbeat_now.notify_one();
            let _ = self.shared.control.send(Control::NodeStarted);
        }
        Ok(())
    }

    /// Whether `name` is a simulated node that currently heartbeats.
    pub fn is_running(&self, name: &str) -> bool {
        self.shared.is_up(name)
    }

    /// Changes what the node reports besides Ready (pressures, `NetworkUnavailable`) and reports it
    /// at once (a stopped node only once it starts again); returns the conditions now reported.
    ///
    /// # Errors
    /// [`SimError::UnknownNode`] when `name` is not a simulated node.
    pub fn set_conditions(
        &self,
        name: &str,
        change: ConditionsChange,
    ) -> Result<NodeConditions, SimError> {
        let node = self
            .shared
            .node(name)
            .ok_or_else(|| SimError::UnknownNode(name.to_string()))?;
        let conditions = node.change_conditions(change);
        tracing::info!(
            node = name,
            ?conditions,
            "simulated node conditions changed"
        );
        self.shared.heartbeat_now.notify_one();
        Ok(conditions)
    }
}

/// A kwok-like node simulator that acts only through the public Kubernetes API, so it runs against
/// devcluster and any real cluster alike.
///
/// It registers `sim-node-0..N-1` (Ready, with capacity, the not-ready taint removed), renews their
/// Leases in `kube-node-lease` and their Ready condition, binds pending default-scheduler pods
/// (respecting `spec.nodeName` and `spec.nodeSelector`, round-robin otherwise; a pod whose
/// PersistentVolumeClaim does not exist stays unbound with `PodScheduled=False` / `Unschedulable`
/// until the claim is created — claims are never bound to volumes), reports bound pods
/// Running and Ready after [`SimConfig::pod_ready_delay`] (when an image ends in `:fail`: Failed for
/// restartPolicy Never, otherwise Running but not Ready in `CrashLoopBackOff`; Succeeded after
/// [`SimConfig::job_pod_duration`] for restartPolicy Never/OnFailure), and finishes
/// graceful pod deletions with a grace-0 delete as a kubelet would.
///
/// Dropping it stops its tasks; [`NodeSimulator::shutdown`] also waits for them. The nodes stay
/// registered (a real node does not deregister either).
pub struct NodeSimulator {
    handle: SimNodesHandle,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl NodeSimulator {
    /// Registers the nodes and starts the heartbeat and pod tasks.
    ///
    /// # Errors
    /// [`SimError::InvalidConfig`] for a bad config; [`SimError::Api`] when the lease namespace or a
    /// node cannot be created or reported Ready.
    pub async fn start(client: kube::Client, config: SimConfig) -> Result<Self, SimError> {
        config.validate()?;
        let nodes: Vec<SimNode> = (0..config.nodes)
            .map(|i| SimNode::new(&config.name_prefix, i as u32))
            .collect();
        let by_name = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            config,
            nodes,
            by_name,
            stopped: Mutex::new(HashSet::new()),
            control: control_tx,
            heartbeat_now: Notify::new(),
        });
        nodes::ensure_lease_namespace(&client).await?;
        let limit = shared.config.max_concurrent_requests;
        let registered: Vec<Result<(), SimError>> = futures::stream::iter(shared.nodes.iter())
            .map(|node| nodes::register(&client, &shared.config, node))
            .buffer_unordered(limit)
            .collect()
            .await;
        registered.into_iter().collect::<Result<Vec<()>, _>>()?;
        heartbeat_round(&client, &shared, Beat::Lease).await;

        let cancel = CancellationToken::new();
        let heartbeats = tokio::spawn(
            heartbeat(client.clone(), shared.clone(), cancel.clone())
                .instrument(tracing::info_span!("simnodes_heartbeat")),
        );
        let pods = tokio::spawn(
            kubelet::run(shared.clone(), client, control_rx, cancel.clone())
                .instrument(tracing::info_span!("simnodes_pods")),
        );
        Ok(NodeSimulator {
            handle: SimNodesHandle { shared },
            cancel,
            tasks: vec![heartbeats, pods],
        })
    }

    /// A handle for stopping and starting nodes from elsewhere (e.g. HTTP routes).
    pub fn handle(&self) -> SimNodesHandle {
        self.handle.clone()
    }

    /// The names of the simulated nodes, in index order.
    pub fn node_names(&self) -> Vec<String> {
        self.handle.node_names()
    }

    /// See [`SimNodesHandle::stop_node`].
    ///
    /// # Errors
    /// [`SimError::UnknownNode`] when `name` is not a simulated node.
    pub fn stop_node(&self, name: &str) -> Result<(), SimError> {
        self.handle.stop_node(name)
    }

    /// See [`SimNodesHandle::start_node`].
    ///
    /// # Errors
    /// [`SimError::UnknownNode`] when `name` is not a simulated node.
    pub fn start_node(&self, name: &str) -> Result<(), SimError> {
        self.handle.start_node(name)
    }

    /// Stops the tasks and waits for them to finish. In-flight API calls are abandoned.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for NodeSimulator {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

#[derive(Clone, Copy)]
enum Beat {
    Lease,
    Status,
    Both,
}

async fn heartbeat(client: kube::Client, shared: Arc<Shared>, cancel: CancellationToken) {
    let mut leases = tokio::time::interval(shared.config.lease_renew_interval);
    let mut statuses = tokio::time::interval(shared.config.status_interval);
    leases.set_missed_tick_behavior(MissedTickBehavior::Delay);
    statuses.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Registration just did both; the first ticks of an interval fire at once.
    leases.tick().await;
    statuses.tick().await;
    loop {
        let beat = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = shared.heartbeat_now.notified() => Beat::Both,
            _ = leases.tick() => Beat::Lease,
            _ = statuses.tick() => Beat::Status,
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            _ = heartbeat_round(&client, &shared, beat) => {}
        }
    }
}

async fn heartbeat_round(client: &kube::Client, shared: &Shared, beat: Beat) {
    let up: Vec<&SimNode> = shared
        .nodes
        .iter()
        .filter(|n| shared.is_up(&n.name))
        .collect();
    futures::stream::iter(up)
        .for_each_concurrent(shared.config.max_concurrent_requests, |node| async move {
            if matches!(beat, Beat::Lease | Beat::Both)
                && let Err(err) = nodes::renew_lease(client, &shared.config, &node.name).await
            {
                tracing::warn!(node = %node.name, error = %err, "lease heartbeat failed");
            }
            if matches!(beat, Beat::Status | Beat::Both)
                && let Err(err) = nodes::report_status(client, &shared.config, node).await
            {
                tracing::warn!(node = %node.name, error = %err, "status heartbeat failed");
            }
        })
        .await;
}
