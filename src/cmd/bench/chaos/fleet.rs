//! The fleet `bench chaos` breaks: etcd, the devcluster with simulated nodes, coordinators and workers
//! as processes on this machine, with every link of every fleet process through a cuttable proxy
//! ([`FaultProxy`]): each process has its own proxy to etcd and its own to the API server (its own
//! `--etcd-endpoints`, its own kubeconfig), and each coordinator one in front of its gRPC port, which it
//! advertises, so cutting one worker from the coordinators cuts the connections of that worker's
//! process there ([`Clients::Pid`]). The devcluster reaches etcd directly, and so does the benchmark.
//!
//! A killed process is started again in its slot, on the same proxies, under a new identity
//! (`worker-<slot>-<incarnation>`), so the reconcile journal tells its lives apart. Every process
//! is stopped when the fleet is dropped; [`ChaosFleet::keep_logs`] keeps their logs.
//!
//! `bench scale` uses it too, for its standby coordinators, its leader kills and its cut API links,
//! and with `--kubeconfig` on a given cluster ([`ChaosFleet::start_on`]): the fleet's processes then
//! reach that cluster's API server directly, with its kubeconfig, so their API links cannot be cut,
//! and etcd cannot be compacted through it.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_common::{Election, EtcdClientConfig};
use flotilla_devcluster::{Clients, Direction, EtcdServer, Fault, FaultProxy};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::schedule::Link;
use crate::cmd::procs::{Child, fleet_flags, free_port, spawn, stop_all, wait_for_api};

/// How long after a process exited on its own it is started again.
pub(super) const RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// The namespace of the benchmark's Deployments.
pub(super) const NAMESPACE: &str = "chaos";

/// What to start.
#[derive(Debug, Clone)]
pub(in crate::cmd::bench) struct Shape {
    pub name: String,
    pub coordinators: usize,
    pub workers: usize,
    pub nodes: usize,
    /// Further flags of every worker.
    pub worker_flags: Vec<String>,
    /// Further flags of every coordinator.
    pub coordinator_flags: Vec<String>,
}

/// A process's own links to etcd and to the API server.
struct Links {
    etcd: FaultProxy,
    /// `None` on a given cluster, reached directly.
    api: Option<FaultProxy>,
    kubeconfig: PathBuf,
}

/// The API server the fleet's processes talk to.
enum ApiServer {
    /// The fleet's own devcluster, each process through a proxy of its own.
    Devcluster {
        url: String,
        kubeconfig: serde_json::Value,
    },
    /// A given cluster, by its kubeconfig (absolute), each process directly.
    Given(PathBuf),
}

/// A place for one process, kept across its lives.
struct Slot {
    links: Links,
    /// In front of a coordinator's gRPC port (workers dial it); `None` for a worker.
    front: Option<FaultProxy>,
    process: Option<Child>,
    /// When a process that exited on its own is started again (a supervisor's back-off).
    restart_at: Option<Instant>,
    /// Identity of the current (or last) life.
    id: String,
    lives: usize,
}

/// The running fleet; see the module documentation.
pub(in crate::cmd::bench) struct ChaosFleet {
    /// A client of the API server, directly (never cut).
    pub client: kube::Client,
    flotilla: PathBuf,
    dir: Option<tempfile::TempDir>,
    etcd: EtcdServer,
    devcluster: Option<Child>,
    shape: Shape,
    api: ApiServer,
    coordinators: Vec<Slot>,
    workers: Vec<Slot>,
    journal: PathBuf,
    /// When each worker life that was killed (or exited) died, ns on the journal's clock.
    pub deaths: HashMap<String, u64>,
    /// Processes that exited without being killed, described.
    pub unexpected_exits: Vec<String>,
}

impl ChaosFleet {
    /// Starts everything and waits until the leader runs the deployment and replicaset controllers
    /// with every worker connected, every shard owned and every informer synced.
    ///
    /// # Errors
    /// When a process cannot start or exits, or the fleet is not ready within 90 s; the logs are kept
    /// and the error names their directory.
    pub async fn start(flotilla: &Path, shape: Shape) -> anyhow::Result<Self> {
        Self::start_on(flotilla, shape, None).await
    }

    /// [`ChaosFleet::start`] on the cluster of `cluster` (a kubeconfig) when given, instead of a
    /// devcluster of its own: etcd is still the fleet's own, no namespace is created (the caller
    /// makes its own, scoped: see `BenchScope`), and the processes reach the API server directly.
    ///
    /// # Errors
    /// As [`ChaosFleet::start`]; also when the kubeconfig cannot be used.
    pub async fn start_on(
        flotilla: &Path,
        shape: Shape,
        cluster: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-chaos-")
            .tempdir()?;
        let etcd = EtcdServer::start().await?;
        if let Some(kubeconfig) = cluster {
            // Absolute, so the processes (and the files it names) resolve it wherever they run.
            let kubeconfig = std::path::absolute(kubeconfig)?;
            let client = flotilla_common::kube_client(Some(kubeconfig.as_path()))
                .await
                .with_context(|| format!("cannot use the cluster of {}", kubeconfig.display()))?;
            return Self::with_cluster(
                flotilla,
                shape,
                dir,
                etcd,
                client,
                None,
                ApiServer::Given(kubeconfig),
            )
            .await;
        }
        let kubeconfig = dir.path().join("kubeconfig");
        let api = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let devcluster = spawn(
            dir.path(),
            "devcluster",
            flotilla,
            &[
                "devcluster",
                "--etcd-endpoints",
                &etcd.endpoints().join(","),
                "--listen",
                &api.to_string(),
                "--nodes",
                &shape.nodes.to_string(),
                "--write-kubeconfig",
                &kubeconfig.display().to_string(),
            ]
            .map(String::from),
        )?;
        let client = match wait_for_api(&kubeconfig).await {
            Ok(client) => client,
            Err(err) => {
                drop(devcluster);
                let logs = dir.keep();
                return Err(err.context(format!("logs in {}", logs.display())));
            }
        };
        let base_kubeconfig: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&kubeconfig)?)
                .context("the devcluster's kubeconfig is not JSON")?;
        let api_url = base_kubeconfig["clusters"][0]["cluster"]["server"]
            .as_str()
            .context("the devcluster's kubeconfig names no server")?
            .to_owned();
        let api = ApiServer::Devcluster {
            url: api_url,
            kubeconfig: base_kubeconfig,
        };
        Self::with_cluster(flotilla, shape, dir, etcd, client, Some(devcluster), api).await
    }

    /// Starts the fleet's processes once its etcd and API server are there.
    async fn with_cluster(
        flotilla: &Path,
        shape: Shape,
        dir: tempfile::TempDir,
        etcd: EtcdServer,
        client: kube::Client,
        devcluster: Option<Child>,
        api: ApiServer,
    ) -> anyhow::Result<Self> {
        let journal = dir.path().join("reconcile-journal.jsonl");
        let mut fleet = Self {
            client,
            flotilla: flotilla.to_owned(),
            dir: Some(dir),
            etcd,
            devcluster,
            shape,
            api,
            coordinators: Vec::new(),
            workers: Vec::new(),
            journal,
            deaths: HashMap::new(),
            unexpected_exits: Vec::new(),
        };
        if let Err(err) = fleet.start_fleet().await {
            return Err(err.context(format!("logs in {}", fleet.keep_logs().display())));
        }
        Ok(fleet)
    }

    async fn start_fleet(&mut self) -> anyhow::Result<()> {
        if self.devcluster.is_some() {
            Api::<Namespace>::all(self.client.clone())
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
                )
                .await
                .context("cannot create the benchmark's namespace")?;
        }
        for c in 0..self.shape.coordinators {
            let links = self.links(&format!("coordinator-{c}")).await?;
            // Upstream set when the coordinator starts (it listens on a new port each life).
            let front = FaultProxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 1))).await?;
            self.coordinators.push(Slot {
                links,
                front: Some(front),
                process: None,
                restart_at: None,
                id: String::new(),
                lives: 0,
            });
            self.start_coordinator(c)?;
        }
        for w in 0..self.shape.workers {
            let links = self.links(&format!("worker-{w}")).await?;
            self.workers.push(Slot {
                links,
                front: None,
                process: None,
                restart_at: None,
                id: String::new(),
                lives: 0,
            });
            self.start_worker(w)?;
        }
        self.wait_ready(Duration::from_secs(90)).await
    }

    /// Proxies to etcd and to the API server for the process `name`, and its kubeconfig.
    async fn links(&self, name: &str) -> anyhow::Result<Links> {
        let etcd_addr: SocketAddr = self.etcd.endpoints()[0]
            .trim_start_matches("http://")
            .parse()
            .context("etcd's endpoint is no address")?;
        let etcd = FaultProxy::start(etcd_addr).await?;
        let (api_url, base_kubeconfig) = match &self.api {
            ApiServer::Devcluster { url, kubeconfig } => (url, kubeconfig),
            ApiServer::Given(kubeconfig) => {
                return Ok(Links {
                    etcd,
                    api: None,
                    kubeconfig: kubeconfig.clone(),
                });
            }
        };
        let api_addr: SocketAddr = api_url
            .split_once("://")
            .map_or(api_url.as_str(), |(_, rest)| rest)
            .trim_end_matches('/')
            .parse()
            .context("the devcluster's URL is no address")?;
        let api = FaultProxy::start(api_addr).await?;
        let scheme = api_url.split_once("://").map_or("http", |(s, _)| s);
        let mut config = base_kubeconfig.clone();
        config["clusters"][0]["cluster"]["server"] = json!(format!("{scheme}://{}", api.addr()));
        let kubeconfig = self.dir()?.join(format!("{name}.kubeconfig"));
        std::fs::write(&kubeconfig, serde_json::to_string_pretty(&config)?)?;
        Ok(Links {
            etcd,
            api: Some(api),
            kubeconfig,
        })
    }

    fn dir(&self) -> anyhow::Result<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.path().to_owned())
            .context("the fleet's directory is gone")
    }

    fn common_flags(&self, links: &Links) -> Vec<String> {
        fleet_flags(
            &self.shape.name,
            &format!("http://{}", links.etcd.addr()),
            &links.kubeconfig,
        )
    }

    /// Starts the next life of coordinator slot `c`.
    ///
    /// # Errors
    /// When it cannot be started.
    pub fn start_coordinator(&mut self, c: usize) -> anyhow::Result<()> {
        let dir = self.dir()?;
        let slot = &self.coordinators[c];
        let id = format!("coordinator-{c}-{}", slot.lives);
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let front = slot.front.as_ref().context("a coordinator has a front")?;
        front.set_upstream(listen);
        let mut args: Vec<String> = [
            "coordinator",
            "--listen",
            &listen.to_string(),
            "--advertise",
            &front.addr().to_string(),
            "--id",
            &id,
        ]
        .map(String::from)
        .to_vec();
        args.extend(self.common_flags(&slot.links));
        args.extend(self.shape.coordinator_flags.iter().cloned());
        let child = spawn(&dir, &id, &self.flotilla, &args)?;
        let slot = &mut self.coordinators[c];
        slot.process = Some(child);
        slot.restart_at = None;
        slot.id = id;
        slot.lives += 1;
        Ok(())
    }

    /// Starts the next life of worker slot `w`.
    fn start_worker(&mut self, w: usize) -> anyhow::Result<()> {
        let dir = self.dir()?;
        let slot = &self.workers[w];
        let id = format!("worker-{w}-{}", slot.lives);
        let mut args: Vec<String> = [
            "worker",
            "--controllers",
            "deployment,replicaset",
            "--worker-id",
            &id,
            "--reconcile-journal",
            &self.journal.display().to_string(),
        ]
        .map(String::from)
        .to_vec();
        args.extend(self.shape.worker_flags.iter().cloned());
        args.extend(self.common_flags(&slot.links));
        let child = spawn(&dir, &id, &self.flotilla, &args)?;
        let slot = &mut self.workers[w];
        slot.process = Some(child);
        slot.restart_at = None;
        slot.id = id;
        slot.lives += 1;
        Ok(())
    }

    /// kill -9 worker slot `w` and start it again; returns the identity killed.
    pub fn kill_worker(&mut self, w: usize) -> anyhow::Result<String> {
        let slot = &mut self.workers[w];
        if let Some(mut process) = slot.process.take() {
            process.kill9();
        }
        let killed = slot.id.clone();
        self.deaths.insert(killed.clone(), journal_now_ns());
        self.start_worker(w)?;
        Ok(killed)
    }

    /// The identity of the coordinator that leads now, read from etcd directly.
    pub async fn leader(&self) -> Option<String> {
        let config = EtcdClientConfig::plaintext(self.etcd.endpoints());
        let lookup = async {
            let etcd = config.connect(&self.shape.name).await.ok()?;
            let election = Election::new(etcd, config.fleet_keys(&self.shape.name).election());
            election.leader().await.ok().flatten()
        };
        tokio::time::timeout(Duration::from_secs(3), lookup)
            .await
            .ok()
            .flatten()
            .map(|l| l.info.id)
    }

    /// The coordinator process of slot `c`, while it runs.
    pub fn coordinator(&self, c: usize) -> Option<&Child> {
        self.coordinators.get(c).and_then(|s| s.process.as_ref())
    }

    /// The fleet as its leader reports it (`flotilla status`).
    ///
    /// # Errors
    /// When no leader answers.
    pub async fn status(&self) -> anyhow::Result<flotilla_proto::StatusResponse> {
        crate::cmd::status::fetch(&self.etcd.endpoints(), &self.shape.name).await
    }

    /// The slot of the coordinator that leads now.
    pub async fn leader_slot(&self) -> Option<usize> {
        let leader = self.leader().await?;
        self.coordinators.iter().position(|s| s.id == leader)
    }

    /// Replaces the further flags of every coordinator, for its next life.
    pub fn set_coordinator_flags(&mut self, flags: Vec<String>) {
        self.shape.coordinator_flags = flags;
    }

    /// kill -9 coordinator slot `c`, as a crash would; it stays stopped until
    /// [`ChaosFleet::start_coordinator`].
    pub fn kill_coordinator(&mut self, c: usize) {
        if let Some(mut process) = self.coordinators[c].process.take() {
            process.kill9();
        }
    }

    /// Stops coordinator slot `c` as an operator would (SIGTERM: a leader resigns at once); it stays
    /// stopped until [`ChaosFleet::start_coordinator`].
    pub fn stop_coordinator(&mut self, c: usize) {
        drop(self.coordinators[c].process.take());
    }

    /// Compacts etcd at its current revision through the devcluster (`POST /flotilla/v1/compact`):
    /// a watch that resumes from an older resourceVersion is then answered 410 Gone, and relists.
    ///
    /// # Errors
    /// When the devcluster refuses, or the fleet runs on a given cluster.
    pub async fn compact(&self) -> anyhow::Result<()> {
        if self.devcluster.is_none() {
            bail!("compacting needs the devcluster's etcd; the fleet runs on a given cluster");
        }
        let request = kube::core::Request::new("/flotilla/v1/compact")
            .create(&PostParams::default(), Vec::new())?;
        self.client
            .request_text(request)
            .await
            .context("the devcluster did not compact")?;
        Ok(())
    }

    /// kill -9 the leader and start it again; returns the identity killed, `None` when no
    /// coordinator leads (a fault that finds no leader to kill is skipped).
    pub async fn kill_leader(&mut self) -> anyhow::Result<Option<String>> {
        let Some(leader) = self.leader().await else {
            return Ok(None);
        };
        let Some(c) = self.coordinators.iter().position(|s| s.id == leader) else {
            return Ok(None);
        };
        if let Some(mut process) = self.coordinators[c].process.take() {
            process.kill9();
        }
        self.start_coordinator(c)?;
        Ok(Some(leader))
    }

    /// Cuts `link`: every connection reset, new ones refused, until [`ChaosFleet::heal`]. On a given
    /// cluster the API links are direct: cutting one does nothing.
    pub fn cut(&self, link: Link) {
        self.set(link, true);
    }

    /// Heals `link`.
    pub fn heal(&self, link: Link) {
        self.set(link, false);
    }

    fn set(&self, link: Link, cut: bool) {
        let proxy = match link {
            Link::WorkerCoordinator(w) => {
                let Some(pid) = self.workers[w].process.as_ref().map(Child::pid) else {
                    return;
                };
                for front in self.coordinators.iter().filter_map(|c| c.front.as_ref()) {
                    if cut {
                        front.set_for(Clients::Pid(pid), Direction::Both, Fault::Cut);
                    } else {
                        front.heal();
                    }
                }
                return;
            }
            Link::WorkerEtcd(w) => Some(&self.workers[w].links.etcd),
            Link::WorkerApi(w) => self.workers[w].links.api.as_ref(),
            Link::CoordinatorEtcd(c) => Some(&self.coordinators[c].links.etcd),
            Link::CoordinatorApi(c) => self.coordinators[c].links.api.as_ref(),
        };
        let Some(proxy) = proxy else {
            return;
        };
        if cut {
            proxy.set(Fault::Cut);
        } else {
            proxy.heal();
        }
    }

    /// Heals every link.
    pub fn heal_all(&self) {
        for slot in self.coordinators.iter().chain(&self.workers) {
            slot.links.etcd.heal();
            if let Some(api) = &slot.links.api {
                api.heal();
            }
            if let Some(front) = &slot.front {
                front.heal();
            }
        }
    }

    /// kill -9 etcd and start it again on its data, on its ports; returns how long it was down.
    ///
    /// # Errors
    /// When it does not come back.
    pub async fn restart_etcd(&mut self) -> anyhow::Result<Duration> {
        let down = Instant::now();
        self.etcd.kill();
        self.etcd
            .restart()
            .await
            .context("etcd did not come back")?;
        Ok(down.elapsed())
    }

    /// Starts again, [`RESTART_BACKOFF`] after it exited, every fleet process that exited without being
    /// killed (recording it in [`ChaosFleet::unexpected_exits`] with its last log line).
    ///
    /// # Errors
    /// When the devcluster exited (the run cannot go on) or a process cannot be started.
    pub fn restart_exited(&mut self) -> anyhow::Result<()> {
        if let Some(devcluster) = self.devcluster.as_mut() {
            devcluster.check_running()?;
        }
        let now = Instant::now();
        let slots = (0..self.coordinators.len())
            .map(|c| (true, c))
            .chain((0..self.workers.len()).map(|w| (false, w)));
        for (coordinator, i) in slots.collect::<Vec<_>>() {
            let slot = if coordinator {
                &mut self.coordinators[i]
            } else {
                &mut self.workers[i]
            };
            if let Some(process) = slot.process.as_mut()
                && let Err(err) = process.check_running()
            {
                let last = process
                    .log_text()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .to_owned();
                let exit = format!("{err:#}: {last}");
                tracing::warn!(exit, "a fleet process exited; starting it again");
                self.unexpected_exits.push(exit);
                slot.process = None;
                slot.restart_at = Some(now + RESTART_BACKOFF);
                if !coordinator {
                    self.deaths.insert(slot.id.clone(), journal_now_ns());
                }
            }
            if slot.restart_at.is_some_and(|at| at <= now) {
                slot.restart_at = None;
                if coordinator {
                    self.start_coordinator(i)?;
                } else {
                    self.start_worker(i)?;
                }
            }
        }
        Ok(())
    }

    /// Waits until the leader runs both controllers with every worker connected, every shard owned
    /// and every informer synced.
    ///
    /// # Errors
    /// When it is not so within `bound`.
    pub async fn wait_ready(&mut self, bound: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + bound;
        let endpoints = self.etcd.endpoints();
        loop {
            if let Ok(s) = crate::cmd::status::fetch(&endpoints, &self.shape.name).await {
                let connected = s.workers.iter().filter(|w| w.connected).count();
                let owned: u32 = s.workers.iter().map(|w| w.shards).sum();
                let runs = |c: &str| s.queues.iter().any(|q| q.controller == c);
                if connected == self.workers.len()
                    && owned == s.shard_count
                    && s.informers.iter().all(|i| i.synced)
                    && runs("deployment")
                    && runs("replicaset")
                {
                    return Ok(());
                }
            }
            self.restart_exited()?;
            if Instant::now() > deadline {
                bail!("the fleet was not ready within {bound:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The workers' reconcile journal.
    pub fn journal(&self) -> &Path {
        &self.journal
    }

    /// Lives started so far, coordinators and workers (the first ones included).
    pub fn lives(&self) -> (usize, usize) {
        let sum = |slots: &[Slot]| slots.iter().map(|s| s.lives).sum();
        (sum(&self.coordinators), sum(&self.workers))
    }

    /// Stops every process and keeps the logs (and the journal); returns where they are.
    pub fn keep_logs(&mut self) -> PathBuf {
        self.stop();
        self.dir
            .take()
            .map(tempfile::TempDir::keep)
            .unwrap_or_default()
    }

    /// Workers first, so they hand back their leases, then the coordinators and the devcluster.
    fn stop(&mut self) {
        let mut workers: Vec<Child> = self
            .workers
            .iter_mut()
            .filter_map(|s| s.process.take())
            .collect();
        stop_all(&mut workers);
        let mut coordinators: Vec<Child> = self
            .coordinators
            .iter_mut()
            .filter_map(|s| s.process.take())
            .collect();
        stop_all(&mut coordinators);
        drop(self.devcluster.take());
    }
}

impl Drop for ChaosFleet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Now on the journal's clock.
pub(super) fn journal_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
