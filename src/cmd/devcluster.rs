//! `flotilla devcluster`: the local Kubernetes API on etcd (plus, optionally, simulated nodes) for
//! the demo and for manual testing. Runs until SIGINT/SIGTERM, then shuts down gracefully.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use flotilla_devcluster::{
    AuthConfig, AuthorizationMode, DevCluster, DevClusterConfig, EtcdServer, NodeControl,
    NodeSimulator, SimConfig, control_router,
};

use flotilla_common::parse_duration;

/// Flags of `flotilla devcluster`.
#[derive(clap::Args)]
pub struct Args {
    /// etcd client URLs, comma-separated. When absent, an embedded etcd is started on free loopback
    /// ports with its data in a temporary directory (needs the Debian package etcd-server) and is
    /// removed on exit.
    #[arg(long, env = "FLOTILLA_ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// Address the API server listens on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// How many simulated nodes (sim-node-0..N-1) to run; 0 runs none.
    #[arg(long, default_value_t = 0)]
    pub nodes: usize,
    /// Where to write a kubeconfig for the cluster [default: <tmp>/flotilla-devcluster-<port>.kubeconfig].
    #[arg(long)]
    pub write_kubeconfig: Option<PathBuf>,
    /// Compact etcd history older than this, periodically (e.g. 5m). Unset: never compact.
    #[arg(long, value_parser = parse_duration)]
    pub compact_interval: Option<Duration>,
    /// How often watches that asked for bookmarks get one.
    #[arg(long, value_parser = parse_duration, default_value = "1m")]
    pub bookmark_interval: Duration,
    /// Delay before a bound pod is reported Running and Ready by the node simulator.
    #[arg(long, value_parser = parse_duration, default_value = "100ms")]
    pub pod_ready_delay: Duration,
    /// How long pods with restartPolicy Never/OnFailure run before they are reported Succeeded.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub job_pod_duration: Duration,
    /// How requests are authorized (kube-apiserver's flag). `AlwaysAllow` keeps the demo's
    /// token-less admin access; `RBAC` authorizes with the stored Roles and bindings as upstream does,
    /// creates upstream's bootstrap ClusterRoles, and writes a kubeconfig with an admin token.
    #[arg(long, value_enum, default_value_t = Mode::AlwaysAllow)]
    pub authorization_mode: Mode,
    /// A static token file in kube-apiserver's `--token-auth-file` CSV format
    /// (`token,user,uid,"group1,group2"`).
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
}

/// `--authorization-mode` values, spelled as kube-apiserver spells them.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Allow every request.
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
    /// Upstream's RBAC authorizer.
    #[value(name = "RBAC")]
    Rbac,
}

/// Runs `flotilla devcluster` until interrupted.
///
/// # Errors
/// When etcd cannot be started or reached, the address cannot be bound, the kubeconfig cannot be
/// written, or the simulated nodes cannot be registered.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let sim_config = SimConfig {
        nodes: args.nodes,
        pod_ready_delay: args.pod_ready_delay,
        job_pod_duration: args.job_pod_duration,
        ..SimConfig::default()
    };
    sim_config.validate()?;

    let embedded = if args.etcd_endpoints.is_empty() {
        let etcd = EtcdServer::start()
            .await
            .context("cannot start the embedded etcd")?;
        println!(
            "embedded etcd at {} (log: {})",
            etcd.endpoints().join(","),
            etcd.log_path().display()
        );
        Some(etcd)
    } else {
        None
    };
    let etcd_endpoints = match &embedded {
        Some(etcd) => etcd.endpoints(),
        None => args.etcd_endpoints.clone(),
    };

    let control = NodeControl::new();
    let auth = AuthConfig {
        authorization_mode: match args.authorization_mode {
            Mode::AlwaysAllow => AuthorizationMode::AlwaysAllow,
            Mode::Rbac => AuthorizationMode::Rbac,
        },
        token_auth_file: args.token_auth_file.clone(),
    };
    let cluster = DevCluster::start_with_auth(
        DevClusterConfig {
            etcd_endpoints,
            listen: args.listen,
            compact_interval: args.compact_interval,
            bookmark_interval: args.bookmark_interval,
            extension: (args.nodes > 0).then(|| control_router(control.clone())),
        },
        auth,
    )
    .await
    .context("cannot start the devcluster API server")?;

    let kubeconfig = args.write_kubeconfig.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "flotilla-devcluster-{}.kubeconfig",
            cluster.addr().port()
        ))
    });
    cluster
        .write_kubeconfig(&kubeconfig)
        .with_context(|| format!("cannot write the kubeconfig to {}", kubeconfig.display()))?;

    let simulator = if args.nodes > 0 {
        let client = cluster
            .client()
            .await
            .context("cannot build a client for the devcluster")?;
        let simulator = NodeSimulator::start(client, sim_config)
            .await
            .context("cannot start the node simulator")?;
        control.attach(simulator.handle());
        Some(simulator)
    } else {
        None
    };

    println!("devcluster serving at {}", cluster.url());
    println!("kubeconfig written to {}", kubeconfig.display());
    if let Some(simulator) = &simulator {
        println!("simulated nodes: {}", simulator.node_names().join(", "));
    }
    println!("press Ctrl-C to stop");

    let signal = shutdown_signal().await;
    println!("received {signal}, shutting down");
    if let Some(simulator) = simulator {
        simulator.shutdown().await;
    }
    cluster.shutdown().await;
    if let Some(etcd) = embedded {
        etcd.stop();
    }
    Ok(())
}

/// Waits for SIGINT or SIGTERM and names the one that came. If a handler cannot be installed, only
/// the other signal is awaited.
pub async fn shutdown_signal() -> &'static str {
    let interrupt = async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "SIGINT",
            Err(_) => std::future::pending().await,
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
                "SIGTERM"
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        name = interrupt => name,
        name = terminate => name,
    }
}
