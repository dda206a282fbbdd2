//! `flotilla devcluster`: the local Kubernetes API on etcd (plus, optionally, simulated nodes) for
//! the demo and for manual testing. Runs until SIGINT/SIGTERM, then shuts down gracefully.
//!
//! Served over HTTPS with `--authorization-mode RBAC` (kubectl sends a kubeconfig's token only to a
//! TLS server) or when asked (`--scheme https`, `--tls-cert-file`), plain HTTP otherwise; the
//! kubeconfig it writes names the scheme and, for HTTPS, carries the CA.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use flotilla_devcluster::{
    AuthConfig, AuthorizationMode, DevCluster, DevClusterConfig, EtcdServer, NodeControl,
    NodeSimulator, Serving, SimConfig, control_router,
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
    /// Whether the node simulator gives each node its pod range (`spec.podCIDR`) at registration.
    /// `--assign-pod-cidrs=false` registers nodes without one, for a node-ipam controller
    /// (`--allocate-node-cidrs`) to assign; their pods stay Pending until it does.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub assign_pod_cidrs: bool,
    /// How requests are authorized (kube-apiserver's flag). `AlwaysAllow` keeps the demo's
    /// token-less admin access; `RBAC` authorizes with the stored Roles and bindings as upstream does,
    /// creates upstream's bootstrap ClusterRoles, and writes a kubeconfig with an admin token.
    #[arg(long, value_enum, default_value_t = Mode::AlwaysAllow)]
    pub authorization_mode: Mode,
    /// A static token file in kube-apiserver's `--token-auth-file` CSV format
    /// (`token,user,uid,"group1,group2"`).
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// How the API is served. `auto`: HTTPS with `--authorization-mode RBAC` or `--tls-cert-file`
    /// (kubectl sends the kubeconfig's token only over TLS), plain HTTP otherwise (every request is
    /// the administrator's, so TLS would protect nothing, and clients that dial `http://` keep
    /// working).
    /// `https` without certificate files generates a CA and a serving certificate at start (SANs
    /// 127.0.0.1, ::1, localhost and the --listen address); the kubeconfig carries the CA. The
    /// environment variable reaches the devclusters `flotilla up` and `flotilla bench` start.
    #[arg(long, value_enum, env = "FLOTILLA_DEVCLUSTER_SCHEME", default_value_t = Scheme::Auto)]
    pub scheme: Scheme,
    /// The serving certificate chain (PEM, leaf first), as kube-apiserver's flag; implies HTTPS.
    /// The kubeconfig carries its certificates as the CA, so a self-signed certificate (or a chain
    /// ending with its root) needs nothing else.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `--tls-cert-file` (PEM: PKCS#8, PKCS#1 or SEC1), as kube-apiserver's flag.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
}

/// `--scheme` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// HTTPS with RBAC or certificate files, plain HTTP otherwise.
    Auto,
    /// Plain HTTP, even with RBAC (kubectl then sends no token: it is `system:anonymous`).
    Http,
    /// HTTPS.
    Https,
}

impl Args {
    /// What `--scheme` and the certificate flags ask for.
    ///
    /// # Errors
    /// `--scheme http` with certificate files.
    pub fn serving(&self) -> anyhow::Result<Serving> {
        let files = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert_file), Some(key_file)) => Some(Serving::HttpsFiles {
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
            }),
            _ => None,
        };
        Ok(match (self.scheme, files) {
            (Scheme::Http, Some(_)) => {
                anyhow::bail!("--scheme http cannot serve --tls-cert-file: drop one of them")
            }
            (Scheme::Http, None) => Serving::Http,
            (_, Some(files)) => files,
            (Scheme::Auto, None) => Serving::Auto,
            (Scheme::Https, None) => Serving::HttpsGenerated,
        })
    }
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
        assign_pod_cidrs: args.assign_pod_cidrs,
        ..SimConfig::default()
    };
    sim_config.validate()?;
    let serving = args.serving()?;

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
    let cluster = DevCluster::start_serving(
        DevClusterConfig {
            etcd_endpoints,
            listen: args.listen,
            compact_interval: args.compact_interval,
            bookmark_interval: args.bookmark_interval,
            extension: (args.nodes > 0).then(|| control_router(control.clone())),
        },
        auth,
        serving,
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let argv = std::iter::once("devcluster").chain(extra.iter().copied());
        Cli::try_parse_from(argv).map(|cli| cli.args)
    }

    #[test]
    fn serving_is_auto_by_default_and_https_with_certificate_files() {
        assert_eq!(parse(&[]).unwrap().serving().unwrap(), Serving::Auto);
        let files = parse(&["--tls-cert-file", "/c", "--tls-private-key-file", "/k"]).unwrap();
        assert_eq!(
            files.serving().unwrap(),
            Serving::HttpsFiles {
                cert_file: "/c".into(),
                key_file: "/k".into()
            }
        );
        let https = parse(&["--scheme", "https"]).unwrap();
        assert_eq!(https.serving().unwrap(), Serving::HttpsGenerated);
        let http = parse(&["--scheme", "http", "--authorization-mode", "RBAC"]).unwrap();
        assert_eq!(http.serving().unwrap(), Serving::Http);
    }

    #[test]
    fn simulated_nodes_get_their_pod_range_unless_told_to_leave_it_to_node_ipam() {
        assert!(parse(&[]).unwrap().assign_pod_cidrs);
        for off in [
            &["--assign-pod-cidrs=false"][..],
            &["--assign-pod-cidrs", "false"],
        ] {
            assert!(!parse(off).unwrap().assign_pod_cidrs);
        }
    }

    #[test]
    fn certificate_flags_go_together_and_not_with_plain_http() {
        assert!(parse(&["--tls-cert-file", "/c"]).is_err());
        assert!(parse(&["--tls-private-key-file", "/k"]).is_err());
        let both = ["--tls-cert-file", "/c", "--tls-private-key-file", "/k"];
        let http = parse(&[&both[..], &["--scheme", "http"]].concat()).unwrap();
        assert!(http.serving().is_err());
    }
}
