//! `DevCluster`: connects to etcd, starts the watch cache and the HTTP(S) server, and hands out kubeconfigs and clients.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::auth::{Auth, AuthConfig, AuthError, AuthorizationMode, Decision};
use super::builtins::builtins;
use super::registry::Registry;
use super::state::ApiState;
use super::storage::{Storage, StorageError};
use super::tls::{Serving, ServingTls, TlsError};
use super::watch_cache::{self, WatchCache};

/// How many recent events the watch cache keeps (upstream's default capacity grows to this range).
const WATCH_CACHE_CAPACITY: usize = 10_000;

/// Configuration of a local API server.
pub struct DevClusterConfig {
    /// etcd client URLs, e.g. `http://127.0.0.1:2379`.
    pub etcd_endpoints: Vec<String>,
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Periodic etcd compaction at the current revision (None = never). Upstream compacts every 5 min.
    pub compact_interval: Option<Duration>,
    /// How often watchers that allow bookmarks get a BOOKMARK. Default 1 s so tests see them quickly
    /// (upstream sends them about once a minute).
    pub bookmark_interval: Duration,
    /// Extra devcluster-only routes, served under `/flotilla/`.
    pub extension: Option<Router>,
}

impl Default for DevClusterConfig {
    fn default() -> Self {
        DevClusterConfig {
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            compact_interval: None,
            bookmark_interval: Duration::from_secs(1),
            extension: None,
        }
    }
}

/// Failures of the local API server.
#[derive(Debug, thiserror::Error)]
pub enum DevClusterError {
    /// etcd could not be reached.
    #[error("cannot connect to etcd at {endpoints:?}")]
    Connect {
        /// Endpoints tried.
        endpoints: Vec<String>,
        /// Cause.
        #[source]
        source: etcd_client::Error,
    },
    /// A storage operation failed.
    #[error("etcd storage failed")]
    Storage(#[from] StorageError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Writing the kubeconfig failed.
    #[error("cannot write kubeconfig to {path}")]
    WriteKubeconfig {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Start-up objects (system namespaces, stored CRDs) could not be read or written.
    #[error("cannot bootstrap the API server: {0}")]
    Bootstrap(String),
    /// Building a kube client failed.
    #[error("cannot build a kube client")]
    Client(#[source] kube::Error),
    /// Building the client configuration failed.
    #[error("cannot build a kube client configuration")]
    ClientConfig(#[source] kube::config::KubeconfigError),
    /// The authentication settings are unusable (an unreadable or malformed token file).
    #[error("cannot set up authentication")]
    Auth(#[from] AuthError),
    /// HTTPS cannot be set up (certificate generation failed, unusable certificate or key files).
    #[error("cannot set up HTTPS")]
    Tls(#[from] TlsError),
}

/// A running local Kubernetes API server. Dropping it (or [`DevCluster::shutdown`]) stops it.
pub struct DevCluster {
    addr: SocketAddr,
    /// The serving TLS; None when serving plain HTTP.
    tls: Option<ServingTls>,
    state: ApiState,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// Compacts etcd at its current revision and moves the watch cache window past it.
pub(crate) async fn compact(st: &ApiState) -> Result<i64, StorageError> {
    let rev = st.storage.current_revision().await?;
    // Compacting past events the watch cache has not received yet would make etcd cancel its watch,
    // and the events in between would never reach the open watches. Let the cache catch up first
    // (bounded: revisions written outside `/registry/` only show up with the next progress notice).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while st.cache.revision() < rev && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    st.storage.compact(rev).await?;
    st.cache.compacted(rev);
    Ok(rev)
}

impl DevCluster {
    /// Connects to etcd, starts the watch cache and serves the API, with no authorization (every
    /// request without a token is the administrator's).
    ///
    /// # Errors
    /// etcd unreachable, listen address unavailable.
    pub async fn start(config: DevClusterConfig) -> Result<DevCluster, DevClusterError> {
        Self::start_with_auth(config, AuthConfig::default()).await
    }

    /// [`DevCluster::start`] with authentication and authorization settings: bearer tokens from a
    /// token file and the TokenRequest API, and in RBAC mode upstream's RBAC authorizer (the
    /// bootstrap ClusterRoles created at start, the kubeconfig carrying an admin token). Served as
    /// [`Serving::Auto`] says: HTTPS in RBAC mode (so kubectl sends the kubeconfig's token), plain
    /// HTTP otherwise.
    ///
    /// # Errors
    /// etcd unreachable, listen address unavailable, token file unreadable or malformed.
    pub async fn start_with_auth(
        config: DevClusterConfig,
        auth: AuthConfig,
    ) -> Result<DevCluster, DevClusterError> {
        Self::start_serving(config, auth, Serving::Auto).await
    }

    /// [`DevCluster::start_with_auth`], served as `serving` says: plain HTTP, or HTTPS with a
    /// generated certificate (whose CA the kubeconfig carries) or with certificate files.
    ///
    /// # Errors
    /// etcd unreachable, listen address unavailable, token file unreadable or malformed,
    /// certificate files unreadable or unusable.
    pub async fn start_serving(
        config: DevClusterConfig,
        auth: AuthConfig,
        serving: Serving,
    ) -> Result<DevCluster, DevClusterError> {
        let serving = serving.resolve(auth.authorization_mode);
        let tls = ServingTls::for_serving(&serving, config.listen)?;
        let auth = Arc::new(Auth::new(&auth)?);
        let client = etcd_client::Client::connect(&config.etcd_endpoints, None)
            .await
            .map_err(|source| DevClusterError::Connect {
                endpoints: config.etcd_endpoints.clone(),
                source,
            })?;
        let storage = Storage::new(client);
        let rev = storage.current_revision().await?;
        let cache = WatchCache::new(rev, WATCH_CACHE_CAPACITY);
        let cancel = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| DevClusterError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| DevClusterError::Bind {
                addr: config.listen,
                source,
            })?;
        let state = ApiState {
            registry: Arc::new(Registry::new(builtins())),
            storage: storage.clone(),
            cache: cache.clone(),
            bookmark_interval: config.bookmark_interval,
            cancel: cancel.clone(),
            address: addr.to_string(),
            quota_locks: Arc::default(),
            auth,
        };
        let mut tasks = Vec::new();
        let crd_rx = cache.receiver();
        let quota_rx = cache.receiver();
        tasks.push(tokio::spawn(watch_cache::run(
            storage.clone(),
            cache.clone(),
            rev,
            config.bookmark_interval,
            cancel.child_token(),
        )));
        super::bootstrap::system_namespaces(&state)
            .await
            .map_err(|e| DevClusterError::Bootstrap(e.message))?;
        super::bootstrap::default_service_cidr(&state)
            .await
            .map_err(|e| DevClusterError::Bootstrap(e.message))?;
        if state.auth.mode() == AuthorizationMode::Rbac {
            super::auth::bootstrap_policy(&state)
                .await
                .map_err(|e| DevClusterError::Bootstrap(e.message))?;
        }
        super::crd::load_all(&state)
            .await
            .map_err(|e| DevClusterError::Bootstrap(e.message))?;
        tasks.push(tokio::spawn(super::crd::sync(
            state.registry.clone(),
            crd_rx,
            cancel.child_token(),
        )));
        tasks.push(tokio::spawn(super::quota::sync(
            state.clone(),
            quota_rx,
            cancel.child_token(),
        )));
        if let Some(every) = config.compact_interval {
            let st = state.clone();
            let token = cancel.child_token();
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    tokio::select! {
                        biased;
                        _ = token.cancelled() => return,
                        _ = tick.tick() => {
                            if let Err(e) = compact(&st).await {
                                tracing::warn!(error = %e, "periodic compaction failed");
                            }
                        }
                    }
                }
            }));
        }
        let mut flotilla = Router::new()
            .route("/v1/compact", post(super::http::compact))
            .with_state(state.clone());
        if let Some(ext) = config.extension {
            flotilla = flotilla.merge(ext);
        }
        let app = Router::new()
            .fallback(super::http::dispatch)
            .with_state(state.clone())
            .nest("/flotilla", flotilla);
        let token = cancel.child_token();
        match &tls {
            None => tasks.push(tokio::spawn(serve(listener, app, token))),
            Some(tls) => {
                let (listener, accept) = tls.listen(listener, cancel.child_token());
                tasks.push(accept);
                tasks.push(tokio::spawn(serve(listener, app, token)));
            }
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(%addr, scheme, "devcluster API server listening");
        Ok(DevCluster {
            addr,
            tls,
            state,
            cancel,
            tasks,
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the API is served over HTTPS.
    pub fn is_https(&self) -> bool {
        self.tls.is_some()
    }

    /// The URL clients dial: `http://127.0.0.1:PORT`, or `https://…` when serving HTTPS. An
    /// unspecified listen address (`0.0.0.0`, `::`) is dialled on loopback, which the generated
    /// certificate names.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut dial = self.addr;
        if dial.ip().is_unspecified() {
            dial.set_ip(match dial.ip() {
                std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        format!("{scheme}://{dial}")
    }

    /// The CA (PEM) a client must trust to reach this server over HTTPS; None for plain HTTP.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(ServingTls::ca_pem)
    }

    /// A kubeconfig for this server, context `devcluster`: [`DevCluster::url`], with the CA as
    /// `certificate-authority-data` when serving HTTPS; no credentials, or in RBAC mode the admin
    /// token (user `system:admin` in `system:masters`).
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        use kube::config::{
            AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
        };
        Kubeconfig {
            clusters: vec![NamedCluster {
                name: "devcluster".into(),
                cluster: Some(Cluster {
                    server: Some(self.url()),
                    certificate_authority_data: self.ca_pem().map(|pem| {
                        use base64::Engine as _;
                        base64::engine::general_purpose::STANDARD.encode(pem)
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            auth_infos: vec![NamedAuthInfo {
                name: "devcluster".into(),
                auth_info: Some(AuthInfo {
                    token: self.state.auth.admin_token().map(|t| t.to_owned().into()),
                    ..AuthInfo::default()
                }),
                ..Default::default()
            }],
            contexts: vec![NamedContext {
                name: "devcluster".into(),
                context: Some(Context {
                    cluster: "devcluster".into(),
                    user: Some("devcluster".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            current_context: Some("devcluster".into()),
            kind: Some("Config".into()),
            api_version: Some("v1".into()),
            ..Default::default()
        }
    }

    /// Writes [`DevCluster::kubeconfig`] as JSON (valid kubeconfig YAML) to `path`.
    ///
    /// # Errors
    /// I/O failures.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), DevClusterError> {
        let text = serde_json::to_string_pretty(&self.kubeconfig()).unwrap_or_default();
        std::fs::write(path, text).map_err(|source| DevClusterError::WriteKubeconfig {
            path: path.display().to_string(),
            source,
        })
    }

    /// A `kube::Client` for this server.
    ///
    /// # Errors
    /// Client construction failures.
    pub async fn client(&self) -> Result<kube::Client, DevClusterError> {
        let config = kube::Config::from_custom_kubeconfig(
            self.kubeconfig(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(DevClusterError::ClientConfig)?;
        kube::Client::try_from(config).map_err(DevClusterError::Client)
    }

    /// Every authorization decision so far, oldest first: each request's user and attributes,
    /// whether it was allowed and every rule that allowed it. Empty unless in RBAC mode.
    pub fn authorization_decisions(&self) -> Vec<Decision> {
        self.state.auth.decisions()
    }

    /// Compacts etcd at the current revision; returns it. Watches and continues from before it then get 410.
    ///
    /// # Errors
    /// etcd failures.
    pub async fn compact_now(&self) -> Result<i64, DevClusterError> {
        Ok(compact(&self.state).await?)
    }

    /// Stops serving: open watches end, the listener closes.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        for t in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

/// Serves `app` on `listener` until `token` fires, then lets open requests finish (watches end when
/// the cancellation reaches them).
async fn serve<L>(listener: L, app: Router, token: CancellationToken)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let serve =
        axum::serve(listener, app).with_graceful_shutdown(async move { token.cancelled().await });
    if let Err(e) = serve.await {
        tracing::error!(error = %e, "devcluster API server stopped");
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        self.cancel.cancel();
        for t in &self.tasks {
            t.abort();
        }
    }
}
