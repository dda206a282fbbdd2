//! The coordinator process: gRPC services and ops endpoints that live as long as the process, and a
//! leadership loop that campaigns, runs one dispatcher per term while it leads, and steps down cleanly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::GetOptions;
use flotilla_common::{
    Election, FleetKeys, Health, LeaderInfo, OpsServer, Session, SessionConfig, connect_etcd,
    kube_client,
};
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::admin_service::AdminService;
use crate::config::CoordinatorConfig;
use crate::dispatch_service::DispatchService;
use crate::fleet::{self, Command, DispatcherHandle, TermContext};
use crate::informer::{Informers, deletable_resources};
use crate::leader_slot::LeaderSlot;
use crate::metrics::FleetMetrics;
use crate::queue::QueueMetricsFamilies;

/// Errors of starting a coordinator.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// etcd cannot be reached.
    #[error("cannot connect to etcd at {endpoints}")]
    Etcd {
        /// The endpoints tried.
        endpoints: String,
        /// Why.
        #[source]
        source: etcd_client::Error,
    },
    /// No Kubernetes client.
    #[error(transparent)]
    Kube(#[from] flotilla_common::KubeConfigError),
    /// A listen address is taken.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The ops server failed.
    #[error(transparent)]
    Ops(#[from] flotilla_common::OpsServerError),
}

/// A running coordinator.
pub struct Coordinator {
    addr: SocketAddr,
    metrics_addr: SocketAddr,
    slot: LeaderSlot,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Coordinator {
    /// Validates `config`, binds the listeners and starts campaigning.
    ///
    /// # Errors
    /// See [`CoordinatorError`].
    pub async fn start(mut config: CoordinatorConfig) -> Result<Self, CoordinatorError> {
        config.validate()?;
        let etcd = connect_etcd(&config.etcd_endpoints)
            .await
            .map_err(|source| CoordinatorError::Etcd {
                endpoints: config.etcd_endpoints.join(","),
                source,
            })?;
        let kube = kube_client(config.kubeconfig.as_deref()).await?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| CoordinatorError::Listen {
                addr: config.listen,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| CoordinatorError::Listen {
                addr: config.listen,
                source,
            })?;
        if config.advertise.is_none() {
            // A wildcard listen address cannot be dialled; advertise loopback with the bound port then.
            let ip = if addr.ip().is_unspecified() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                addr.ip()
            };
            config.advertise = Some(SocketAddr::new(ip, addr.port()).to_string());
        }
        let config = Arc::new(config);

        let mut registry = Registry::default();
        let metrics = FleetMetrics::register(&mut registry);
        let queue_metrics = QueueMetricsFamilies::register(&mut registry);
        let informers = Informers::new(kube, &mut registry);
        let registry = Arc::new(Mutex::new(registry));
        let health = Health::new();
        let stop = CancellationToken::new();
        let ops = OpsServer::start(
            config.metrics_listen,
            registry,
            health.clone(),
            stop.clone(),
        )
        .await?;
        let slot = LeaderSlot::default();

        let server = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(5)))
            .http2_keepalive_timeout(Some(Duration::from_secs(5)))
            .tcp_nodelay(true)
            .add_service(
                DispatchService::new(slot.clone(), metrics.clone(), config.hello_timeout)
                    .into_server(),
            )
            .add_service(crate::cache_service(informers.clone()))
            .add_service(AdminService::new(slot.clone()).into_server());
        let serve_stop = stop.clone();
        let grpc = tokio::spawn(
            async move {
                let incoming = TcpListenerStream::new(listener);
                if let Err(err) = server
                    .serve_with_incoming_shutdown(incoming, serve_stop.cancelled_owned())
                    .await
                {
                    warn!(error = %err, "gRPC server stopped");
                }
            }
            .instrument(info_span!("grpc", %addr)),
        );
        let process = Process {
            config: config.clone(),
            etcd,
            informers,
            metrics,
            queue_metrics,
            slot: slot.clone(),
            health,
        };
        let mut tasks = vec![grpc];
        if config.hot_standby {
            tasks.push(tokio::spawn(process.clone().warm_informers(stop.clone())));
        }
        tasks.push(tokio::spawn(
            process
                .lead(stop.clone())
                .instrument(info_span!("coordinator", id = %config.id)),
        ));
        info!(%addr, metrics = %ops.addr(), advertise = %config.advertise_address(), "coordinator started");
        Ok(Self {
            addr,
            metrics_addr: ops.addr(),
            slot,
            stop,
            tasks,
        })
    }

    /// The gRPC address bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The ops (`/metrics`) address bound.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Whether this coordinator leads right now.
    pub fn is_leader(&self) -> bool {
        self.slot.dispatcher().is_some()
    }

    /// Adds keys to a controller's queue on the leader (benchmarks drive the fleet without objects).
    /// Returns false when this coordinator does not lead.
    pub fn enqueue(&self, controller: &str, keys: Vec<String>) -> bool {
        self.slot.dispatcher().is_some_and(|d: DispatcherHandle| {
            d.send(Command::Enqueue {
                controller: controller.to_owned(),
                keys,
            })
        })
    }

    /// Graceful shutdown: a leader stops dispatching and resigns so a standby takes over at once.
    pub async fn shutdown(self) {
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

#[derive(Clone)]
struct Process {
    config: Arc<CoordinatorConfig>,
    etcd: etcd_client::Client,
    informers: Informers,
    metrics: FleetMetrics,
    queue_metrics: QueueMetricsFamilies,
    slot: LeaderSlot,
    health: Health,
}

impl Process {
    fn session_config(&self) -> SessionConfig {
        SessionConfig {
            ttl: self.config.lease_duration,
            renew_interval: self.config.retry_period,
            renew_deadline: self.config.renew_deadline,
        }
    }

    /// Campaign, lead, step down, repeat — until `stop`.
    async fn lead(self, stop: CancellationToken) {
        let keys = FleetKeys::new(&self.config.fleet);
        let election = Election::new(self.etcd.clone(), keys.election());
        let info = LeaderInfo {
            id: self.config.id.clone(),
            address: self.config.advertise_address(),
        };
        let observer = tokio::spawn(observe_leader(
            election.clone(),
            self.slot.clone(),
            stop.clone(),
        ));
        while !stop.is_cancelled() {
            let session = match Session::start(self.etcd.clone(), self.session_config()).await {
                Ok(session) => session,
                Err(err) => {
                    warn!(error = %err, "cannot open an etcd session; retrying");
                    self.health.set_ready(false, "no etcd session");
                    pause(&stop, self.config.retry_period).await;
                    continue;
                }
            };
            self.health.set_ready(true, "following");
            let elected = tokio::select! {
                biased;
                () = stop.cancelled() => {
                    session.close().await;
                    break;
                }
                elected = election.campaign(&session, &info) => elected,
            };
            let elected = match elected {
                Ok(elected) => elected,
                Err(err) => {
                    warn!(error = %err, "campaign failed; retrying");
                    pause(&stop, self.config.retry_period).await;
                    continue;
                }
            };
            let term = elected.term();
            info!(term, "elected leader");
            let term_stop = stop.child_token();
            let ctx = TermContext {
                config: self.config.clone(),
                etcd: self.etcd.clone(),
                election: election.clone(),
                elected: elected.clone(),
                leader: info.clone(),
                informers: self.informers.clone(),
                metrics: self.metrics.clone(),
                queue_metrics: self.queue_metrics.clone(),
            };
            let (handle, mut task) = fleet::spawn(ctx, term_stop.clone());
            self.slot.set_dispatcher(Some(handle));
            self.metrics.is_leader.set(1);
            self.metrics
                .term
                .set(i64::try_from(term).unwrap_or(i64::MAX));
            let readiness = tokio::spawn(leader_readiness(
                self.informers.clone(),
                self.health.clone(),
                term_stop.clone(),
            ));
            let lost = session.lost();
            let resign = tokio::select! {
                biased;
                () = stop.cancelled() => true,
                () = lost.cancelled() => {
                    warn!(term, "leader lease in doubt; stepping down before it can expire");
                    false
                }
                ended = &mut task => {
                    match ended {
                        Ok(Err(err)) => warn!(term, error = %err, "term ended"),
                        Ok(Ok(())) => info!(term, "term ended"),
                        Err(err) => warn!(term, error = %err, "dispatcher task failed"),
                    }
                    true
                }
            };
            // Stop dispatching before anyone else can lead: clear the slot, end the term, then resign.
            self.slot.set_dispatcher(None);
            term_stop.cancel();
            let _ = task.await;
            let _ = readiness.await;
            self.metrics.is_leader.set(0);
            self.metrics.term.set(0);
            if resign {
                if let Err(err) = election.resign(&elected).await {
                    warn!(error = %err, "resign failed; the lease expiry ends the term");
                }
                session.close().await;
            }
            info!(term, "stepped down");
        }
        observer.abort();
    }

    /// `--hot-standby`: keep informers of every controller the fleet runs synced while following.
    async fn warm_informers(self, stop: CancellationToken) {
        let keys = FleetKeys::new(&self.config.fleet);
        let mut etcd = self.etcd.clone();
        let mut next_discovery = tokio::time::Instant::now();
        loop {
            let mut owner_graph = false;
            if let Ok(resp) = etcd
                .get(
                    keys.controllers_prefix(),
                    Some(GetOptions::new().with_prefix()),
                )
                .await
            {
                for kv in resp.kvs() {
                    let (kinds, graph) = fleet::spec_informers(kv.value());
                    owner_graph |= graph;
                    for kind in kinds {
                        self.informers.ensure(&kind);
                    }
                }
            }
            // The owner graph covers every deletable resource: warm those too, rediscovered as a
            // leader does, so a takeover does not start with listing the whole cluster.
            if owner_graph && tokio::time::Instant::now() >= next_discovery {
                next_discovery = tokio::time::Instant::now() + fleet::DISCOVERY_PERIOD;
                match deletable_resources(&self.informers.client()).await {
                    Ok(kinds) => kinds.iter().for_each(|k| self.informers.ensure(k)),
                    Err(err) => {
                        warn!(error = %err, "resource discovery for the owner graph failed")
                    }
                }
            }
            if !pause(&stop, Duration::from_secs(2)).await {
                return;
            }
        }
    }
}

/// Sleeps unless stopped first; false when stopped.
async fn pause(stop: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        biased;
        () = stop.cancelled() => false,
        () = tokio::time::sleep(d) => true,
    }
}

/// Keeps the slot's idea of the current leader fresh, for "not the leader, try X" answers.
async fn observe_leader(election: Election, slot: LeaderSlot, stop: CancellationToken) {
    use futures::StreamExt;
    let mut leaders = Box::pin(election.observe());
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            leader = leaders.next() => match leader {
                Some(leader) => slot.set_known_leader(leader),
                None => return,
            },
        }
    }
}

/// A leader is ready once every informer it runs has synced.
async fn leader_readiness(informers: Informers, health: Health, stop: CancellationToken) {
    loop {
        let kinds = informers.kinds();
        let unsynced = kinds.iter().filter(|(_, synced, _)| !synced).count();
        if unsynced == 0 {
            health.set_ready(true, "leading; caches synced");
        } else {
            health.set_ready(false, &format!("leading; {unsynced} informers not synced"));
        }
        if !pause(&stop, Duration::from_millis(500)).await {
            return;
        }
    }
}
