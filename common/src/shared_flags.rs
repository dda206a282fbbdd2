//! The flags the coordinator and every worker binary share, flattened into both (`#[command(flatten)]`)
//! so their names, defaults and help cannot drift apart: where the cluster and etcd are, which fleet,
//! mutual TLS, logging, tracing and `--check-config`.
//!
//! What looks shared but is not stays with each role: `--metrics-listen` (7451 on a coordinator, 10258
//! on a worker, so both run on one host) and the leases (`--leader-elect-*` for the coordinator's
//! election, `--lease-*` for a worker's registration).

use std::path::PathBuf;

use crate::tls::TlsFlags;
use crate::{EtcdFlags, LogFormat, TraceFlags};

/// Flags of every Flotilla process that joins a fleet.
#[derive(Debug, Clone, clap::Args)]
pub struct SharedFlags {
    /// Kubeconfig file; without it: in-cluster configuration, then $KUBECONFIG / ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// etcd for leadership, shard ownership and workers' registration (--etcd-endpoints, TLS, user,
    /// --etcd-prefix).
    #[command(flatten)]
    pub etcd: EtcdFlags,
    /// The fleet: its etcd keys live under <--etcd-prefix>/<fleet>/.
    #[arg(long, default_value = "default")]
    pub fleet: String,
    /// Mutual TLS between workers and coordinators (--tls-cert, --tls-key, --tls-client-ca,
    /// --tls-server-name), or --insecure-plaintext; one of the two is required.
    #[command(flatten)]
    pub tls: TlsFlags,
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// OpenTelemetry trace export (--otlp-endpoint, --otlp-protocol, --trace-sampler, --trace-sample-ratio).
    #[command(flatten)]
    pub tracing: TraceFlags,
    /// Check the flags as start-up does, print `configuration ok` and exit, touching neither etcd nor
    /// the Kubernetes API (a --kubeconfig file is read); exit non-zero with the error otherwise.
    #[arg(long)]
    pub check_config: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: SharedFlags,
    }

    #[test]
    fn the_defaults_are_the_ones_the_chart_and_readme_document() {
        let cli = Cli::try_parse_from(["p", "--etcd-endpoints", "http://e:2379"]).unwrap();
        assert_eq!(cli.flags.kubeconfig, None);
        assert_eq!(cli.flags.fleet, "default");
        assert_eq!(cli.flags.etcd.prefix, crate::DEFAULT_ETCD_PREFIX);
        assert_eq!(cli.flags.log_format, LogFormat::Text);
        assert!(!cli.flags.check_config);
        assert!(!cli.flags.tls.insecure_plaintext);
    }

    #[test]
    fn every_shared_flag_keeps_its_kube_controller_manager_style_name() {
        let cli = Cli::try_parse_from([
            "p",
            "--kubeconfig",
            "/k",
            "--etcd-endpoints",
            "http://e:2379",
            "--fleet",
            "blue",
            "--insecure-plaintext",
            "--log-format",
            "json",
            "--otlp-endpoint",
            "http://o:4317",
            "--check-config",
        ])
        .unwrap();
        assert_eq!(cli.flags.kubeconfig, Some(PathBuf::from("/k")));
        assert_eq!(cli.flags.fleet, "blue");
        assert!(cli.flags.tls.insecure_plaintext);
        assert_eq!(cli.flags.log_format, LogFormat::Json);
        assert_eq!(
            cli.flags.tracing.otlp_endpoint.as_deref(),
            Some("http://o:4317")
        );
        assert!(cli.flags.check_config);
    }
}
