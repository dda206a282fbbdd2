//! The flags every worker binary shares (`flotilla worker`, custom controller binaries), named like
//! kube-controller-manager's where the meaning is the same, and their conversion to a [`WorkerConfig`].

use flotilla_common::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use flotilla_common::{SessionConfig, SharedFlags, kube_config};
use rand::Rng;

use flotilla_sdk::DynController;

use super::config::WorkerConfig;
use super::worker::check_controllers;

/// Shared worker flags.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerFlags {
    /// --kubeconfig, --etcd-*, --fleet, TLS, --log-format, tracing and --check-config, as the
    /// coordinator has them.
    #[command(flatten)]
    pub shared: SharedFlags,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, default_value = "0.0.0.0:10258")]
    pub metrics_listen: SocketAddr,
    /// Kubernetes API requests per second of each controller in this worker, as kube-controller-manager's
    /// flag means (0 = unlimited).
    #[arg(long, default_value_t = 20.0)]
    pub kube_api_qps: f32,
    /// Kubernetes API burst of each controller in this worker.
    #[arg(long, default_value_t = 30)]
    pub kube_api_burst: u32,
    /// This worker's identity in the fleet (default: hostname plus a random suffix).
    #[arg(long)]
    pub worker_id: Option<String>,
    /// TTL of the worker's etcd lease; its items are freed this long after it dies.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub lease_ttl: Duration,
    /// How often the lease is renewed (at most a third of the TTL).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub lease_renew_interval: Duration,
    /// How long renewals may fail before the worker declares its lease lost and cancels everything it
    /// runs (default: the TTL minus one renew interval).
    #[arg(long, value_parser = parse_duration)]
    pub lease_renew_deadline: Option<Duration>,
    /// How long SIGTERM lets running reconciles finish before cancelling them.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace_period: Duration,
    /// Test and benchmark aid: append one JSON line per reconcile start and end (key, controller,
    /// worker, start/end ns, the primary's resourceVersion) to this file, for checking that no key was
    /// reconciled twice at once and none was lost.
    #[arg(long, hide = true)]
    pub reconcile_journal: Option<PathBuf>,
}

impl WorkerFlags {
    /// The configuration these flags describe (loads the Kubernetes client configuration).
    ///
    /// # Errors
    /// When no Kubernetes configuration can be loaded.
    pub async fn to_config(&self) -> anyhow::Result<WorkerConfig> {
        let kube = kube_config(self.shared.kubeconfig.as_deref()).await?;
        self.config_with(kube)
    }

    /// What `--check-config` checks, and start-up before it connects anywhere: the configuration the
    /// flags describe is valid and `controllers` can run together. A `--kubeconfig` file is loaded;
    /// without one, the in-cluster configuration is the pod's environment rather than a flag, so it is
    /// not looked for.
    ///
    /// # Errors
    /// The first invalid flag, an unreadable kubeconfig, or unfit controllers.
    pub async fn check(&self, controllers: &[DynController]) -> anyhow::Result<()> {
        let kube = match &self.shared.kubeconfig {
            Some(path) => kube_config(Some(path)).await?,
            None => kube::Config::new(http::Uri::from_static("https://kubernetes.default.svc")),
        };
        self.config_with(kube)?.validate()?;
        check_controllers(controllers)?;
        Ok(())
    }

    /// # Errors
    /// When an `--etcd-*` flag is incomplete or names an unreadable file.
    fn config_with(&self, kube: kube::Config) -> anyhow::Result<WorkerConfig> {
        let worker_id = self.worker_id.clone().unwrap_or_else(default_worker_id);
        let mut config = WorkerConfig::new(&worker_id, &self.shared.fleet, Vec::new(), kube);
        config.etcd = self.shared.etcd.client_config()?;
        config.kube_api_qps = self.kube_api_qps;
        config.kube_api_burst = self.kube_api_burst;
        config.session = SessionConfig {
            ttl: self.lease_ttl,
            renew_interval: self.lease_renew_interval,
            renew_deadline: self
                .lease_renew_deadline
                .unwrap_or_else(|| self.lease_ttl.saturating_sub(self.lease_renew_interval)),
        };
        config.shutdown_grace_period = self.shutdown_grace_period;
        config.metrics_listen = Some(self.metrics_listen);
        config.tls = self.shared.tls.client()?;
        config.reconcile_journal = self.reconcile_journal.clone();
        Ok(config)
    }
}

/// The name of the `--concurrent-<controller>-syncs` flag of a controller.
pub fn concurrency_flag(controller: &str) -> String {
    format!("concurrent-{controller}-syncs")
}

/// The concurrency flag `flag` (e.g. [`concurrency_flag`]`(controller)`) of `controller`, defaulting
/// to `default`.
pub fn concurrency_arg(controller: &str, flag: &str, default: u32) -> clap::Arg {
    clap::Arg::new(flag.to_owned())
        .long(flag.to_owned())
        .value_parser(clap::value_parser!(u32).range(1..))
        .default_value(default.to_string())
        .help(format!(
            "How many {controller} items this worker reconciles at once"
        ))
}

/// The value of the concurrency flag `flag` (see [`concurrency_arg`]), if the command has it.
pub fn concurrency_value(matches: &clap::ArgMatches, flag: &str) -> Option<u32> {
    matches.try_get_one::<u32>(flag).ok().flatten().copied()
}

/// `<hostname>-<5 random characters>`: unique per process even when pods share a hostname. Lowercased,
/// with characters a DNS-1123 subdomain cannot hold turned into `-`, since the coordinator accepts only
/// such worker ids.
pub fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| {
            h.trim()
                .chars()
                .take(240)
                .map(|c| match c.to_ascii_lowercase() {
                    c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
                    _ => '-',
                })
                .collect::<String>()
                .trim_matches(|c| c == '-' || c == '.')
                .to_owned()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(5)
        .map(|b| char::from(b).to_ascii_lowercase())
        .collect();
    format!("{host}-{suffix}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: WorkerFlags,
    }

    #[test]
    fn defaults_match_kube_controller_manager_and_the_design() {
        let cli =
            Cli::try_parse_from(["w", "--etcd-endpoints", "http://a:2379,http://b:2379"]).unwrap();
        assert_eq!(
            cli.flags.shared.etcd.endpoints,
            ["http://a:2379", "http://b:2379"]
        );
        assert_eq!(cli.flags.shared.etcd.prefix, "/flotilla");
        assert_eq!(cli.flags.kube_api_qps, 20.0);
        assert_eq!(cli.flags.kube_api_burst, 30);
        assert_eq!(cli.flags.lease_ttl, Duration::from_secs(5));
        assert_eq!(cli.flags.lease_renew_interval, Duration::from_secs(1));
        assert_eq!(cli.flags.shutdown_grace_period, Duration::from_secs(10));
    }

    fn controller(name: &str) -> DynController {
        async fn noop(
            _: flotilla_sdk::Request<k8s_openapi::api::core::v1::ConfigMap>,
            _: flotilla_sdk::Context,
        ) -> Result<flotilla_sdk::Action, std::io::Error> {
            Ok(flotilla_sdk::Action::await_change())
        }
        flotilla_sdk::Controller::new(name).reconcile(noop).into()
    }

    fn check(args: &[&str], controllers: &[DynController]) -> anyhow::Result<()> {
        let argv = [
            "w",
            "--etcd-endpoints",
            "http://a:2379",
            "--insecure-plaintext",
            "--check-config",
        ];
        let cli = Cli::try_parse_from(argv.iter().chain(args)).unwrap();
        assert!(cli.flags.shared.check_config);
        futures::executor::block_on(cli.flags.check(controllers))
    }

    #[test]
    fn check_config_accepts_the_defaults_without_a_cluster_or_etcd() {
        check(&[], &[controller("a")]).unwrap();
    }

    #[test]
    fn check_config_refuses_what_start_up_refuses() {
        let err = check(&["--worker-id", "Not_A_Subdomain"], &[controller("a")]).unwrap_err();
        assert!(err.to_string().contains("--worker-id"), "{err}");
        let err = check(
            &["--lease-ttl", "2s", "--lease-renew-interval", "2s"],
            &[controller("a")],
        );
        assert!(err.is_err(), "a renew interval as long as the TTL");
        let err = check(
            &["--etcd-keyfile", "/nonexistent/etcd.key"],
            &[controller("a")],
        )
        .unwrap_err();
        assert!(err.to_string().contains("--etcd-certfile"), "{err}");
        let err = check(&["--etcd-prefix", "flotilla"], &[controller("a")]).unwrap_err();
        assert!(err.to_string().contains("--etcd-prefix"), "{err}");
        let err = check(&[], &[]).unwrap_err();
        assert!(err.to_string().contains("no controllers"), "{err}");
        let err = check(&[], &[controller("a"), controller("a")]).unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
        let err = check(
            &["--kubeconfig", "/nonexistent/kubeconfig"],
            &[controller("a")],
        );
        assert!(err.is_err(), "an unreadable kubeconfig");
    }

    #[test]
    fn check_config_refuses_neither_tls_flags_nor_insecure_plaintext_and_says_why() {
        let cli = Cli::try_parse_from(["w", "--etcd-endpoints", "http://a:2379"]).unwrap();
        let err = futures::executor::block_on(cli.flags.check(&[controller("a")])).unwrap_err();
        assert!(err.to_string().contains("--insecure-plaintext"), "{err}");
    }

    #[test]
    fn the_default_worker_id_is_unique_per_call() {
        assert_ne!(default_worker_id(), default_worker_id());
        assert_eq!(
            flotilla_common::validate_subdomain(&default_worker_id()),
            Ok(()),
            "the coordinator would refuse it"
        );
    }
}
