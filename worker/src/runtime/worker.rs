//! A running worker as a handle: start it in-process (the `flotilla worker` command, custom controller
//! binaries, tests and benchmarks all do), ask it to shut down gracefully, or stop it at once.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use flotilla_common::{Health, OpsServer, OpsServerError};
use flotilla_sdk::DynController;
use flotilla_sdk::host::{CacheSlot, ControllerEnv, KubeClients};
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span};

use super::config::{ConfigError, WorkerConfig};
use super::engine::{self, ControllerSlot, Shared, Stops};
use super::kube_stack::{KubeStack, KubeStackError};
use super::metrics::Metrics;
use super::rate_limit::TokenBucket;
use super::recording::KindTable;
use super::write_intents::WriteIntents;

/// Errors of starting a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The controller set is unusable.
    #[error("invalid controllers: {0}")]
    Controllers(String),
    /// etcd refused the client (certificate, password, role) or cannot be reached; the message
    /// names the flag to look at.
    #[error(transparent)]
    Etcd(#[from] flotilla_common::EtcdConnectError),
    /// The Kubernetes client stack cannot be built.
    #[error(transparent)]
    Kube(#[from] KubeStackError),
    /// The ops endpoints cannot be served.
    #[error(transparent)]
    Ops(#[from] OpsServerError),
}

/// A running worker. Dropping it stops it at once, like [`Worker::abort`].
pub struct Worker {
    worker_id: String,
    health: Health,
    metrics_addr: Option<SocketAddr>,
    stops: Stops,
    ops_stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Worker {
    /// Validates `config` and `controllers`, connects to etcd, serves the ops endpoints and starts
    /// the worker's loop (session, registration, leader following, reconciles) in the background.
    ///
    /// # Errors
    /// [`WorkerError`] when the configuration or controllers are invalid, etcd is unreachable, the
    /// Kubernetes client cannot be built or the metrics address cannot be bound. Later failures
    /// (etcd or the leader going away) are retried, never returned.
    pub async fn start(
        config: WorkerConfig,
        controllers: Vec<DynController>,
    ) -> Result<Self, WorkerError> {
        config.validate()?;
        check_controllers(&controllers)?;
        let etcd = config.etcd.connect(&config.fleet).await?;
        let kinds = KindTable::new(
            controllers
                .iter()
                .flat_map(|c| c.spec().kinds().cloned().collect::<Vec<_>>()),
        );
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        flotilla_common::register_process_metrics(&mut registry);
        flotilla_common::register_session_metrics(&mut registry);
        flotilla_common::tls::register_tls_metrics(&mut registry);
        let events = TokenBucket::new(config.kube_api_qps, config.kube_api_burst)
            .observed(metrics.rate_limiter_wait("events"));
        let intents = WriteIntents::new(metrics.write_intents_dropped());
        let kube = KubeStack::new(
            &config.kube,
            kinds,
            metrics.api_requests(),
            Arc::new(events),
            intents.clone(),
        )?;
        let worker_id: Arc<str> = Arc::from(config.worker_id.as_str());
        let cache = CacheSlot::default();
        let controllers = controllers
            .into_iter()
            .map(|controller| {
                let name = controller.name().to_owned();
                // Each controller its own budget, as each of kube-controller-manager's has its own client.
                let bucket = TokenBucket::new(config.kube_api_qps, config.kube_api_burst)
                    .observed(metrics.rate_limiter_wait(&name));
                let clients: Arc<dyn KubeClients> =
                    Arc::new(kube.for_controller(controller.event_source(), Arc::new(bucket)));
                let env = Arc::new(ControllerEnv::new(
                    &worker_id,
                    &name,
                    controller.event_source(),
                    clients,
                    cache.clone(),
                ));
                let slot = ControllerSlot {
                    metrics: metrics.controller(&name),
                    controller,
                    env,
                };
                (name, slot)
            })
            .collect::<HashMap<_, _>>();
        let health = Health::new();
        let ops_stop = CancellationToken::new();
        let metrics_addr = match config.metrics_listen {
            Some(addr) => {
                let registry = Arc::new(Mutex::new(registry));
                Some(
                    OpsServer::start(addr, registry, health.clone(), ops_stop.clone())
                        .await?
                        .addr(),
                )
            }
            None => None,
        };
        if let Some(addr) = metrics_addr {
            tracing::info!(worker = %worker_id, metrics = %addr, "worker started");
        }
        let shared = Arc::new(Shared {
            keys: config.etcd.fleet_keys(&config.fleet),
            worker_id: worker_id.clone(),
            controllers,
            metrics,
            health: health.clone(),
            cache,
            intents,
            config,
        });
        let stops = Stops {
            graceful: CancellationToken::new(),
            kill: CancellationToken::new(),
        };
        let task = tokio::spawn(
            engine::run(shared, etcd, stops.clone())
                .instrument(info_span!("worker", worker = %worker_id)),
        );
        Ok(Self {
            worker_id: worker_id.to_string(),
            health,
            metrics_addr,
            stops,
            ops_stop,
            task: Some(task),
        })
    }

    /// The worker's id.
    pub fn id(&self) -> &str {
        &self.worker_id
    }

    /// Whether the worker is registered and welcomed by a leader (what `/readyz` reports).
    pub fn is_ready(&self) -> bool {
        self.health.is_ready()
    }

    /// The bound address of the ops endpoints, when served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Graceful shutdown: grant no more credit and start nothing new, let running reconciles finish
    /// (up to the grace period, then cancel them), report them, and revoke the lease so the
    /// coordinator frees this worker's shards at once.
    pub async fn shutdown(mut self) {
        self.stops.graceful.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.ops_stop.cancel();
    }

    /// Stops at once, as if the process died: reconciles are cancelled, nothing is reported and the
    /// lease is left to expire (what tests of a crashed worker want).
    pub fn abort(self) {
        drop(self);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stops.kill.cancel();
        self.ops_stop.cancel();
    }
}

/// The controllers a worker is given can run together: at least one, unique non-empty names, each
/// with a reconcile and a positive concurrency.
pub(crate) fn check_controllers(controllers: &[DynController]) -> Result<(), WorkerError> {
    if controllers.is_empty() {
        return Err(WorkerError::Controllers("no controllers enabled".into()));
    }
    let mut names = HashSet::new();
    for c in controllers {
        if c.name().is_empty() {
            return Err(WorkerError::Controllers(
                "a controller has an empty name".into(),
            ));
        }
        if !names.insert(c.name()) {
            return Err(WorkerError::Controllers(format!(
                "controller {} is given twice",
                c.name()
            )));
        }
        if !c.has_reconcile() {
            return Err(WorkerError::Controllers(format!(
                "controller {} has no reconcile function",
                c.name()
            )));
        }
        if c.concurrency_limit() == 0 {
            return Err(WorkerError::Controllers(format!(
                "controller {} has concurrency 0",
                c.name()
            )));
        }
    }
    Ok(())
}

/// Runs a worker until `shutdown` completes, then shuts it down gracefully.
///
/// # Errors
/// See [`Worker::start`].
pub async fn run(
    config: WorkerConfig,
    controllers: Vec<DynController>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WorkerError> {
    let worker = Worker::start(config, controllers).await?;
    shutdown.await;
    worker.shutdown().await;
    Ok(())
}
