//! The coordinator process: gRPC services and ops endpoints that live as long as the process, and a
//! leadership loop that campaigns, runs one dispatcher per term while it leads, and steps down cleanly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_common::{
    Election, Flapping, Health, LeaderInfo, OpsServer, Session, SessionConfig, counted_kube_client,
    get_prefix_paged,
};
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::admin_service::AdminService;
use crate::api_link::ApiLink;
use crate::config::CoordinatorConfig;
use crate::dispatch_service::DispatchService;
use crate::fleet::{
    self, CacheAccess, Command, DispatchProgress, DispatcherHandle, Limits, TermContext,
};
use crate::informer::{Informers, deletable_resources};
use crate::leader_slot::LeaderSlot;
use crate::metrics::{FleetMetrics, ReasonLabel};
use crate::queue::QueueMetricsFamilies;

/// Errors of starting a coordinator.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// etcd refused the client (certificate, password, role) or cannot be reached; the message
    /// names the flag to look at.
    #[error(transparent)]
    Etcd(#[from] flotilla_common::EtcdConnectError),
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
    /// Cancelled when the leadership loop stopped without being asked to; `failure` says why.
    failed: CancellationToken,
    failure: Arc<Mutex<Option<String>>>,
}

impl Coordinator {
    /// Validates `config`, binds the listeners and starts campaigning.
    ///
    /// # Errors
    /// See [`CoordinatorError`].
    pub async fn start(mut config: CoordinatorConfig) -> Result<Self, CoordinatorError> {
        config.validate()?;
        let etcd = config.etcd.connect(&config.fleet).await?;
        // The informers' lists and watches, counted as a worker's requests are (`rest_client_requests`).
        let api_requests = flotilla_common::RequestCounter::default();
        let kube = counted_kube_client(
            config.kubeconfig.as_deref(),
            "coordinator",
            api_requests.clone(),
        )
        .await?;
        let listener = bind_listener(config.listen).map_err(|source| CoordinatorError::Listen {
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
        metrics.master_status(&config.fleet).set(0);
        flotilla_common::register_process_metrics(&mut registry);
        api_requests.register(&mut registry);
        flotilla_common::register_session_metrics(&mut registry);
        flotilla_common::tls::register_tls_metrics(&mut registry);
        let informers = Informers::scoped(
            kube,
            &mut registry,
            config.unserved_kind_timeout,
            config.namespaces.clone(),
        );
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
        // Probed through the informers' own client: the link they list and watch over.
        let api_link = ApiLink::start(
            informers.client(),
            config.kube_api_unreachable_timeout,
            stop.clone(),
        );

        let server = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(5)))
            .http2_keepalive_timeout(Some(Duration::from_secs(5)))
            .add_service(
                DispatchService::new(
                    slot.clone(),
                    metrics.clone(),
                    config.hello_timeout,
                    Limits {
                        max_concurrency: config.max_controller_concurrency,
                        max_kinds: config.max_worker_kinds,
                    },
                )
                .into_server(),
            )
            .add_service({
                let slot = slot.clone();
                crate::cache_service(
                    informers.clone(),
                    Arc::new(move || slot.cache_access()),
                    metrics.clone(),
                    config.cache_list_limits(),
                )
            })
            .add_service(AdminService::new(slot.clone()).into_server());
        let serve_stop = stop.clone();
        let tls = config.tls.clone();
        let handshake_metrics = metrics.clone();
        let grpc = tokio::spawn(
            async move {
                let stopped = serve_stop.cancelled_owned();
                let served = match tls {
                    // Handshakes are ours (tonic's TLS cannot reload certificates); tonic's `Connected`
                    // impl for the TLS stream hands the client's certificates to the handlers.
                    Some(tls) => {
                        let incoming = tls.incoming(listener, move |peer, error| {
                            refuse_handshake(&handshake_metrics, peer, error);
                        });
                        server.serve_with_incoming_shutdown(incoming, stopped).await
                    }
                    None => {
                        // `Server::tcp_nodelay` applies only to listeners tonic binds itself. Without
                        // it, Nagle's algorithm held each small Assign or Cache answer back until the
                        // worker's delayed ACK came, 30 to 40 ms later.
                        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
                        server.serve_with_incoming_shutdown(incoming, stopped).await
                    }
                };
                if let Err(err) = served {
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
            api_link,
        };
        let mut tasks = vec![grpc];
        if config.hot_standby {
            tasks.push(tokio::spawn(process.clone().warm_informers(stop.clone())));
        }
        let lead = tokio::spawn(
            process
                .clone()
                .lead(stop.clone())
                .instrument(info_span!("coordinator", id = %config.id)),
        );
        let failed = CancellationToken::new();
        let failure = Arc::new(Mutex::new(None));
        tasks.push(tokio::spawn(supervise(
            lead,
            stop.clone(),
            process.health.clone(),
            failed.clone(),
            failure.clone(),
        )));
        info!(%addr, metrics = %ops.addr(), advertise = %config.advertise_address(),
            mtls = config.tls.is_some(),
            namespaces = %config.namespaces, "coordinator started");
        Ok(Self {
            addr,
            metrics_addr: ops.addr(),
            slot,
            stop,
            tasks,
            failed,
            failure,
        })
    }

    /// Resolves when the leadership loop has stopped on its own (a panic, or an end nobody asked for),
    /// with why. The process can then neither lead nor follow: `/healthz` already fails, and the caller
    /// should exit non-zero so its supervisor restarts it. Never resolves while the loop runs.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn failed(&self) -> String {
        self.failed.cancelled().await;
        self.failure
            .lock()
            .clone()
            .unwrap_or_else(|| "the leadership loop stopped".into())
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

    /// Adds keys to a controller's queue on the leader (benchmarks drive the fleet without objects),
    /// waiting while the dispatcher's command channel is full. Returns false when this coordinator does
    /// not lead.
    pub async fn enqueue(&self, controller: &str, keys: Vec<String>) -> bool {
        let Some(d): Option<DispatcherHandle> = self.slot.dispatcher() else {
            return false;
        };
        d.send(Command::Enqueue {
            controller: controller.to_owned(),
            keys,
        })
        .await
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
    /// Whether the Kubernetes API answers: this coordinator neither campaigns nor leads while it has
    /// not for `--kube-api-unreachable-timeout`.
    api_link: ApiLink,
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
        let keys = self.config.etcd.fleet_keys(&self.config.fleet);
        let election = match self.config.etcd.connect_for_campaigns().await {
            Ok(client) => {
                Election::new(self.etcd.clone(), keys.election()).campaigning_with(client)
            }
            Err(err) => {
                warn!(error = %err, "cannot open the etcd connection for campaigns; campaigning on the \
                    one with request timeouts, which a standby's wait outlasts");
                Election::new(self.etcd.clone(), keys.election())
            }
        };
        let info = LeaderInfo {
            id: self.config.id.clone(),
            address: self.config.advertise_address(),
        };
        let observer = tokio::spawn(observe_leader(
            election.clone(),
            self.slot.clone(),
            stop.clone(),
        ));
        // Terms that ended on an error or a panic: a leader whose every term fails at its start is
        // elected again and again, and would look ready between terms.
        let mut failed_terms = Flapping::new(FAILED_TERMS_WINDOW, FAILED_TERMS_NOT_READY);
        while !stop.is_cancelled() {
            // A coordinator cut from the API would lead on informers nobody updates: it stays out of
            // the election until the API answers, and a standby that reaches it leads meanwhile.
            if self.api_link.is_unreachable() {
                warn!(unreachable_for = ?self.api_link.unreachable_for(),
                    "the Kubernetes API does not answer; not campaigning until it does");
                self.health.set_ready(
                    false,
                    &self
                        .api_link
                        .not_ready_reason("not campaigning")
                        .unwrap_or_else(|| {
                            "not campaigning; the Kubernetes API does not answer".into()
                        }),
                );
                if !self.api_link.reachable(&stop).await {
                    break;
                }
                info!("the Kubernetes API answers again; campaigning");
            }
            // A lease that takes longer than the renew deadline to grant could not be kept anyway; and
            // a grant sent while etcd restarts may hang for the client's whole request timeout.
            let started = tokio::time::timeout(
                self.config.renew_deadline,
                Session::start(self.etcd.clone(), self.session_config()),
            )
            .await;
            let session = match started {
                Ok(Ok(session)) => session,
                Ok(Err(err)) => {
                    warn!(error = %err, "cannot open an etcd session; retrying");
                    self.health.set_ready(false, "no etcd session");
                    pause(&stop, self.config.retry_period).await;
                    continue;
                }
                Err(_) => {
                    warn!(timeout = ?self.config.renew_deadline, "opening an etcd session timed out; retrying");
                    self.health.set_ready(false, "no etcd session");
                    continue;
                }
            };
            match election.clear_leaseless().await {
                Ok(0) => {}
                Ok(cleared) => {
                    for _ in 0..cleared {
                        self.metrics.bad("leaseless_election_key");
                    }
                    error!(
                        cleared,
                        "deleted election keys that carried no lease (a restore or a hand edit?): no campaign could ever have passed them"
                    );
                }
                Err(err) => debug!(error = %err, "cannot look for lease-less election keys"),
            }
            let readiness = tokio::spawn(follower_readiness(
                self.slot.clone(),
                self.health.clone(),
                self.api_link.clone(),
                self.config.dispatch_stall_timeout,
                failed_terms.recent(tokio::time::Instant::now()),
            ));
            let elected = tokio::select! {
                biased;
                () = stop.cancelled() => {
                    readiness.abort();
                    session.close().await;
                    break;
                }
                elected = election.campaign(&session, &info) => elected,
                () = self.api_link.unreachable() => {
                    readiness.abort();
                    warn!(unreachable_for = ?self.api_link.unreachable_for(),
                        "the Kubernetes API does not answer; leaving the election");
                    // The campaign key may already be in etcd on this session's lease.
                    self.revoke_when_reachable(session, &stop);
                    continue;
                }
            };
            readiness.abort();
            let elected = match elected {
                Ok(elected) => elected,
                Err(err) => {
                    let cause = std::error::Error::source(&err).map(ToString::to_string);
                    warn!(error = %err, cause, "campaign failed; retrying");
                    // The campaign key may be in etcd on this session's lease, ahead of every later
                    // campaign: left to expire, it would hold the next election up for a lease TTL
                    // after etcd returns.
                    self.revoke_when_reachable(session, &stop);
                    pause(&stop, self.config.retry_period).await;
                    continue;
                }
            };
            let term = elected.term();
            info!(term, "elected leader");
            let term_stop = stop.child_token();
            let access = CacheAccess::default();
            let progress = DispatchProgress::default();
            let ctx = TermContext {
                config: self.config.clone(),
                etcd: self.etcd.clone(),
                election: election.clone(),
                elected: elected.clone(),
                leader: info.clone(),
                informers: self.informers.clone(),
                metrics: self.metrics.clone(),
                queue_metrics: self.queue_metrics.clone(),
                access: access.clone(),
                progress: progress.clone(),
                api_link: self.api_link.clone(),
            };
            let (handle, mut task) = fleet::spawn(ctx, term_stop.clone());
            self.slot.set_term(Some((handle, access)));
            self.metrics.is_leader.set(1);
            self.metrics.terms_started.inc();
            self.metrics.master_status(&self.config.fleet).set(1);
            self.metrics
                .term
                .set(i64::try_from(term).unwrap_or(i64::MAX));
            let readiness = tokio::spawn(leader_readiness(
                self.informers.clone(),
                progress,
                self.api_link.clone(),
                self.health.clone(),
                term_stop.clone(),
            ));
            let lost = session.lost();
            // Whether the dispatcher task already finished: a JoinHandle must not be polled again after
            // it completed (that panics, and a panic here would end the leadership loop for good).
            let (resign, finished, why) = tokio::select! {
                biased;
                () = stop.cancelled() => (true, false, "shutdown"),
                () = lost.cancelled() => {
                    warn!(term, "leader lease in doubt; stepping down before it can expire");
                    (false, false, "lease_lost")
                }
                () = self.api_link.unreachable() => {
                    warn!(term, unreachable_for = ?self.api_link.unreachable_for(),
                        "the Kubernetes API has not answered for --kube-api-unreachable-timeout; stopping dispatch and resigning so a coordinator that reaches it leads");
                    (true, false, "api_unreachable")
                }
                ended = &mut task => {
                    let why = match ended {
                        Ok(Err(err)) => {
                            warn!(term, error = %err, "term ended; stepping down and campaigning again");
                            "error"
                        }
                        Ok(Ok(())) => {
                            info!(term, "term ended");
                            "ended"
                        }
                        Err(err) => {
                            error!(term, error = %err, "dispatcher task failed; stepping down and campaigning again");
                            "panic"
                        }
                    };
                    (true, true, why)
                }
            };
            self.metrics
                .terms_ended
                .get_or_create(&ReasonLabel { reason: why.into() })
                .inc();
            if matches!(why, "error" | "panic") {
                failed_terms.failed(tokio::time::Instant::now());
            }
            // Stop dispatching before anyone else can lead: clear the slot, end the term, then resign.
            self.slot.set_term(None);
            self.health.set_ready(false, "stepping down");
            term_stop.cancel();
            if !finished && let Err(err) = task.await {
                error!(term, error = %err, "dispatcher task failed while stopping");
            }
            let _ = readiness.await;
            self.health
                .set_ready(false, "stepped down; campaigning again");
            self.metrics.is_leader.set(0);
            self.metrics.term.set(0);
            self.metrics.master_status(&self.config.fleet).set(0);
            self.metrics.worker_in_flight.clear();
            self.metrics.worker_credits.clear();
            let resigned = resign
                && election
                    .resign(&elected)
                    .await
                    .inspect_err(|err| warn!(error = %err, "resign failed; revoking the lease once etcd answers"))
                    .is_ok();
            if resigned {
                session.close().await;
            } else {
                // The lease is in doubt or the resign failed, most likely because etcd is unreachable.
                // Dispatching has stopped, so revoking it is safe.
                self.revoke_when_reachable(session, &stop);
            }
            info!(term, "stepped down");
            // A term that ended on an error would otherwise be retried at once, in a tight loop if the
            // error persists.
            if !stop.is_cancelled() {
                pause(&stop, self.config.retry_period).await;
            }
        }
        observer.abort();
    }

    /// Revokes `session`'s lease in the background, once etcd answers: a lease that ended in doubt (lost,
    /// or its term's resign or campaign failed) would otherwise keep its election key — ahead of every
    /// later campaign — for a full TTL after etcd returns, since etcd renews every lease when it restarts.
    fn revoke_when_reachable(&self, session: Session, stop: &CancellationToken) {
        tokio::spawn(revoke_when_reachable(
            session,
            self.config.retry_period,
            self.config.lease_duration * 10,
            stop.clone(),
        ));
    }

    /// `--hot-standby`: keep informers of every controller the fleet runs synced while following.
    async fn warm_informers(self, stop: CancellationToken) {
        let keys = self.config.etcd.fleet_keys(&self.config.fleet);
        let mut next_discovery = tokio::time::Instant::now();
        loop {
            let mut owner_graph = false;
            if let Ok((specs, _)) =
                get_prefix_paged(&self.etcd, &keys.controllers_prefix(), 0).await
            {
                for kv in &specs {
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
                    Ok(kinds) => kinds.iter().for_each(|k| self.informers.ensure_metadata(k)),
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

/// Waits for the leadership loop. Unless `stop` ended it, the coordinator is useless from then on: it
/// marks the process unhealthy (so `/healthz` fails and the kubelet restarts it), says why, and cancels
/// `failed` so the process can exit non-zero.
async fn supervise(
    lead: JoinHandle<()>,
    stop: CancellationToken,
    health: Health,
    failed: CancellationToken,
    failure: Arc<Mutex<Option<String>>>,
) {
    let ended = lead.await;
    if stop.is_cancelled() {
        return;
    }
    let reason = match ended {
        Ok(()) => "the leadership loop ended on its own".to_owned(),
        Err(err) => format!("the leadership loop failed: {err}"),
    };
    error!(%reason, "this coordinator can neither lead nor follow; exiting so it is restarted");
    health.set_ready(false, &reason);
    health.set_unhealthy(&reason);
    *failure.lock() = Some(reason);
    failed.cancel();
}

/// Revokes `session`'s lease, retrying every `retry` until etcd answers (the lease revoked, or already
/// gone), `give_up` has passed (it has expired on its own long since), or `stop`.
async fn revoke_when_reachable(
    session: Session,
    retry: Duration,
    give_up: Duration,
    stop: CancellationToken,
) {
    let lease = session.lease_id();
    let mut etcd = session.client().clone();
    drop(session);
    let deadline = tokio::time::Instant::now() + give_up;
    while tokio::time::Instant::now() < deadline {
        match etcd.lease_revoke(lease).await {
            Ok(_) => {
                info!(
                    lease = format!("{lease:x}"),
                    "revoked the lease of the term that ended"
                );
                return;
            }
            // etcd answered: the lease is already gone.
            Err(etcd_client::Error::GRpcStatus(status))
                if status.message().contains("not found") =>
            {
                return;
            }
            Err(_) => {}
        }
        if !pause(&stop, retry).await {
            return;
        }
    }
}

/// Sleeps unless stopped first; false when stopped.
/// A failed TLS handshake (no client certificate, an unknown CA, not TLS): counted as
/// `flotilla_bad_input_total{reason="tls_handshake"}`, logged rate-limited per peer address.
fn refuse_handshake(metrics: &FleetMetrics, peer: SocketAddr, error: &std::io::Error) {
    let peer = peer.ip().to_string();
    if let flotilla_common::Verdict::Log { suppressed } = metrics.refused(&peer, "tls_handshake") {
        warn!(peer, suppressed, %error, "refusing a TLS connection");
    }
}

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

/// Terms ending in errors within this window count towards [`FAILED_TERMS_NOT_READY`].
const FAILED_TERMS_WINDOW: Duration = Duration::from_secs(60);
/// This many terms ending in errors within [`FAILED_TERMS_WINDOW`] keep a campaigning coordinator not
/// ready until one of its terms runs: one failure is an etcd hiccup, three are a loop.
const FAILED_TERMS_NOT_READY: usize = 3;

/// A follower is ready while a leader is known, or has been missing for no longer than `bound`: a
/// coordinator that campaigns and never sees anyone lead (an election that cannot complete) is not, nor
/// one whose own terms keep failing (`failed_terms` within the last minute).
async fn follower_readiness(
    slot: LeaderSlot,
    health: Health,
    api_link: ApiLink,
    bound: Duration,
    failed_terms: usize,
) {
    loop {
        if let Some(reason) = api_link.not_ready_reason("following") {
            health.set_ready(false, &reason);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        match slot.leaderless_for() {
            _ if failed_terms >= FAILED_TERMS_NOT_READY => health.set_ready(
                false,
                &format!("following; {failed_terms} terms of this coordinator ended in errors within a minute"),
            ),
            Some(missing) if missing > bound => health.set_ready(
                false,
                &format!("following; no leader for {}s", missing.as_secs()),
            ),
            _ => health.set_ready(true, "following"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A leader is ready once every informer it runs has synced, while its dispatching makes progress
/// (see [`DispatchProgress`]) and while its Kubernetes API answers (see [`ApiLink::in_doubt`]).
async fn leader_readiness(
    informers: Informers,
    progress: DispatchProgress,
    api_link: ApiLink,
    health: Health,
    stop: CancellationToken,
) {
    loop {
        // A kind the server does not serve never syncs; it is reported in status, not held against
        // readiness (the controllers needing it wait, the rest of the fleet works).
        let unsynced = informers
            .kinds()
            .iter()
            .filter(|s| !s.synced && !s.unserved)
            .count();
        if let Some(reason) = api_link.not_ready_reason("leading") {
            health.set_ready(false, &reason);
        } else if unsynced > 0 {
            health.set_ready(false, &format!("leading; {unsynced} informers not synced"));
        } else if progress.is_stalled() {
            health.set_ready(
                false,
                "leading; keys wait and no item has finished within --dispatch-stall-timeout",
            );
        } else {
            health.set_ready(true, "leading; caches synced");
        }
        if !pause(&stop, Duration::from_millis(500)).await {
            return;
        }
    }
}

/// The workers' listener, with room for [`LISTEN_BACKLOG`] connections not yet accepted.
fn bind_listener(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Connections the kernel queues before the coordinator accepts them: a whole fleet reconnecting at
/// once after a failover (a thousand workers overflowed tokio's default of 1,024 by about a third,
/// each dropped SYN costing its worker a second of TCP retransmit). The kernel caps it at
/// `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;
