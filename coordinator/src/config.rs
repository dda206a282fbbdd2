//! The coordinator's configuration: plain data, validated once at start-up.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use flotilla_common::EtcdClientConfig;
use flotilla_common::tls::ServerTls;

use crate::informer::NamespaceScope;

/// Everything a coordinator needs to start.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Identity in the election; default hostname plus a random suffix.
    pub id: String,
    /// Kubernetes client configuration (`None`: in-cluster, then `KUBECONFIG`).
    pub kubeconfig: Option<PathBuf>,
    /// etcd for leadership and shard ownership: endpoints, TLS, user, and the key prefix.
    pub etcd: EtcdClientConfig,
    /// Fleet name: its keys live under `<etcd prefix>/<fleet>/`, so several fleets can share one etcd.
    pub fleet: String,
    /// Where the gRPC services listen.
    pub listen: SocketAddr,
    /// What workers dial to reach this coordinator when it leads (`host:port`). Default: `listen`.
    pub advertise: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` listen.
    pub metrics_listen: SocketAddr,
    /// Number of shards `S`; fixed for the life of the fleet. Default 256: enough for even spread over
    /// dozens of workers, few enough that a shard map fits in one etcd range read.
    pub shards: u32,
    /// `--leader-elect-lease-duration`: TTL of the leader's lease. Default 5 s, so a standby takes over
    /// within seconds of a crash (kube-controller-manager uses 15 s).
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline`: a leader that cannot renew within this stops leading. Default 4 s.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period`: how often the lease is renewed. Default 1 s.
    pub retry_period: Duration,
    /// `--hot-standby`: followers keep their informers synced, so a takeover only re-enqueues.
    pub hot_standby: bool,
    /// How long a worker may stay disconnected (or, after a takeover, not yet connected) while its lease
    /// lives before the leader revokes its lease to take its shards back. Default 10 s.
    pub worker_reconnect_grace: Duration,
    /// Read-your-writes bound: a key whose writes the cache has not observed is dispatched again after
    /// this anyway. Default 5 min, like kube-controller-manager's expectations.
    pub expectations_timeout: Duration,
    /// A new stream must say Hello within this, or it is dropped. Default 10 s.
    pub hello_timeout: Duration,
    /// `--max-controller-concurrency`: the most a worker may advertise for one controller; a Hello
    /// above it is refused. Default 10,000 (see `fleet::Limits`).
    pub max_controller_concurrency: u32,
    /// `--max-worker-kinds`: the most distinct kinds one worker's controllers may name together; a
    /// Hello above it is refused (see `fleet::Limits`). Default 128.
    pub max_worker_kinds: usize,
    /// `--controller-retire-after`: a controller no live worker has run for this long is retired (its
    /// queue dropped, its spec deleted, its informers stopped unless another controller needs them).
    /// Default 10 min: longer than any rolling update of the workers, short enough that a controller
    /// a stray worker declared does not linger.
    pub controller_retire_after: Duration,
    /// `--unserved-kind-timeout`: an informer whose kind answers only 404 for this long stops and is
    /// reported in status. Default 1 min: time for a CRD applied with the fleet to be established.
    pub unserved_kind_timeout: Duration,
    /// `--dispatch-batch-bytes`: Assigns to one worker go out in messages of at most this many bytes,
    /// and an item bigger than this alone goes without its prefetched objects (the worker reads them
    /// through the Cache service). Default 4 MiB: a quarter of the 16 MiB message limit, so no batch,
    /// and no single item (one object is at most 1.5 MiB in etcd), can break a worker's stream.
    pub dispatch_batch_bytes: usize,
    /// `--dispatch-stall-timeout`: a leader whose queues hold keys while it has dispatched nothing to
    /// any live worker for this long says not ready, and so does a coordinator that has seen no leader
    /// for this long. Default 1 min: longer than any rebalance, failover or read-your-writes hold of a
    /// healthy fleet, short enough to alert while the cluster has stopped converging.
    pub dispatch_stall_timeout: Duration,
    /// `--max-cache-list-inflight-bytes`: Cache List answers being built or sent at once hold at most
    /// this many bytes of objects; a List beyond it waits up to `cache_list_inflight_wait`, then is
    /// refused with `ResourceExhausted`. Default 256 MiB: sixteen answers at the 16 MiB message limit,
    /// far above what a healthy fleet lists at once, and a bound a coordinator's memory request can
    /// plan for (200 concurrent 8.5 MB Lists took one from 51 MB to 1.7 GB before this bound).
    pub max_cache_list_inflight_bytes: usize,
    /// `--max-cache-list-inflight-bytes-per-worker`: the share of that one worker may hold. Default
    /// 64 MiB, a quarter: however hard one worker lists, three quarters stay for the rest of the fleet.
    pub max_cache_list_inflight_bytes_per_worker: usize,
    /// `--cache-list-inflight-wait`: how long a List waits for room before it is refused. Default 2 s:
    /// a burst (a failover's resyncs) drains within it, while a flood is refused well before the
    /// clients' own deadlines, so refused requests do not pile up as waiting ones.
    pub cache_list_inflight_wait: Duration,
    /// `--kube-api-unreachable-timeout`: a leader whose Kubernetes API has not answered for this long
    /// stops dispatching and resigns, and a coordinator whose API does not answer does not campaign
    /// (see `api_link`). Default 15 s: longer than an API server's rolling restart behind a load
    /// balancer, which informers ride out, and far shorter than the read-your-writes bound, so a
    /// cut-off leader hands over long before a hold could expire; kube-controller-manager, whose lease
    /// lives in the API, stops after its 10 s renew deadline.
    pub kube_api_unreachable_timeout: Duration,
    /// `--namespaces` / `--namespace-selector`: the namespaces whose objects the informers cover
    /// (cluster-scoped kinds stay cluster-wide). Default every namespace, as kube-controller-manager;
    /// scoped, several fleets share one cluster without touching each other's objects.
    pub namespaces: NamespaceScope,
    /// Mutual TLS of the gRPC port (`--tls-cert`, `--tls-key`, `--tls-client-ca`): `None` serves
    /// plaintext, what `--insecure-plaintext` asks for and the default of a configuration built in code
    /// (in-process tests, benchmarks); the command line refuses to start without either.
    pub tls: Option<ServerTls>,
}

impl CoordinatorConfig {
    /// A configuration with every default, for `fleet` on a plaintext etcd at `etcd_endpoints`.
    pub fn new(fleet: &str, etcd_endpoints: Vec<String>) -> Self {
        Self {
            id: default_identity("coordinator"),
            kubeconfig: None,
            etcd: EtcdClientConfig::plaintext(etcd_endpoints),
            fleet: fleet.to_owned(),
            listen: SocketAddr::from(([0, 0, 0, 0], 7450)),
            advertise: None,
            metrics_listen: SocketAddr::from(([0, 0, 0, 0], 7451)),
            shards: 256,
            lease_duration: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(4),
            retry_period: Duration::from_secs(1),
            hot_standby: false,
            worker_reconnect_grace: Duration::from_secs(10),
            expectations_timeout: Duration::from_secs(300),
            hello_timeout: Duration::from_secs(10),
            max_controller_concurrency: 10_000,
            max_worker_kinds: 128,
            controller_retire_after: Duration::from_secs(600),
            unserved_kind_timeout: Duration::from_secs(60),
            dispatch_batch_bytes: 4 * 1024 * 1024,
            dispatch_stall_timeout: Duration::from_secs(60),
            max_cache_list_inflight_bytes: 256 * 1024 * 1024,
            max_cache_list_inflight_bytes_per_worker: 64 * 1024 * 1024,
            cache_list_inflight_wait: Duration::from_secs(2),
            kube_api_unreachable_timeout: Duration::from_secs(15),
            namespaces: NamespaceScope::All,
            tls: None,
        }
    }

    /// Checks the configuration once at start-up.
    ///
    /// # Errors
    /// A message naming the bad flag: lease duration must exceed the renew deadline, which must exceed
    /// the retry period (client-go's rule); shards in 1..=65536; a fleet name etcd keys can carry.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.lease_duration > self.renew_deadline && self.renew_deadline > self.retry_period) {
            return Err(ConfigError(format!(
                "--leader-elect-lease-duration ({:?}) must exceed --leader-elect-renew-deadline ({:?}), which must exceed --leader-elect-retry-period ({:?})",
                self.lease_duration, self.renew_deadline, self.retry_period
            )));
        }
        if self.retry_period.is_zero() || self.lease_duration < Duration::from_secs(2) {
            return Err(ConfigError(
                "--leader-elect-lease-duration must be at least 2s and the retry period positive"
                    .into(),
            ));
        }
        if self.shards == 0 || self.shards > 65536 {
            return Err(ConfigError(format!(
                "--shards must be in 1..=65536, not {}",
                self.shards
            )));
        }
        if self.fleet.is_empty() || self.fleet.contains('/') {
            return Err(ConfigError(format!(
                "--fleet {:?} must be non-empty and contain no '/'",
                self.fleet
            )));
        }
        self.etcd
            .validate()
            .map_err(|err| ConfigError(err.to_string()))?;
        if self.max_controller_concurrency == 0 || self.max_controller_concurrency > 1_000_000 {
            return Err(ConfigError(format!(
                "--max-controller-concurrency must be in 1..=1000000, not {}",
                self.max_controller_concurrency
            )));
        }
        if !(1..=10_000).contains(&self.max_worker_kinds) {
            return Err(ConfigError(format!(
                "--max-worker-kinds must be in 1..=10000, not {}",
                self.max_worker_kinds
            )));
        }
        if self.controller_retire_after < Duration::from_secs(1)
            || self.unserved_kind_timeout < Duration::from_secs(1)
        {
            return Err(ConfigError(
                "--controller-retire-after and --unserved-kind-timeout must be at least 1s".into(),
            ));
        }
        if !(64 * 1024..=flotilla_proto::MAX_MESSAGE_BYTES / 2).contains(&self.dispatch_batch_bytes)
        {
            return Err(ConfigError(format!(
                "--dispatch-batch-bytes must be in 65536..={}, not {}",
                flotilla_proto::MAX_MESSAGE_BYTES / 2,
                self.dispatch_batch_bytes
            )));
        }
        if self.dispatch_stall_timeout < Duration::from_secs(1) {
            return Err(ConfigError(
                "--dispatch-stall-timeout must be at least 1s".into(),
            ));
        }
        self.validate_cache_list_inflight()?;
        if !(Duration::from_secs(1)..=Duration::from_secs(3600))
            .contains(&self.kube_api_unreachable_timeout)
        {
            return Err(ConfigError(format!(
                "--kube-api-unreachable-timeout must be in 1s..=1h, not {:?}",
                self.kube_api_unreachable_timeout
            )));
        }
        if let NamespaceScope::Names(names) = &self.namespaces {
            for name in names {
                flotilla_common::validate_label(name).map_err(|reason| {
                    ConfigError(format!(
                        "--namespaces: {name:?} is not a valid namespace name: {reason}"
                    ))
                })?;
            }
            if names.is_empty() {
                return Err(ConfigError(
                    "--namespaces needs at least one namespace".into(),
                ));
            }
        }
        Ok(())
    }

    /// The bounds of the Cache service's List answers in flight, as the flags give them.
    pub fn cache_list_limits(&self) -> crate::CacheListLimits {
        crate::CacheListLimits {
            total_bytes: self.max_cache_list_inflight_bytes,
            per_worker_bytes: self.max_cache_list_inflight_bytes_per_worker,
            wait: self.cache_list_inflight_wait,
        }
    }

    /// The List bounds: at least 1 MiB each (a List needs room for its page), the per-worker share at
    /// most the total, at most 64 GiB (a typo, not a plan), and a wait of at most a minute.
    fn validate_cache_list_inflight(&self) -> Result<(), ConfigError> {
        const MIB: usize = 1024 * 1024;
        let total = self.max_cache_list_inflight_bytes;
        let per_worker = self.max_cache_list_inflight_bytes_per_worker;
        if !(MIB..=64 * 1024 * MIB).contains(&total) {
            return Err(ConfigError(format!(
                "--max-cache-list-inflight-bytes must be in {MIB}..={}, not {total}",
                64 * 1024 * MIB
            )));
        }
        if !(MIB..=total).contains(&per_worker) {
            return Err(ConfigError(format!(
                "--max-cache-list-inflight-bytes-per-worker must be in {MIB}..=--max-cache-list-inflight-bytes ({total}), not {per_worker}"
            )));
        }
        if self.cache_list_inflight_wait > Duration::from_secs(60) {
            return Err(ConfigError(format!(
                "--cache-list-inflight-wait must be at most 1m, not {:?}",
                self.cache_list_inflight_wait
            )));
        }
        Ok(())
    }

    /// The address workers dial.
    pub fn advertise_address(&self) -> String {
        self.advertise
            .clone()
            .unwrap_or_else(|| self.listen.to_string())
    }
}

/// A configuration that cannot work; the message names the flag.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// `<hostname>-<random>`: unique per process, readable in logs.
pub fn default_identity(role: &str) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| role.to_owned());
    format!("{host}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        CoordinatorConfig::new("f", vec!["http://127.0.0.1:2379".into()])
            .validate()
            .unwrap();
    }

    #[test]
    fn a_renew_deadline_at_or_above_the_lease_duration_is_refused() {
        let mut c = CoordinatorConfig::new("f", vec!["http://e:2379".into()]);
        c.renew_deadline = c.lease_duration;
        assert!(
            c.validate()
                .unwrap_err()
                .0
                .contains("--leader-elect-lease-duration")
        );
    }

    #[test]
    fn a_retry_period_at_or_above_the_renew_deadline_is_refused() {
        let mut c = CoordinatorConfig::new("f", vec!["http://e:2379".into()]);
        c.retry_period = c.renew_deadline;
        assert!(c.validate().is_err());
    }

    #[test]
    fn an_empty_or_malformed_namespace_list_is_refused() {
        let mut c = CoordinatorConfig::new("f", vec!["http://e:2379".into()]);
        c.namespaces = NamespaceScope::Names(Default::default());
        assert!(c.validate().unwrap_err().0.contains("--namespaces"));
        c.namespaces = NamespaceScope::Names(["Bad".to_owned()].into());
        assert!(c.validate().unwrap_err().0.contains("\"Bad\""));
        c.namespaces = NamespaceScope::Names(["team-a".to_owned()].into());
        c.validate().unwrap();
    }

    #[test]
    fn cache_list_inflight_bounds_below_a_page_or_a_share_above_the_total_are_refused() {
        let mut c = CoordinatorConfig::new("f", vec!["http://e:2379".into()]);
        c.max_cache_list_inflight_bytes = 1024;
        assert!(
            c.validate()
                .unwrap_err()
                .0
                .contains("--max-cache-list-inflight-bytes must")
        );
        c.max_cache_list_inflight_bytes = 8 * 1024 * 1024;
        c.max_cache_list_inflight_bytes_per_worker = 16 * 1024 * 1024;
        assert!(
            c.validate()
                .unwrap_err()
                .0
                .contains("--max-cache-list-inflight-bytes-per-worker")
        );
        c.max_cache_list_inflight_bytes_per_worker = 8 * 1024 * 1024;
        c.cache_list_inflight_wait = Duration::from_secs(600);
        assert!(
            c.validate()
                .unwrap_err()
                .0
                .contains("--cache-list-inflight-wait")
        );
        c.cache_list_inflight_wait = Duration::ZERO;
        c.validate().unwrap();
    }

    #[test]
    fn a_kube_api_unreachable_timeout_below_a_second_is_refused() {
        let mut c = CoordinatorConfig::new("f", vec!["http://e:2379".into()]);
        c.kube_api_unreachable_timeout = Duration::from_millis(500);
        assert!(
            c.validate()
                .unwrap_err()
                .0
                .contains("--kube-api-unreachable-timeout")
        );
    }

    #[test]
    fn zero_shards_are_refused() {
        let mut c = CoordinatorConfig::new("f", vec!["http://e:2379".into()]);
        c.shards = 0;
        assert!(c.validate().unwrap_err().0.contains("--shards"));
    }
}
