//! A fleet inside the benchmark's own process, for the benchmarks of the fleet core (`dispatch`,
//! `scaleout`): one coordinator and N workers on loopback over a shared etcd and devcluster, each worker
//! running one benchmark controller, and keys enqueued straight into the leader's queue (no objects).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::bail;
use flotilla_coordinator::{Coordinator, CoordinatorConfig};
use flotilla_devcluster::{DevCluster, DevClusterConfig, EtcdServer};
use flotilla_sdk::DynController;
use flotilla_worker::{Worker, WorkerConfig};

/// etcd and a devcluster that several in-process fleets (one per run) share.
pub(super) struct Backend {
    pub etcd: EtcdServer,
    cluster: DevCluster,
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    kube_config: kube::Config,
}

impl Backend {
    /// Starts etcd and a devcluster with no compaction.
    pub async fn start() -> anyhow::Result<Self> {
        let etcd = EtcdServer::start().await?;
        let cluster = DevCluster::start(DevClusterConfig {
            etcd_endpoints: etcd.endpoints(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            compact_interval: None,
            bookmark_interval: Duration::from_secs(1),
            extension: None,
        })
        .await?;
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        cluster.write_kubeconfig(&kubeconfig)?;
        let kube_config = flotilla_common::kube_config(Some(&kubeconfig)).await?;
        Ok(Self {
            etcd,
            cluster,
            _dir: dir,
            kubeconfig,
            kube_config,
        })
    }

    pub async fn shutdown(self) {
        self.cluster.shutdown().await;
    }
}

/// One fleet of a run.
pub(super) struct InProcessFleet {
    pub coordinator: Coordinator,
    workers: Vec<Worker>,
}

impl InProcessFleet {
    /// Starts fleet `name` with `workers` workers, each running the controller `controller(i)` makes
    /// (with no API rate limit), and waits until the leader runs `controller_name` with every worker
    /// connected and every shard owned.
    ///
    /// # Errors
    /// When a process part cannot start or the fleet is not ready within 30 s.
    pub async fn start(
        backend: &Backend,
        name: &str,
        workers: usize,
        controller_name: &str,
        controller: impl Fn(usize) -> DynController,
    ) -> anyhow::Result<Self> {
        let mut config = CoordinatorConfig::new(name, backend.etcd.endpoints());
        config.kubeconfig = Some(backend.kubeconfig.clone());
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.metrics_listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let coordinator = Coordinator::start(config).await?;
        let mut started = Vec::new();
        for i in 0..workers {
            let mut wc = WorkerConfig::new(
                &format!("{name}-w{i}"),
                name,
                backend.etcd.endpoints(),
                backend.kube_config.clone(),
            );
            wc.kube_api_qps = 0.0;
            started.push(Worker::start(wc, vec![controller(i)]).await?);
        }
        let ready_by = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(s) = crate::cmd::status::fetch(&backend.etcd.endpoints(), name).await {
                let connected = s.workers.iter().filter(|w| w.connected).count();
                let owned: u32 = s.workers.iter().map(|w| w.shards).sum();
                let synced = s.informers.iter().all(|i| i.synced)
                    && s.queues.iter().any(|q| q.controller == controller_name);
                if connected == workers && owned == s.shard_count && synced {
                    break;
                }
            }
            if Instant::now() > ready_by {
                bail!("the fleet did not become ready within 30s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Self {
            coordinator,
            workers: started,
        })
    }

    /// Stops the workers, then the coordinator.
    pub async fn shutdown(self) {
        for w in self.workers {
            w.shutdown().await;
        }
        self.coordinator.shutdown().await;
    }
}
