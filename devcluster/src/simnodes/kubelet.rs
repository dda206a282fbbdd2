//! The pod side of the simulator: one watch on all pods, binding pending ones (standing in for the
//! scheduler) and moving bound ones through their phases (standing in for each node's kubelet). A
//! second watch, on PersistentVolumeClaims, keeps pods whose claims do not exist unbound, as the
//! scheduler would, and binds them when their claims appear.
//!
//! One task decides; a second runs the resulting API calls with bounded concurrency; delays are a
//! single deadline queue, so thousands of pods cost entries in a heap, not sleeping tasks.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::claims::{self, ClaimKey, Claims, Wait};
use super::nodes::{patch_params, time_now};
use super::placement::{Candidate, Placement, wants_binding};
use super::pod_status::{self, Outcome};
use super::simulator::Shared;
use super::timers::Timers;

/// How long a failed API call waits before the pod is looked at again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Messages from the simulator's handle to the pod task.
#[derive(Debug)]
pub(crate) enum Control {
    /// A stopped node resumed: its pods (and unplaceable pending pods) are looked at again.
    NodeStarted,
}

/// What has been set in motion for a pod, so repeated watch events do not repeat it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// `PodScheduled=False` is being reported (a claim is missing).
    UnschedulableRequested,
    BindRequested,
    StartScheduled,
    StartRequested,
    CompleteScheduled,
    CompleteRequested,
    DeleteRequested,
}

#[derive(Debug)]
enum Timer {
    Start(String),
    Complete(String),
    Retry(String),
}

#[derive(Debug)]
enum Action {
    Bind {
        namespace: String,
        name: String,
        uid: String,
        node: String,
    },
    Status {
        namespace: String,
        name: String,
        uid: String,
        patch: Value,
    },
    Delete {
        namespace: String,
        name: String,
        uid: String,
    },
    /// Reads the Node again for its pod range, which pod `uid` waits for.
    ReadNode { node: String, uid: String },
}

impl Action {
    fn uid(&self) -> &str {
        match self {
            Action::Bind { uid, .. }
            | Action::Status { uid, .. }
            | Action::Delete { uid, .. }
            | Action::ReadNode { uid, .. } => uid,
        }
    }
}

/// Runs the pod side until `cancel` fires.
pub(crate) async fn run(
    shared: Arc<Shared>,
    client: kube::Client,
    control: mpsc::UnboundedReceiver<Control>,
    cancel: CancellationToken,
) {
    let (actions_tx, actions_rx) = mpsc::channel(4096);
    let (failed_tx, failed_rx) = mpsc::unbounded_channel();
    let limit = shared.config.max_concurrent_requests;
    let executor = execute(
        client.clone(),
        shared.clone(),
        actions_rx,
        failed_tx,
        limit,
        cancel.clone(),
    );
    let driver = Driver {
        shared,
        pods: HashMap::new(),
        marks: HashMap::new(),
        relisted: None,
        claims: Claims::default(),
        timers: Timers::new(),
        placement: Placement::default(),
        range_reads: HashMap::new(),
        actions: actions_tx,
    }
    .drive(client, control, failed_rx, cancel);
    tokio::join!(executor, driver);
}

struct Driver {
    shared: Arc<Shared>,
    /// Last seen state of every pod, by uid.
    pods: HashMap<String, Pod>,
    marks: HashMap<String, Mark>,
    /// uids seen since the watcher restarted its list, to drop pods deleted while it was away.
    relisted: Option<HashSet<String>>,
    /// The claims known to exist, gating the binding of pods that mount them.
    claims: Claims,
    timers: Timers<Timer>,
    placement: Placement,
    /// When each node was last read for the pod range its pods wait for (at most one read per node
    /// every [`RETRY_AFTER`]).
    range_reads: HashMap<String, Instant>,
    actions: mpsc::Sender<Action>,
}

impl Driver {
    async fn drive(
        mut self,
        client: kube::Client,
        mut control: mpsc::UnboundedReceiver<Control>,
        mut failed: mpsc::UnboundedReceiver<String>,
        cancel: CancellationToken,
    ) {
        let claims_api: Api<PersistentVolumeClaim> = Api::all(client.clone());
        let mut claim_events = watcher::watcher(claims_api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let api: Api<Pod> = Api::all(client);
        let mut events = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        loop {
            let deadline = self.timers.next_deadline();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                Some(Control::NodeStarted) = control.recv() => self.reconcile_all().await,
                Some(uid) = failed.recv() => {
                    self.marks.remove(&uid);
                    self.timers.push(Instant::now() + RETRY_AFTER, Timer::Retry(uid));
                }
                _ = sleep_until(deadline), if deadline.is_some() => {
                    for timer in self.timers.pop_due(Instant::now()) {
                        self.fire(timer).await;
                    }
                }
                event = events.try_next() => match event {
                    Ok(Some(event)) => self.observe(event).await,
                    Ok(None) => return,
                    Err(err) => tracing::warn!(error = %err, "pod watch failed; retrying with backoff"),
                },
                event = claim_events.try_next() => match event {
                    Ok(Some(event)) => self.observe_claim(event).await,
                    Ok(None) => return,
                    Err(err) => tracing::warn!(error = %err, "claim watch failed; retrying with backoff"),
                },
            }
        }
    }

    async fn observe(&mut self, event: Event<Pod>) {
        match event {
            Event::Init => self.relisted = Some(HashSet::new()),
            Event::InitApply(pod) => {
                if let (Some(seen), Some(uid)) = (self.relisted.as_mut(), pod.metadata.uid.clone())
                {
                    seen.insert(uid);
                }
                self.apply(pod).await;
            }
            Event::InitDone => {
                if let Some(seen) = self.relisted.take() {
                    self.pods.retain(|uid, _| seen.contains(uid));
                    self.marks.retain(|uid, _| seen.contains(uid));
                }
            }
            Event::Apply(pod) => self.apply(pod).await,
            Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    self.pods.remove(uid);
                    self.marks.remove(uid);
                }
            }
        }
    }

    /// Records a claim event and looks again at the unbound pods that waited for what changed.
    async fn observe_claim(&mut self, event: Event<PersistentVolumeClaim>) {
        let changed = self.claims.observe(event);
        let waiting = |pod: &Pod| {
            pod.spec
                .as_ref()
                .is_some_and(|s| s.node_name.as_deref().is_none_or(str::is_empty))
                && !claims::claim_names(pod).is_empty()
        };
        let affected = |pod: &Pod, changed: &Option<Vec<ClaimKey>>| match changed {
            None => true,
            Some(keys) => keys.iter().any(|key| claims::mounts(pod, key)),
        };
        let uids: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, pod)| waiting(pod) && affected(pod, &changed))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            self.reconcile(&uid).await;
        }
    }

    async fn apply(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        self.pods.insert(uid.clone(), pod);
        self.reconcile(&uid).await;
    }

    async fn reconcile_all(&mut self) {
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in uids {
            self.reconcile(&uid).await;
        }
    }

    /// Decides the next step for one pod from its last seen state and what is already in motion.
    async fn reconcile(&mut self, uid: &str) {
        let Some(pod) = self.pods.get(uid) else {
            return;
        };
        let mark = self.marks.get(uid).copied();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty());
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let (namespace, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );

        if pod.metadata.deletion_timestamp.is_some() {
            if node.is_some_and(|n| self.shared.is_up(n)) && mark != Some(Mark::DeleteRequested) {
                self.marks.insert(uid.to_string(), Mark::DeleteRequested);
                let uid = uid.to_string();
                self.send(Action::Delete {
                    namespace,
                    name,
                    uid,
                })
                .await;
            }
            return;
        }
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return;
        }
        let Some(node) = node else {
            if wants_binding(pod) && mark != Some(Mark::BindRequested) {
                match self.claims.wait(pod) {
                    None => {}
                    Some(Wait::Unsynced) => return,
                    Some(Wait::Unschedulable(reason)) => {
                        let message =
                            claims::unschedulable_message(&reason, self.shared.nodes.len());
                        let patch = claims::unschedulable_patch(pod, &message, &time_now());
                        // A report in flight is not repeated; once one has landed, a changed
                        // reason is reported again.
                        let in_flight = mark == Some(Mark::UnschedulableRequested)
                            && !claims::reported_unschedulable(pod);
                        if let Some(patch) = patch
                            && !in_flight
                        {
                            let action = status_action(pod, uid, patch);
                            self.marks
                                .insert(uid.to_string(), Mark::UnschedulableRequested);
                            self.send(action).await;
                        }
                        return;
                    }
                }
                let candidates: Vec<Candidate<'_>> = self
                    .shared
                    .nodes
                    .iter()
                    .map(|n| Candidate {
                        name: &n.name,
                        labels: &n.labels,
                        up: self.shared.is_up(&n.name),
                    })
                    .collect();
                if let Some(chosen) = self.placement.choose(pod, &candidates) {
                    let node = chosen.to_string();
                    self.marks.insert(uid.to_string(), Mark::BindRequested);
                    let uid = uid.to_string();
                    self.send(Action::Bind {
                        namespace,
                        name,
                        uid,
                        node,
                    })
                    .await;
                }
            }
            return;
        };
        if !self.shared.is_up(node) {
            return;
        }
        if phase == Some("Running") {
            if pod_status::runs_to_completion(pod)
                && !matches!(
                    mark,
                    Some(Mark::CompleteScheduled | Mark::CompleteRequested)
                )
            {
                self.marks.insert(uid.to_string(), Mark::CompleteScheduled);
                let at = Instant::now() + self.shared.config.job_pod_duration;
                self.timers.push(at, Timer::Complete(uid.to_string()));
            }
        } else if !matches!(mark, Some(Mark::StartScheduled | Mark::StartRequested)) {
            self.marks.insert(uid.to_string(), Mark::StartScheduled);
            let at = Instant::now() + self.shared.config.pod_ready_delay;
            self.timers.push(at, Timer::Start(uid.to_string()));
        }
    }

    async fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::Retry(uid) => self.reconcile(&uid).await,
            Timer::Start(uid) => {
                // Only the start planned last: a second timer (one pushed while the pod waited for
                // its node's pod range, then retried) does not repeat a start requested since.
                if self.marks.get(&uid) != Some(&Mark::StartScheduled) {
                    return;
                }
                let Some(pod) = self.pods.get(&uid) else {
                    return;
                };
                let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                let node = node.and_then(|n| self.shared.node(n));
                let startable = pod.metadata.deletion_timestamp.is_none()
                    && !matches!(phase, Some("Running" | "Succeeded" | "Failed"));
                match node {
                    Some(node) if startable && self.shared.is_up(&node.name) => {
                        let Some(pod_ip) =
                            node.allocate_pod_ip(self.shared.config.assign_pod_cidrs)
                        else {
                            // No pod range yet: the pod stays Pending; the Node is read again and
                            // the pod looked at after a while.
                            let name = node.name.clone();
                            let now = Instant::now();
                            self.marks.insert(uid.clone(), Mark::StartScheduled);
                            self.timers
                                .push(now + RETRY_AFTER, Timer::Start(uid.clone()));
                            let read_lately = self
                                .range_reads
                                .get(&name)
                                .is_some_and(|at| now.duration_since(*at) < RETRY_AFTER);
                            if !read_lately {
                                self.range_reads.insert(name.clone(), now);
                                self.send(Action::ReadNode { node: name, uid }).await;
                            }
                            return;
                        };
                        let patch = pod_status::started(pod, pod_ip, node.host_ip(), &time_now());
                        match pod_status::outcome(pod) {
                            Outcome::Fail => {
                                tracing::debug!(pod = ?pod.metadata.name, "image ends in :fail; reporting the pod Failed")
                            }
                            Outcome::CrashLoop => {
                                tracing::debug!(pod = ?pod.metadata.name, "image ends in :fail; reporting the pod crash-looping")
                            }
                            Outcome::Run => {}
                        }
                        let action = status_action(pod, &uid, patch);
                        self.marks.insert(uid, Mark::StartRequested);
                        self.send(action).await;
                    }
                    // Stopped node or changed pod: forget the plan; the next event or NodeStarted decides again.
                    _ => {
                        self.marks.remove(&uid);
                    }
                }
            }
            Timer::Complete(uid) => {
                let Some(pod) = self.pods.get(&uid) else {
                    return;
                };
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if phase == Some("Running")
                    && pod.metadata.deletion_timestamp.is_none()
                    && node.is_some_and(|n| self.shared.is_up(n))
                {
                    let action = status_action(pod, &uid, pod_status::succeeded(pod, &time_now()));
                    self.marks.insert(uid, Mark::CompleteRequested);
                    self.send(action).await;
                } else {
                    self.marks.remove(&uid);
                }
            }
        }
    }

    async fn send(&mut self, action: Action) {
        // Fails only once the executor stopped, i.e. during shutdown.
        let _ = self.actions.send(action).await;
    }
}

fn status_action(pod: &Pod, uid: &str, patch: Value) -> Action {
    Action::Status {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: uid.to_string(),
        patch,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(deadline).await;
    }
}

/// Runs actions, at most `limit` at a time; reports the uid of each that failed in a way worth retrying.
async fn execute(
    client: kube::Client,
    shared: Arc<Shared>,
    actions: mpsc::Receiver<Action>,
    failed: mpsc::UnboundedSender<String>,
    limit: usize,
    cancel: CancellationToken,
) {
    let work = tokio_stream::wrappers::ReceiverStream::new(actions).for_each_concurrent(limit, |action| {
        let client = client.clone();
        let failed = failed.clone();
        let shared = shared.clone();
        async move {
            let uid = action.uid().to_string();
            if let Err(err) = perform(&client, &shared, action).await {
                tracing::debug!(error = %err, %uid, "simulated kubelet call failed; will retry");
                let _ = failed.send(uid);
            }
        }
    });
    tokio::select! {
        biased;
        _ = cancel.cancelled() => {}
        _ = work => {}
    }
}

async fn perform(
    client: &kube::Client,
    shared: &Shared,
    action: Action,
) -> Result<(), kube::Error> {
    let outcome = match action {
        Action::Bind {
            namespace,
            name,
            uid,
            node,
        } => {
            let body = json!({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            });
            let url = format!("/api/v1/namespaces/{namespace}/pods/{name}/binding");
            let request = http::Request::post(url)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(&body).unwrap_or_default())
                .map_err(kube::Error::HttpError)?;
            client.request_text(request).await.map(drop)
        }
        Action::Status {
            namespace,
            name,
            patch,
            ..
        } => {
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            api.patch_status(&name, &patch_params(), &Patch::Merge(&patch))
                .await
                .map(drop)
        }
        Action::Delete {
            namespace,
            name,
            uid,
        } => {
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            api.delete(&name, &params).await.map(drop)
        }
        Action::ReadNode { node, .. } => {
            let api: Api<Node> = Api::all(client.clone());
            api.get(&node).await.map(|read| {
                if let Some(sim) = shared.node(&node) {
                    sim.learn_pod_range(&read);
                }
            })
        }
    };
    match outcome {
        // Gone, or already bound/changed by someone else: the watch brings the new state.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        other => other,
    }
}
