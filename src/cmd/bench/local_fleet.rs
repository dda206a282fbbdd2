//! A whole fleet of real processes on this machine for the benchmarks: a fresh etcd, the devcluster
//! (optionally with simulated nodes) or a cluster the user points at, one coordinator and N workers,
//! each with its log in a temporary directory. Every process is stopped when the [`LocalFleet`] is
//! dropped; a failed benchmark keeps the logs ([`LocalFleet::keep_logs`]).
//!
//! On a cluster of the user's (`--kubeconfig`) the benchmark must not touch anything else: every
//! namespace it makes has a name unique to the run and the label `flotilla.dev/bench=<run>`, the
//! coordinator is scoped to that label (`--namespace-selector`), and [`LocalFleet::cleanup`] deletes
//! those namespaces ([`BenchScope`], which benchmarks with fleets of their own use too).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_devcluster::EtcdServer;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
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
    /// A namespace to create before the fleet starts (on a cluster of the user's, its name gets the
    /// run's suffix: see [`LocalFleet::namespace`]).
    pub namespace: &'a str,
    /// The kubeconfig of a cluster to run against; `None`: a fresh devcluster per fleet.
    pub cluster: Option<&'a Path>,
}

/// The label that marks, and scopes the fleet to, the namespaces a benchmark makes on a cluster of the
/// user's.
const BENCH_LABEL: &str = "flotilla.dev/bench";

/// The namespaces one benchmark run makes, and the scope its coordinators get: on a cluster of the
/// user's, names unique to the run labelled [`BENCH_LABEL`]`=<run>`, the coordinators scoped to that
/// label, and the namespaces deleted by [`BenchScope::cleanup`]; on a devcluster of the run's own,
/// plain names, no scope and nothing to delete (the cluster goes with the run). Shared by every
/// benchmark that takes `--kubeconfig`.
#[derive(Debug, Default)]
pub(super) struct BenchScope {
    /// On a cluster of the user's, the value of [`BENCH_LABEL`] of this run; `None` on a devcluster.
    run: Option<String>,
    /// The namespaces made on a cluster of the user's, for [`BenchScope::cleanup`].
    made: Vec<String>,
}

impl BenchScope {
    /// The scope of a run named `name`: unique to the run when `users_cluster`, empty otherwise.
    pub fn new(name: &str, users_cluster: bool) -> Self {
        // A DNS label (it ends namespace names): run names may hold a qps like `0.5`.
        let run = users_cluster.then(|| {
            let suffix: u32 = rand::random();
            format!("{}-{:08x}", name.replace('.', "-"), suffix)
        });
        Self {
            run,
            made: Vec::new(),
        }
    }

    /// The label selector of the run's namespaces (`flotilla.dev/bench=<run>`); `None` on a
    /// devcluster.
    pub fn selector(&self) -> Option<String> {
        self.run.as_ref().map(|run| format!("{BENCH_LABEL}={run}"))
    }

    /// The flags that scope a coordinator to the run's namespaces (none on a devcluster).
    pub fn coordinator_flags(&self) -> Vec<String> {
        self.selector()
            .iter()
            .flat_map(|selector| strings(&["--namespace-selector", selector]))
            .collect()
    }

    /// Creates a namespace for the benchmark's objects, named `base` on a devcluster of its own and
    /// `base-<run>`, labelled for the fleet's scope, on a cluster of the user's; returns its name.
    ///
    /// # Errors
    /// When the API refuses it.
    pub async fn create_namespace(
        &mut self,
        client: &kube::Client,
        base: &str,
    ) -> anyhow::Result<String> {
        let (name, labels) = match &self.run {
            Some(run) => (format!("{base}-{run}"), json!({BENCH_LABEL: run})),
            None => (base.to_owned(), json!({})),
        };
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?,
            )
            .await
            .with_context(|| format!("cannot create the benchmark's namespace {name}"))?;
        if self.run.is_some() {
            self.made.push(name.clone());
        }
        Ok(name)
    }

    /// Deletes the namespaces made on a cluster of the user's (nothing on a devcluster of the run's
    /// own). Failures are logged: a left-over namespace is the user's to delete.
    pub async fn cleanup(&mut self, client: &kube::Client) {
        let namespaces = Api::<Namespace>::all(client.clone());
        for name in std::mem::take(&mut self.made) {
            if let Err(err) = namespaces.delete(&name, &DeleteParams::default()).await {
                tracing::warn!(namespace = %name, error = %err, "cannot delete the benchmark's namespace");
            }
        }
    }
}

/// The processes of one fleet; see the module documentation.
pub(super) struct LocalFleet {
    /// A client of the cluster with no rate limit.
    pub client: kube::Client,
    /// The devcluster, when the fleet has its own.
    devcluster: Option<Child>,
    /// The coordinator, then the workers (none for [`LocalFleet::start_cluster_only`]).
    fleet: Vec<Child>,
    dir: Option<tempfile::TempDir>,
    etcd: Option<EtcdServer>,
    /// The fleet's name.
    name: String,
    /// The run's namespaces and the coordinator's scope.
    scope: BenchScope,
    /// The namespace of `FleetShape::namespace`, as created.
    namespace: String,
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
        let scope = BenchScope::new(&shape.name, shape.cluster.is_some());
        let (devcluster, client, kubeconfig) =
            match start_cluster(flotilla, shape, dir.path(), &etcd).await {
                Ok(started) => started,
                Err(err) => {
                    let logs = dir.keep();
                    return Err(err.context(format!("logs in {}", logs.display())));
                }
            };
        let mut fleet = Self {
            client,
            devcluster,
            fleet: Vec::new(),
            dir: Some(dir),
            etcd: Some(etcd),
            name: shape.name.clone(),
            scope,
            namespace: String::new(),
        };
        let started = fleet
            .start_fleet(flotilla, shape, &kubeconfig, with_fleet)
            .await;
        if let Err(err) = started {
            fleet.cleanup().await;
            return Err(err.context(format!("logs in {}", fleet.keep_logs().display())));
        }
        if with_fleet && let Err(err) = fleet.wait_ready(shape).await {
            fleet.cleanup().await;
            return Err(err.context(format!("logs in {}", fleet.keep_logs().display())));
        }
        Ok(fleet)
    }

    /// The namespace of `FleetShape::namespace`, as created (with the run's suffix on a cluster of
    /// the user's).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Creates a namespace for the benchmark's objects, named `base` on a devcluster of its own and
    /// `base-<run>`, labelled for the fleet's scope, on a cluster of the user's; returns its name.
    ///
    /// # Errors
    /// When the API refuses it.
    pub async fn create_namespace(&mut self, base: &str) -> anyhow::Result<String> {
        self.scope.create_namespace(&self.client, base).await
    }

    /// Deletes the namespaces the benchmark made on a cluster of the user's (nothing on a devcluster
    /// of its own, which goes with the fleet). Failures are logged: a left-over namespace is the
    /// user's to delete.
    pub async fn cleanup(&mut self) {
        self.scope.cleanup(&self.client).await;
    }

    /// The devcluster process; `None` on a cluster of the user's.
    pub fn devcluster(&self) -> Option<&Child> {
        self.devcluster.as_ref()
    }

    /// The coordinator process.
    pub fn coordinator(&self) -> &Child {
        &self.fleet[0]
    }

    /// The worker processes.
    pub fn workers(&self) -> &[Child] {
        &self.fleet[1..]
    }

    /// # Errors
    /// When any process has exited, naming it and its log.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        self.devcluster
            .iter_mut()
            .chain(&mut self.fleet)
            .try_for_each(Child::check_running)
    }

    /// Stops every process and keeps their logs; returns where they are.
    pub fn keep_logs(&mut self) -> PathBuf {
        self.stop();
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
        self.stop();
        drop(self.etcd.take());
    }
}

impl LocalFleet {
    /// Stops the workers, the coordinator and the devcluster, in that order.
    fn stop(&mut self) {
        stop_all(&mut self.fleet);
        // Dropping a child stops it.
        drop(self.devcluster.take());
    }

    /// Creates the namespace and (`with_fleet`) starts the coordinator and the workers on the cluster
    /// of `kubeconfig`.
    async fn start_fleet(
        &mut self,
        flotilla: &Path,
        shape: &FleetShape<'_>,
        kubeconfig: &Path,
        with_fleet: bool,
    ) -> anyhow::Result<()> {
        self.namespace = self.create_namespace(shape.namespace).await?;
        if !with_fleet {
            return Ok(());
        }
        let dir = self
            .dir
            .as_ref()
            .map(|d| d.path().to_owned())
            .context("the fleet's directory is gone")?;
        let endpoints = self
            .etcd
            .as_ref()
            .map(|e| e.endpoints().join(","))
            .unwrap_or_default();
        let common = fleet_flags(&shape.name, &endpoints, kubeconfig);
        let mut coordinator_args = strings(&["coordinator", "--listen", "127.0.0.1:0"]);
        coordinator_args.extend(common.iter().cloned());
        coordinator_args.extend(strings(&["--id", "coordinator-0"]));
        coordinator_args.extend(self.scope.coordinator_flags());
        self.fleet
            .push(spawn(&dir, "coordinator-0", flotilla, &coordinator_args)?);
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
            self.fleet
                .push(spawn(&dir, &format!("worker-{i}"), flotilla, &worker_args)?);
        }
        Ok(())
    }
}

/// The cluster of `shape`: a devcluster started on `etcd` (with its process, a client and the
/// kubeconfig it wrote into `dir`), or the user's cluster of `shape.cluster` (no process).
async fn start_cluster(
    flotilla: &Path,
    shape: &FleetShape<'_>,
    dir: &Path,
    etcd: &EtcdServer,
) -> anyhow::Result<(Option<Child>, kube::Client, PathBuf)> {
    if let Some(kubeconfig) = shape.cluster {
        let client = flotilla_common::kube_client(Some(kubeconfig))
            .await
            .with_context(|| format!("cannot use the cluster of {}", kubeconfig.display()))?;
        return Ok((None, client, kubeconfig.to_owned()));
    }
    let kubeconfig = dir.join("kubeconfig");
    let api = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let devcluster = spawn(
        dir,
        "devcluster",
        flotilla,
        &strings(&[
            "devcluster",
            "--etcd-endpoints",
            &etcd.endpoints().join(","),
            "--listen",
            &api.to_string(),
            "--nodes",
            &shape.nodes.to_string(),
            "--write-kubeconfig",
            &kubeconfig.display().to_string(),
        ]),
    )?;
    match wait_for_api(&kubeconfig).await {
        Ok(client) => Ok((Some(devcluster), client, kubeconfig)),
        Err(err) => {
            drop(devcluster);
            Err(err)
        }
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}
