//! The cluster a test runs against: by default a devcluster (local API server on a throwaway etcd,
//! optionally with simulated nodes) owned by the test; with `FLOTILLA_TEST_KUBECONFIG` set, the
//! cluster that kubeconfig names, unchanged.
//!
//! Each [`TestCluster`] is one test's and owns that test's scope (`support::namespace`): its
//! kubeconfig is a copy of the cluster's whose contexts name the scope as their default namespace,
//! so its clients and the fleets started on it know which namespaces are the test's.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_devcluster::{
    AuthConfig, AuthorizationMode, Decision, DevCluster, DevClusterConfig, EtcdServer, NodeControl,
    NodeSimulator, SimConfig, control_router,
};
use kube::config::Kubeconfig;
use tempfile::TempDir;

use super::namespace::{new_scope, scope_selector, unique_namespace};

/// Environment variable naming a kubeconfig: tests then run against that cluster instead of a devcluster.
pub const KUBECONFIG_ENV: &str = "FLOTILLA_TEST_KUBECONFIG";

/// Whether the tests run against an external cluster (`FLOTILLA_TEST_KUBECONFIG` is set), which other
/// test processes may share.
pub fn is_external() -> bool {
    std::env::var_os(KUBECONFIG_ENV).is_some()
}

/// Returns from the calling test, saying why, unless the cluster is a devcluster.
#[macro_export]
macro_rules! skip_unless_devcluster {
    ($cluster:expr, $reason:expr) => {
        if !$cluster.is_devcluster() {
            eprintln!(
                "skipped: {} — needs devcluster, but {} names an external cluster",
                $reason,
                $crate::support::cluster::KUBECONFIG_ENV
            );
            return;
        }
    };
}

/// How to start a [`TestCluster`].
#[derive(Debug, Clone)]
pub struct TestClusterBuilder {
    sim: SimConfig,
    compact_interval: Option<Duration>,
    bookmark_interval: Duration,
    auth: AuthConfig,
}

impl Default for TestClusterBuilder {
    fn default() -> Self {
        TestClusterBuilder {
            sim: SimConfig {
                nodes: 0,
                ..SimConfig::default()
            },
            compact_interval: None,
            // Short, so tests observe bookmarks within their timeouts.
            bookmark_interval: Duration::from_secs(1),
            auth: AuthConfig::default(),
        }
    }
}

impl TestClusterBuilder {
    /// Also run a node simulator with `nodes` nodes (`sim-node-0..`), on devcluster and external
    /// clusters alike.
    pub fn with_nodes(mut self, nodes: usize) -> Self {
        self.sim.nodes = nodes;
        self
    }

    /// Replaces the node simulator's configuration (its `nodes` decides whether one runs).
    pub fn with_sim_config(mut self, sim: SimConfig) -> Self {
        self.sim = sim;
        self
    }

    /// Periodic compaction of the devcluster's etcd (ignored on an external cluster).
    pub fn with_compact_interval(mut self, interval: Duration) -> Self {
        self.compact_interval = Some(interval);
        self
    }

    /// How often the devcluster sends bookmarks (default 1 s; ignored on an external cluster).
    pub fn with_bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Authorize the devcluster's requests with RBAC (`--authorization-mode RBAC`); the test's client
    /// and kubeconfig then carry an admin token, and the devcluster serves HTTPS (so kubectl sends
    /// the token), the kubeconfig carrying its CA. Ignored on an external cluster, which has its own.
    pub fn with_rbac(mut self) -> Self {
        self.auth.authorization_mode = AuthorizationMode::Rbac;
        self
    }

    /// Starts the cluster (and etcd, and the simulator when asked for).
    ///
    /// # Panics
    /// With a message saying what could not be started.
    pub async fn start(self) -> TestCluster {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-test-")
            .tempdir()
            .unwrap_or_else(|err| panic!("cannot create a temporary directory: {err}"));
        let etcd = EtcdServer::start()
            .await
            .unwrap_or_else(|err| panic!("cannot start etcd for the test: {err}"));
        let control = NodeControl::new();
        let with_nodes = self.sim.nodes > 0;
        let scope = new_scope();
        let kubeconfig = dir.path().join("kubeconfig");
        let devcluster = match std::env::var_os(KUBECONFIG_ENV) {
            Some(path) => {
                // Absolute, so the files it names resolve against its own directory.
                let path = std::path::absolute(PathBuf::from(path))
                    .unwrap_or_else(|err| panic!("cannot resolve {KUBECONFIG_ENV}: {err}"));
                let file = Kubeconfig::read_from(&path).unwrap_or_else(|err| {
                    panic!("cannot read {KUBECONFIG_ENV}={}: {err}", path.display())
                });
                write_scoped(file, &scope, &kubeconfig);
                None
            }
            None => {
                let listen: SocketAddr = ([127, 0, 0, 1], 0).into();
                let config = DevClusterConfig {
                    etcd_endpoints: etcd.endpoints(),
                    listen,
                    compact_interval: self.compact_interval,
                    bookmark_interval: self.bookmark_interval,
                    extension: (self.sim.nodes > 0).then(|| control_router(control.clone())),
                };
                let cluster = DevCluster::start_with_auth(config, self.auth.clone())
                    .await
                    .unwrap_or_else(|err| panic!("cannot start devcluster: {err}"));
                write_scoped(cluster.kubeconfig(), &scope, &kubeconfig);
                Some(cluster)
            }
        };
        let client = client_from(&kubeconfig).await;
        let simulator = if self.sim.nodes > 0 {
            let simulator = NodeSimulator::start(client.clone(), self.sim)
                .await
                .unwrap_or_else(|err| panic!("cannot start the node simulator: {err}"));
            control.attach(simulator.handle());
            Some(simulator)
        } else {
            None
        };
        TestCluster {
            restart: RestartSettings {
                compact_interval: self.compact_interval,
                bookmark_interval: self.bookmark_interval,
                auth: self.auth,
                control: with_nodes.then_some(control),
            },
            simulator,
            client,
            scope,
            kubeconfig,
            devcluster,
            etcd,
            _dir: dir,
        }
    }
}

/// A cluster for one test. Dropping it stops what it started (simulator, devcluster, etcd), in
/// that order.
pub struct TestCluster {
    // Field order is drop order: the simulator stops before the server it talks to, the server
    // before its etcd.
    simulator: Option<NodeSimulator>,
    client: kube::Client,
    /// This test's scope (`support::namespace`).
    scope: String,
    kubeconfig: PathBuf,
    /// None when the tests run against an external cluster.
    devcluster: Option<DevCluster>,
    etcd: EtcdServer,
    /// What [`TestCluster::restart_etcd_and_api`] starts the devcluster with again.
    restart: RestartSettings,
    _dir: TempDir,
}

/// The devcluster's settings, kept for a restart on the same address.
struct RestartSettings {
    compact_interval: Option<Duration>,
    bookmark_interval: Duration,
    auth: AuthConfig,
    control: Option<NodeControl>,
}

impl TestCluster {
    /// A devcluster without simulated nodes (or the external cluster).
    pub async fn start() -> TestCluster {
        TestCluster::builder().start().await
    }

    /// A builder for clusters with nodes or other knobs.
    pub fn builder() -> TestClusterBuilder {
        TestClusterBuilder::default()
    }

    /// Whether this is a devcluster started by the test (false for `FLOTILLA_TEST_KUBECONFIG`).
    pub fn is_devcluster(&self) -> bool {
        self.devcluster.is_some()
    }

    /// A client for the cluster, carrying this test's scope as its default namespace (which does
    /// not exist: name namespaces explicitly).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// This test's scope: the [`SCOPE_LABEL`](super::namespace::SCOPE_LABEL) value of the
    /// namespaces [`unique_namespace`] makes with [`TestCluster::client`].
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The `--namespace-selector` that covers this test's namespaces (what
    /// [`Fleet::coordinator`](super::fleet::Fleet::coordinator) adds on a shared cluster).
    pub fn scope_selector(&self) -> String {
        scope_selector(&self.scope)
    }

    /// A new namespace of this test, named `{prefix}-{random}` (see [`unique_namespace`]).
    ///
    /// # Panics
    /// When the namespace cannot be created.
    pub async fn namespace(&self, prefix: &str) -> String {
        unique_namespace(&self.client, prefix).await
    }

    /// A kubeconfig file for the cluster (for kubectl or processes the test starts): a copy of the
    /// cluster's, private to this test, whose contexts' default namespace is [`TestCluster::scope`].
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// etcd client URLs for the fleet (coordinators and workers). On a devcluster this is the etcd
    /// that also stores the API's objects (under another prefix); with an external cluster, an etcd
    /// started for the test.
    pub fn etcd_endpoints(&self) -> Vec<String> {
        self.etcd.endpoints()
    }

    /// Compacts the devcluster's etcd up to its current revision and returns that revision; `None`
    /// on an external cluster, which cannot be compacted on demand.
    ///
    /// # Panics
    /// When the devcluster fails to compact.
    pub async fn compact_now(&self) -> Option<i64> {
        let cluster = self.devcluster.as_ref()?;
        let revision = cluster
            .compact_now()
            .await
            .unwrap_or_else(|err| panic!("cannot compact devcluster: {err}"));
        Some(revision)
    }

    /// Restarts etcd and the devcluster with their data kept, as a control plane whose processes
    /// crashed and came back: the devcluster stops (open watches end, its listener closes), etcd is
    /// killed, stays down for `down`, starts again on its ports, and the devcluster starts again on
    /// its address, so every kubeconfig, client and etcd endpoint stays valid. Returns once both
    /// serve. `None` on an external cluster, which cannot be restarted.
    ///
    /// # Panics
    /// When either cannot be started again, or in RBAC mode (a restarted devcluster would make a new
    /// admin token and serving certificate, which the kubeconfig does not carry).
    pub async fn restart_etcd_and_api(&mut self, down: Duration) -> Option<()> {
        let old = self.devcluster.take()?;
        assert!(
            self.restart.auth.authorization_mode != AuthorizationMode::Rbac,
            "restart_etcd_and_api: not supported in RBAC mode"
        );
        let listen = old.addr();
        old.shutdown().await;
        self.etcd.kill();
        tokio::time::sleep(down).await;
        self.etcd
            .restart()
            .await
            .unwrap_or_else(|err| panic!("cannot restart etcd: {err}"));
        let config = DevClusterConfig {
            etcd_endpoints: self.etcd.endpoints(),
            listen,
            compact_interval: self.restart.compact_interval,
            bookmark_interval: self.restart.bookmark_interval,
            extension: self.restart.control.clone().map(control_router),
        };
        let cluster = DevCluster::start_with_auth(config, self.restart.auth.clone())
            .await
            .unwrap_or_else(|err| panic!("cannot restart devcluster on {listen}: {err}"));
        self.devcluster = Some(cluster);
        Some(())
    }

    /// Every authorization decision the devcluster recorded (RBAC mode), oldest first; `None` on an
    /// external cluster.
    pub fn authorization_decisions(&self) -> Option<Vec<Decision>> {
        self.devcluster
            .as_ref()
            .map(DevCluster::authorization_decisions)
    }

    /// The names of the simulated nodes (empty without a simulator).
    pub fn node_names(&self) -> Vec<String> {
        self.simulator
            .as_ref()
            .map(NodeSimulator::node_names)
            .unwrap_or_default()
    }

    /// Stops a simulated node's heartbeats and pod updates.
    ///
    /// # Panics
    /// Without a simulator, or for a name that is not a simulated node.
    pub fn stop_node(&self, name: &str) {
        let simulator = self.simulator.as_ref().unwrap_or_else(|| {
            panic!("stop_node({name}): the cluster was started without simulated nodes")
        });
        simulator
            .stop_node(name)
            .unwrap_or_else(|err| panic!("stop_node({name}): {err}"));
    }

    /// Resumes a stopped simulated node.
    ///
    /// # Panics
    /// Without a simulator, or for a name that is not a simulated node.
    pub fn start_node(&self, name: &str) {
        let simulator = self.simulator.as_ref().unwrap_or_else(|| {
            panic!("start_node({name}): the cluster was started without simulated nodes")
        });
        simulator
            .start_node(name)
            .unwrap_or_else(|err| panic!("start_node({name}): {err}"));
    }
}

/// Writes `file` to `dest` (JSON, which kubeconfig readers accept as YAML) with `scope` as the
/// default namespace of every context. [`Kubeconfig::read_from`] has made its file paths absolute, so
/// the copy works from anywhere.
///
/// # Panics
/// When the file cannot be encoded or written.
fn write_scoped(mut file: Kubeconfig, scope: &str, dest: &Path) {
    for named in &mut file.contexts {
        if let Some(context) = named.context.as_mut() {
            context.namespace = Some(scope.to_owned());
        }
    }
    let text = serde_json::to_string_pretty(&file)
        .unwrap_or_else(|err| panic!("cannot encode a kubeconfig: {err}"));
    std::fs::write(dest, text)
        .unwrap_or_else(|err| panic!("cannot write kubeconfig {}: {err}", dest.display()));
}

/// A client for the cluster a kubeconfig file names.
///
/// # Panics
/// When the file cannot be read or used.
pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|err| panic!("cannot read kubeconfig {}: {err}", kubeconfig.display()));
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap_or_else(|err| panic!("cannot use kubeconfig {}: {err}", kubeconfig.display()));
    kube::Client::try_from(config)
        .unwrap_or_else(|err| panic!("cannot build a client from {}: {err}", kubeconfig.display()))
}
