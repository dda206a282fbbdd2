//! The worker's configuration: plain values with documented defaults, validated once at start-up.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use flotilla_common::tls::ClientTransport;
use flotilla_common::{EtcdClientConfig, SessionConfig};

/// Errors of an invalid configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value is out of range.
    #[error("invalid worker config: {0}")]
    Invalid(String),
}

/// Everything a worker needs to run.
#[derive(Clone)]
pub struct WorkerConfig {
    /// This worker's identity in the fleet; unique among live workers.
    pub worker_id: String,
    /// The fleet's name: its etcd keys live under `<etcd prefix>/<fleet>/`.
    pub fleet: String,
    /// etcd: endpoints, TLS, user, and the key prefix.
    pub etcd: EtcdClientConfig,
    /// How reconciles reach the Kubernetes API.
    pub kube: kube::Config,
    /// Requests per second to the Kubernetes API of each controller of this worker, shared by that
    /// controller's reconciles: kube-controller-manager's `--kube-api-qps`, which also applies per
    /// controller. Default 20, as there; 0 means unlimited.
    pub kube_api_qps: f32,
    /// Requests each controller's limiter lets through at once after a quiet period. Default 30, like
    /// kube-controller-manager's `--kube-api-burst`.
    pub kube_api_burst: u32,
    /// The worker's etcd lease (default TTL 5 s, renewed every second).
    pub session: SessionConfig,
    /// How long a graceful shutdown lets running reconciles finish before cancelling them. Default 10 s:
    /// within Kubernetes' default 30 s termination grace, leaving time to revoke the lease.
    pub shutdown_grace_period: Duration,
    /// Where `/metrics`, `/healthz` and `/readyz` are served; `None` serves nothing (in-process tests).
    pub metrics_listen: Option<SocketAddr>,
    /// First pause before reconnecting to the same leader. Default 100 ms.
    pub reconnect_min: Duration,
    /// Longest pause between reconnect attempts. Default 2 s: a restarting leader is found quickly
    /// without hammering it.
    pub reconnect_max: Duration,
    /// How the leader's gRPC port is reached: mutual TLS (`--tls-cert` …), or plaintext, what
    /// `--insecure-plaintext` asks for and the default of a configuration built in code (in-process
    /// tests, benchmarks).
    pub tls: ClientTransport,
    /// Where to journal every reconcile's start and end (`--reconcile-journal`, a test and benchmark
    /// aid; see `reconcile_journal`); `None`, the default, journals nothing.
    pub reconcile_journal: Option<PathBuf>,
}

impl WorkerConfig {
    /// A configuration with the documented defaults, on a plaintext etcd at `etcd_endpoints`.
    pub fn new(
        worker_id: &str,
        fleet: &str,
        etcd_endpoints: Vec<String>,
        kube: kube::Config,
    ) -> Self {
        Self {
            worker_id: worker_id.to_owned(),
            fleet: fleet.to_owned(),
            etcd: EtcdClientConfig::plaintext(etcd_endpoints),
            kube,
            kube_api_qps: 20.0,
            kube_api_burst: 30,
            session: SessionConfig::default(),
            shutdown_grace_period: Duration::from_secs(10),
            metrics_listen: None,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(2),
            tls: ClientTransport::Plaintext,
            reconcile_journal: None,
        }
    }

    /// Checks the values.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first bad value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        // The coordinator refuses a Hello whose id is not a DNS-1123 subdomain; say so at start-up.
        if let Err(reason) = flotilla_common::validate_subdomain(&self.worker_id) {
            return invalid(format!("--worker-id {:?} {reason}", self.worker_id));
        }
        if self.fleet.is_empty() || self.fleet.contains('/') {
            return invalid(format!(
                "fleet {:?} must be non-empty and contain no '/'",
                self.fleet
            ));
        }
        if let Err(err) = self.etcd.validate() {
            return invalid(err.to_string());
        }
        if !self.kube_api_qps.is_finite() || self.kube_api_qps < 0.0 {
            return invalid(format!(
                "kube api qps {} must be zero or positive",
                self.kube_api_qps
            ));
        }
        if self.kube_api_burst == 0 {
            return invalid("kube api burst must be positive".into());
        }
        if self.reconnect_min.is_zero() || self.reconnect_min > self.reconnect_max {
            return invalid("reconnect backoff must be positive with min <= max".into());
        }
        self.session
            .validate()
            .map_err(|err| ConfigError::Invalid(err.to_string()))
    }
}
