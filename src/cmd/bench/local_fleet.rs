//! A whole fleet of real processes on this machine for the benchmarks: a fresh etcd, the devcluster
//! (optionally with simulated nodes), one coordinator and N workers, each with its log in a temporary
//! directory. Every process is stopped when the [`LocalFleet`] is dropped; a failed benchmark keeps
//! the logs ([`LocalFleet::keep_logs`]).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_devcluster::EtcdServer;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::cmd::procs::{Child, fleet_flags, free_port, spawn, stop_all, wait_for_api};

/// What to start.
#[derive(Debug, Clone)]
pub(super) struct FleetShape<'a> {
    /// The fleet's name (its etcd prefix).
    pub name: String,
    /// Workers to start, `worker-0` … `worker-{n-1}`.
    pub workers: usize,
    /// `--controllers` of every worker.
    pub controllers: &'a [&'a str],
    /// Further flags of every worker (rate limits, concurrency).
    pub worker_flags: Vec<String>,
    /// Simulated nodes in the devcluster (0: none; pods then never run).
    pub nodes: usize,
    /// A namespace to create before the fleet starts.
    pub namespace: &'a str,
}

/// The processes of one fleet; see the module documentation.
pub(super) struct LocalFleet {
    /// A client of the devcluster with no rate limit.
    pub client: kube::Client,
    /// devcluster, coordinator, then the workers.
    children: Vec<Child>,
    dir: Option<tempfile::TempDir>,
    etcd: Option<EtcdServer>,
    /// The fleet's name.
    name: String,
}

impl LocalFleet {
    /// Starts everything and waits until the leader runs every controller of `shape` with every
    /// worker connected, every shard owned and every informer synced, so what follows measures work
    /// and not start-up.
    ///
    /// # Errors
    /// When a process cannot start, exits, or the fleet is not ready within 60 s; the logs are kept
    /// and the error names their directory.
    pub async fn start(flotilla: &Path, shape: &FleetShape<'_>) -> anyhow::Result<Self> {
        Self::start_with(flotilla, shape, true).await
    }

    /// The devcluster of `shape` (its nodes and namespace) with no coordinator or worker: what a
    /// benchmark compares a fleet's cost with. [`LocalFleet::coordinator`] and
    /// [`LocalFleet::workers`] must not be used.
    ///
    /// # Errors
    /// As [`LocalFleet::start`].
    pub async fn start_cluster_only(
        flotilla: &Path,
        shape: &FleetShape<'_>,
    ) -> anyhow::Result<Self> {
        Self::start_with(flotilla, shape, false).await
    }

    async fn start_with(
        flotilla: &Path,
        shape: &FleetShape<'_>,
        with_fleet: bool,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-bench-")
            .tempdir()?;
        let etcd = EtcdServer::start().await?;
        let kubeconfig = dir.path().join("kubeconfig");
        let mut children = Vec::new();
        let started = start_processes(
            flotilla,
            shape,
            dir.path(),
            &etcd,
            &kubeconfig,
            with_fleet,
            &mut children,
        )
        .await;
        let mut fleet = Self {
            client: match started {
                Ok(client) => client,
                Err(err) => {
                    stop_all(&mut children);
                    let logs = dir.keep();
                    return Err(err.context(format!("logs in {}", logs.display())));
                }
            },
            children,
            dir: Some(dir),
            etcd: Some(etcd),
            name: shape.name.clone(),
        };
        if with_fleet && let Err(err) = fleet.wait_ready(shape).await {
            return Err(err.context(format!("logs in {}", fleet.keep_logs().display())));
        }
        Ok(fleet)
    }

    /// The devcluster process.
    pub fn devcluster(&self) -> &Child {
        &self.children[0]
    }

    /// The coordinator process.
    pub fn coordinator(&self) -> &Child {
        &self.children[1]
    }

    /// The worker processes.
    pub fn workers(&self) -> &[Child] {
        &self.children[2..]
    }

    /// # Errors
    /// When any process has exited, naming it and its log.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        self.children.iter_mut().try_for_each(Child::check_running)
    }

    /// Stops every process and keeps their logs; returns where they are.
    pub fn keep_logs(&mut self) -> PathBuf {
        stop_all(&mut self.children);
        self.dir
            .take()
            .map(tempfile::TempDir::keep)
            .unwrap_or_default()
    }

    /// The fleet as its leader reports it (`flotilla status`).
    ///
    /// # Errors
    /// When no leader answers.
    pub async fn status(&self) -> anyhow::Result<flotilla_proto::StatusResponse> {
        let endpoints = self
            .etcd
            .as_ref()
            .map(EtcdServer::endpoints)
            .unwrap_or_default();
        crate::cmd::status::fetch(&endpoints, &self.name).await
    }

    async fn wait_ready(&mut self, shape: &FleetShape<'_>) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(s) = self.status().await {
                let connected = s.workers.iter().filter(|w| w.connected).count();
                let owned: u32 = s.workers.iter().map(|w| w.shards).sum();
                let runs = |c: &str| s.queues.iter().any(|q| q.controller == c);
                let synced = s.informers.iter().all(|i| i.synced);
                if connected == shape.workers
                    && owned == s.shard_count
                    && synced
                    && shape.controllers.iter().all(|c| runs(c))
                {
                    return Ok(());
                }
            }
            self.check_running()?;
            if Instant::now() > deadline {
                bail!("the fleet did not become ready within 60s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for LocalFleet {
    /// Workers first, so they hand back their leases, then the coordinator, the devcluster and etcd.
    fn drop(&mut self) {
        stop_all(&mut self.children);
        drop(self.etcd.take());
    }
}

/// Starts the devcluster, the namespace and (`with_fleet`) the coordinator and the workers into
/// `children`; returns a client of the devcluster.
async fn start_processes(
    flotilla: &Path,
    shape: &FleetShape<'_>,
    dir: &Path,
    etcd: &EtcdServer,
    kubeconfig: &Path,
    with_fleet: bool,
    children: &mut Vec<Child>,
) -> anyhow::Result<kube::Client> {
    let endpoints = etcd.endpoints().join(",");
    let api = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    children.push(spawn(
        dir,
        "devcluster",
        flotilla,
        &strings(&[
            "devcluster",
            "--etcd-endpoints",
            &endpoints,
            "--listen",
            &api.to_string(),
            "--nodes",
            &shape.nodes.to_string(),
            "--write-kubeconfig",
            &kubeconfig.display().to_string(),
        ]),
    )?);
    let client = wait_for_api(kubeconfig).await?;
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": shape.namespace}}))?,
        )
        .await
        .context("cannot create the benchmark's namespace")?;
    if !with_fleet {
        return Ok(client);
    }

    let common = fleet_flags(&shape.name, &endpoints, kubeconfig);
    let mut coordinator_args = strings(&["coordinator", "--listen", "127.0.0.1:0"]);
    coordinator_args.extend(common.iter().cloned());
    coordinator_args.extend(strings(&["--id", "coordinator-0"]));
    children.push(spawn(dir, "coordinator-0", flotilla, &coordinator_args)?);
    for i in 0..shape.workers {
        let mut worker_args = strings(&[
            "worker",
            "--controllers",
            &shape.controllers.join(","),
            "--worker-id",
            &format!("worker-{i}"),
        ]);
        worker_args.extend(shape.worker_flags.iter().cloned());
        worker_args.extend(common.iter().cloned());
        children.push(spawn(dir, &format!("worker-{i}"), flotilla, &worker_args)?);
    }
    Ok(client)
}
