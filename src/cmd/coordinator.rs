//! `flotilla coordinator`: campaign for leadership of a fleet and, while leading, run its informers,
//! workqueue and dispatch.

use std::net::SocketAddr;
use std::time::Duration;

use flotilla_common::{SharedFlags, kube_config, shutdown_signal};
use flotilla_coordinator::{Coordinator, CoordinatorConfig, NamespaceScope, default_identity};

use flotilla_common::parse_duration;

/// Flags of `flotilla coordinator`; names follow kube-controller-manager where the meaning is the same.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// --kubeconfig, --etcd-*, --fleet, TLS (workers must present a certificate of --tls-client-ca
    /// naming their worker id), --log-format, tracing and --check-config, as every worker has them.
    #[command(flatten)]
    pub shared: SharedFlags,
    /// Identity in the election (default: hostname plus a random suffix).
    #[arg(long)]
    pub id: Option<String>,
    /// gRPC listen address.
    #[arg(long, default_value = "0.0.0.0:7450")]
    pub listen: SocketAddr,
    /// Address workers dial when this coordinator leads (default: the listen address; loopback if it is a wildcard).
    #[arg(long)]
    pub advertise: Option<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:7451")]
    pub metrics_listen: SocketAddr,
    /// Number of shards; fixed for the life of the fleet.
    #[arg(long, default_value_t = 256)]
    pub shards: u32,
    /// Leader lease TTL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// A leader that cannot renew within this steps down.
    #[arg(long, default_value = "4s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often the leader lease is renewed.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
    /// Keep informers synced while following, so a takeover only re-enqueues.
    #[arg(long)]
    pub hot_standby: bool,
    /// How long a worker may stay disconnected while its lease lives before its lease is revoked.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub worker_reconnect_grace: Duration,
    /// Read-your-writes bound: dispatch a key again after this even if its writes were not observed.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub expectations_timeout: Duration,
    /// A worker stream that sends no Hello within this is dropped.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub worker_hello_timeout: Duration,
    /// The most a worker may advertise for one controller (--concurrent-*-syncs); a Hello above it is refused.
    #[arg(long, default_value_t = 10_000)]
    pub max_controller_concurrency: u32,
    /// Refuse a worker whose controllers name more distinct kinds than this together (each kind is
    /// an informer on the API server).
    #[arg(long, default_value_t = 128)]
    pub max_worker_kinds: usize,
    /// Retire a controller (drop its queue, delete its spec, stop its informers) once no live worker has run it for this long.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub controller_retire_after: Duration,
    /// Stop the informer of a kind the API server answers only 404 for after this long (it shows in status).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub unserved_kind_timeout: Duration,
    /// Send Assigns to a worker in messages of at most this many bytes; an item bigger than this alone
    /// goes without its prefetched objects, which the worker then reads through the Cache service.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub dispatch_batch_bytes: usize,
    /// Say not ready when queued keys have gone to no worker for this long while leading, or no leader
    /// has been seen for this long while following.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub dispatch_stall_timeout: Duration,
    /// Bytes of Cache List answers built or being sent at once (like kube-apiserver's
    /// --max-requests-inflight, in bytes: what bounds the coordinator's memory); a List beyond it waits
    /// up to --cache-list-inflight-wait, then is refused with RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 256 * 1024 * 1024)]
    pub max_cache_list_inflight_bytes: usize,
    /// The share of --max-cache-list-inflight-bytes one worker may hold, so one worker listing hard
    /// leaves room for the others.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub max_cache_list_inflight_bytes_per_worker: usize,
    /// How long a Cache List waits for room under those bounds before it is refused.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub cache_list_inflight_wait: Duration,
    /// A leader whose Kubernetes API has not answered for this long stops dispatching, says not ready
    /// and resigns so a coordinator that reaches the API leads; a coordinator does not campaign while
    /// its API has not answered for this long.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub kube_api_unreachable_timeout: Duration,
    /// Cover only these namespaces (comma-separated): one list+watch per namespace per namespaced kind;
    /// cluster-scoped kinds stay cluster-wide. Several fleets can so share one cluster.
    #[arg(long, value_delimiter = ',', conflicts_with = "namespace_selector")]
    pub namespaces: Vec<String>,
    /// Cover only namespaces whose labels match this selector (e.g. `team=a`); namespaced kinds are
    /// watched cluster-wide and filtered on arrival (the API server cannot filter by a namespace's labels).
    #[arg(long)]
    pub namespace_selector: Option<String>,
}

impl Args {
    /// The coordinator configuration these flags describe.
    ///
    /// # Errors
    /// When `--namespaces` or `--namespace-selector` is malformed, or both are given; when an
    /// `--etcd-*` flag is incomplete or names an unreadable file.
    pub fn config(&self) -> anyhow::Result<CoordinatorConfig> {
        let mut config = CoordinatorConfig::new(&self.shared.fleet, Vec::new());
        config.etcd = self.shared.etcd.client_config()?;
        config.id = self
            .id
            .clone()
            .unwrap_or_else(|| default_identity("coordinator"));
        config.kubeconfig = self.shared.kubeconfig.clone();
        config.listen = self.listen;
        config.advertise = self.advertise.clone();
        config.metrics_listen = self.metrics_listen;
        config.shards = self.shards;
        config.lease_duration = self.leader_elect_lease_duration;
        config.renew_deadline = self.leader_elect_renew_deadline;
        config.retry_period = self.leader_elect_retry_period;
        config.hot_standby = self.hot_standby;
        config.worker_reconnect_grace = self.worker_reconnect_grace;
        config.expectations_timeout = self.expectations_timeout;
        config.hello_timeout = self.worker_hello_timeout;
        config.max_controller_concurrency = self.max_controller_concurrency;
        config.max_worker_kinds = self.max_worker_kinds;
        config.controller_retire_after = self.controller_retire_after;
        config.unserved_kind_timeout = self.unserved_kind_timeout;
        config.dispatch_batch_bytes = self.dispatch_batch_bytes;
        config.dispatch_stall_timeout = self.dispatch_stall_timeout;
        config.max_cache_list_inflight_bytes = self.max_cache_list_inflight_bytes;
        config.max_cache_list_inflight_bytes_per_worker =
            self.max_cache_list_inflight_bytes_per_worker;
        config.cache_list_inflight_wait = self.cache_list_inflight_wait;
        config.kube_api_unreachable_timeout = self.kube_api_unreachable_timeout;
        config.namespaces =
            NamespaceScope::from_flags(&self.namespaces, self.namespace_selector.as_deref())?;
        config.tls = self.shared.tls.server()?;
        Ok(config)
    }

    /// What `--check-config` checks, and start-up before it connects anywhere: the configuration is
    /// valid, and a `--kubeconfig` file loads (without one, the in-cluster configuration is the pod's
    /// environment rather than a flag, so it is not looked for).
    ///
    /// # Errors
    /// The first invalid flag, or an unreadable kubeconfig.
    pub async fn check(&self) -> anyhow::Result<()> {
        self.config()?.validate()?;
        self.shared.tracing.validate()?;
        if let Some(path) = &self.shared.kubeconfig {
            kube_config(Some(path)).await?;
        }
        Ok(())
    }
}

/// Runs a coordinator until SIGINT/SIGTERM, then steps down (resigning leadership at once); exits with
/// an error if its leadership loop stops on its own.
pub async fn run(args: Args) -> anyhow::Result<()> {
    if args.shared.check_config {
        args.check().await?;
        println!("configuration ok");
        return Ok(());
    }
    let config = args.config()?;
    let identity = flotilla_common::ServiceIdentity::new("flotilla-coordinator", &config.id);
    let telemetry =
        flotilla_common::init_telemetry(args.shared.log_format, &args.shared.tracing, &identity)?;
    args.shared.tls.warn_if_plaintext();
    let coordinator = Coordinator::start(config).await?;
    let failed = tokio::select! {
        () = shutdown_signal() => None,
        reason = coordinator.failed() => Some(reason),
    };
    tracing::info!("shutting down");
    coordinator.shutdown().await;
    // The spans of the last reconciles dispatched go out before the process exits.
    telemetry.shutdown().await;
    match failed {
        // Exit non-zero: a coordinator whose leadership loop died must be restarted, not left running.
        Some(reason) => anyhow::bail!("{reason}"),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(extra: &[&str]) -> Result<Cli, clap::Error> {
        let mut argv = vec![
            "coordinator",
            "--etcd-endpoints",
            "http://e:2379",
            "--insecure-plaintext",
        ];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv)
    }

    #[tokio::test]
    async fn check_config_refuses_what_start_up_refuses_and_accepts_the_defaults() {
        parse(&["--check-config"])
            .unwrap()
            .args
            .check()
            .await
            .unwrap();
        let err = parse(&["--leader-elect-renew-deadline", "6s"])
            .unwrap()
            .args
            .check()
            .await
            .unwrap_err();
        assert!(err.to_string().contains("--leader-elect"), "{err}");
        let err = parse(&["--kubeconfig", "/nonexistent/kubeconfig"])
            .unwrap()
            .args
            .check()
            .await;
        assert!(err.is_err(), "an unreadable kubeconfig");
    }

    #[tokio::test]
    async fn check_config_refuses_incomplete_etcd_flags_naming_them() {
        let err = parse(&["--etcd-username", "flotilla"])
            .unwrap()
            .args
            .check()
            .await
            .unwrap_err();
        assert!(err.to_string().contains("--etcd-password-file"), "{err}");
        let err = parse(&["--etcd-cafile", "/nonexistent/ca.crt"])
            .unwrap()
            .args
            .check()
            .await
            .unwrap_err();
        assert!(err.to_string().contains("--etcd-cafile"), "{err}");
        let config = parse(&["--etcd-prefix", "/tenants/a"])
            .unwrap()
            .args
            .config()
            .unwrap();
        assert_eq!(
            config.etcd.fleet_keys("default").root(),
            "/tenants/a/default/"
        );
    }

    #[tokio::test]
    async fn check_config_refuses_neither_tls_flags_nor_insecure_plaintext_and_says_why() {
        let cli =
            Cli::try_parse_from(["coordinator", "--etcd-endpoints", "http://e:2379"]).unwrap();
        let err = cli.args.check().await.unwrap_err();
        assert!(err.to_string().contains("--insecure-plaintext"), "{err}");
    }

    #[test]
    fn namespaces_is_a_comma_list() {
        let config = parse(&["--namespaces", "team-a,team-b"])
            .unwrap()
            .args
            .config()
            .unwrap();
        assert_eq!(
            config.namespaces,
            NamespaceScope::Names(["team-a".to_owned(), "team-b".to_owned()].into())
        );
    }

    #[test]
    fn without_either_flag_every_namespace_is_covered() {
        let config = parse(&[]).unwrap().args.config().unwrap();
        assert!(config.namespaces.is_all());
    }

    #[test]
    fn namespaces_and_namespace_selector_are_mutually_exclusive() {
        let err = parse(&["--namespaces", "a", "--namespace-selector", "team=a"])
            .err()
            .expect("clap must refuse both flags");
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn a_malformed_namespace_selector_is_refused_naming_the_flag() {
        let err = parse(&["--namespace-selector", "team in (a"])
            .unwrap()
            .args
            .config()
            .unwrap_err();
        assert!(err.to_string().contains("--namespace-selector"), "{err}");
    }
}
