//! Real fleet processes for end-to-end tests: coordinators and workers started from the built binaries
//! on loopback, with their logs in a temp dir, killed (SIGKILL) on drop. Plus helpers to ask the leader
//! for its status.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use flotilla_common::tls::ClientTransport;
use flotilla_common::{Election, FleetKeys, Leadership, connect_etcd};
use flotilla_proto as proto;
use tempfile::TempDir;

use super::wait::wait_for;

/// Timing for test fleets: short leases so failover and lease-expiry tests stay quick.
pub const LEASE: Duration = Duration::from_secs(3);

/// The directory holding the workspace's binaries (`flotilla`, `fleet-probe`, `greeting-controller`).
pub fn bin_dir() -> PathBuf {
    let flotilla = PathBuf::from(env!("CARGO_BIN_EXE_flotilla"));
    flotilla.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The path of a workspace binary; panics with the command that builds it when it is missing.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo build --workspace --bins` first (the README's test command does)",
        path.display()
    );
    path
}

/// One child process; SIGKILLed on drop unless it already exited.
pub struct Proc {
    /// Its name in the test (also its log file's stem).
    pub name: String,
    child: tokio::process::Child,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Proc {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// SIGKILL: the process gets no chance to clean up (a crash).
    pub async fn kill9(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// SIGTERM, then waits for the exit (bounded).
    pub async fn sigterm(&mut self, timeout: Duration) {
        let pid = self.pid();
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(_) => {}
            Err(_) => panic!(
                "{} did not exit within {timeout:?} of SIGTERM; log: {}",
                self.name,
                self.log.display()
            ),
        }
    }

    /// Where its `/metrics`, `/healthz` and `/readyz` are served: it binds port 0 and logs the address
    /// (picking a free port for it would race with every other process on the machine).
    pub async fn metrics_addr(&self) -> String {
        wait_for(
            Duration::from_secs(30),
            &format!("{} to log its metrics address", self.name),
            || async {
                let log = self.log_text();
                let line = log
                    .lines()
                    .find(|l| l.contains(" started") && l.contains("metrics="))?;
                let rest = &line[line.find("metrics=")? + "metrics=".len()..];
                Some(rest.split_whitespace().next()?.to_owned())
            },
        )
        .await
    }

    /// The text of its `/metrics` (empty when it does not answer).
    pub async fn metrics_text(&self) -> String {
        let url = format!("http://{}/metrics", self.metrics_addr().await);
        tokio::task::spawn_blocking(move || http_get(&url))
            .await
            .unwrap_or_default()
    }

    /// The HTTP status of `path` on its ops port (0 when it does not answer).
    pub async fn http_status(&self, path: &str) -> u16 {
        let url = format!("http://{}{path}", self.metrics_addr().await);
        tokio::task::spawn_blocking(move || http_get_status(&url))
            .await
            .unwrap_or(0)
    }

    /// The HTTP status and body of `path` on its ops port ((0, "") when it does not answer).
    pub async fn http_get(&self, path: &str) -> (u16, String) {
        let url = format!("http://{}{path}", self.metrics_addr().await);
        tokio::task::spawn_blocking(move || {
            let raw = http_get_raw(&url);
            let code = raw
                .split(' ')
                .nth(1)
                .and_then(|code| code.parse().ok())
                .unwrap_or(0);
            let body = raw
                .split_once("\r\n\r\n")
                .map(|(_, body)| body.to_owned())
                .unwrap_or_default();
            (code, body)
        })
        .await
        .unwrap_or_default()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A fleet under test: names, endpoints, and the processes started for it.
pub struct Fleet {
    /// The fleet name (unique per test).
    pub name: String,
    /// etcd for the fleet's leases and shard map.
    pub etcd_endpoints: Vec<String>,
    /// The cluster the fleet reconciles.
    pub kubeconfig: PathBuf,
    /// How [`Fleet::status`] reaches the leader: plaintext, as every process started without TLS flags
    /// runs (`--insecure-plaintext`); set it to mutual TLS for a fleet started with `--tls-*` flags.
    pub admin: ClientTransport,
    /// The test's scope, read from the kubeconfig the fleet was made with (see
    /// `support::namespace`); `None` for a kubeconfig no [`TestCluster`](super::cluster::TestCluster)
    /// wrote.
    pub scope: Option<String>,
    /// `RUST_LOG` of the processes started from now on; `None`: `FLOTILLA_TEST_LOG`, or `info`.
    pub rust_log: Option<String>,
    dir: Option<TempDir>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Keep the logs of a failing test: its panic message points at them.
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!("keeping fleet logs in {}", dir.keep().display());
        }
    }
}

impl Fleet {
    /// A fleet on `cluster` with one coordinator (`c0`) and `workers` processes of
    /// `flotilla worker --controllers <controllers>` (`w0`, `w1`, …), once every worker is connected.
    pub async fn of_controllers(
        cluster: &super::cluster::TestCluster,
        controllers: &str,
        workers: usize,
    ) -> (Fleet, Vec<Proc>) {
        let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
        let mut procs = vec![fleet.coordinator("c0", &[])];
        for i in 0..workers {
            procs.push(fleet.worker(
                "flotilla",
                &format!("w{i}"),
                &["worker", "--controllers", controllers],
            ));
        }
        fleet
            .wait_for_workers(workers, std::time::Duration::from_secs(60))
            .await;
        (fleet, procs)
    }

    /// A fleet with a unique name on `etcd_endpoints`, using the cluster behind `kubeconfig`, in the
    /// scope that kubeconfig carries (a [`TestCluster`](super::cluster::TestCluster)'s does); it is
    /// read now, so pointing [`Fleet::kubeconfig`] at another file afterwards (a least-privilege
    /// identity) keeps it.
    pub fn new(etcd_endpoints: Vec<String>, kubeconfig: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-fleet-")
            .tempdir()
            .expect("temp dir");
        let name = format!("t{}", super::namespace::random_suffix(8));
        Self {
            name,
            etcd_endpoints,
            kubeconfig: kubeconfig.to_path_buf(),
            admin: ClientTransport::Plaintext,
            scope: scope_in(kubeconfig),
            rust_log: None,
            dir: Some(dir),
        }
    }

    fn spawn(&self, name: &str, program: &Path, args: &[String]) -> Proc {
        let log = self.dir().join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let err = file.try_clone().expect("log file");
        let child = tokio::process::Command::new(program)
            .args(args)
            .env(
                "RUST_LOG",
                self.rust_log.clone().unwrap_or_else(|| {
                    std::env::var("FLOTILLA_TEST_LOG").unwrap_or_else(|_| "info".into())
                }),
            )
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        Proc {
            name: name.to_owned(),
            child,
            log,
        }
    }

    /// Starts `flotilla coordinator` with test timing (lease 3 s).
    ///
    /// On a shared cluster (`FLOTILLA_TEST_KUBECONFIG`) the coordinator is scoped to this test's
    /// namespaces — those [`unique_namespace`](super::namespace::unique_namespace) creates with the
    /// test's client, before or after the fleet starts — with `--namespace-selector
    /// flotilla.dev/test-scope=<scope>` ([`Fleet::scope`]), unless `extra` scopes it already. A selector
    /// rather than `--namespaces <list>`, because most tests create their namespaces after their fleet
    /// is up and a list is fixed at start-up. So tests running in parallel on one cluster, in one
    /// process or many, never reconcile each other's objects, nor namespaces earlier tests left.
    /// What stays cluster-wide by nature: cluster-scoped kinds (Nodes, PersistentVolumes, …) are seen
    /// by every test's fleet, so a garbage collector still deletes a cluster-scoped dependent whose
    /// owners are all gone (it decides against the API, so two fleets agree, and a test's
    /// cluster-scoped objects should carry its random suffix in their names); the namespace and
    /// serviceaccount controllers act only on the test's own Namespaces, which the selector picks too.
    /// On a devcluster (one per test) nothing is added.
    pub fn coordinator(&self, id: &str, extra: &[&str]) -> Proc {
        self.coordinator_via(id, extra, &self.etcd_endpoints, &self.kubeconfig)
    }

    /// [`Fleet::coordinator`] reaching etcd at `etcd_endpoints` and the API through `kubeconfig`
    /// instead of the fleet's own (proxies a test can cut, `support::links`).
    pub fn coordinator_via(
        &self,
        id: &str,
        extra: &[&str],
        etcd_endpoints: &[String],
        kubeconfig: &Path,
    ) -> Proc {
        let mut args: Vec<String> = [
            "coordinator",
            "--id",
            id,
            "--fleet",
            &self.name,
            "--listen",
            "127.0.0.1:0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Test timing, unless `extra` sets a flag itself (a flag given twice is refused).
        for [flag, value] in [
            ["--leader-elect-lease-duration", "3s"],
            ["--leader-elect-renew-deadline", "2s"],
            ["--leader-elect-retry-period", "500ms"],
            ["--worker-reconnect-grace", "5s"],
        ] {
            if !extra.contains(&flag) {
                args.extend([flag.to_owned(), value.to_owned()]);
            }
        }
        args.push("--etcd-endpoints".into());
        args.push(etcd_endpoints.join(","));
        args.push("--kubeconfig".into());
        args.push(kubeconfig.display().to_string());
        args.push("--metrics-listen".into());
        args.push("127.0.0.1:0".into());
        args.extend(extra.iter().map(|s| s.to_string()));
        plaintext_unless_tls(&mut args, extra);
        let scoped = extra
            .iter()
            .any(|a| a.starts_with("--namespaces") || a.starts_with("--namespace-selector"));
        if super::cluster::is_external() && !scoped {
            let scope = self.scope.as_deref().unwrap_or_else(|| {
                panic!(
                    "fleet {} has no test scope: make it with the kubeconfig of the test's \
                     TestCluster (kubeconfig_path), or pass --namespaces",
                    self.name
                )
            });
            args.push("--namespace-selector".into());
            args.push(super::namespace::scope_selector(scope));
        }
        self.spawn(id, &binary("flotilla"), &args)
    }

    /// Starts a worker binary (`fleet-probe`, `greeting-controller`, or `flotilla` with `worker` as the
    /// first extra argument) with test timing (lease 3 s).
    pub fn worker(&self, program: &str, id: &str, extra: &[&str]) -> Proc {
        self.worker_via(program, id, extra, &self.etcd_endpoints, &self.kubeconfig)
    }

    /// [`Fleet::worker`] reaching etcd at `etcd_endpoints` and the API through `kubeconfig` instead
    /// of the fleet's own (proxies a test can cut, `support::links`).
    pub fn worker_via(
        &self,
        program: &str,
        id: &str,
        extra: &[&str],
        etcd_endpoints: &[String],
        kubeconfig: &Path,
    ) -> Proc {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.extend(
            [
                "--worker-id",
                id,
                "--fleet",
                &self.name,
                "--lease-ttl",
                "3s",
                "--lease-renew-interval",
                "500ms",
                "--shutdown-grace-period",
                "2s",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        args.push("--etcd-endpoints".into());
        args.push(etcd_endpoints.join(","));
        args.push("--kubeconfig".into());
        args.push(kubeconfig.display().to_string());
        args.push("--metrics-listen".into());
        args.push("127.0.0.1:0".into());
        plaintext_unless_tls(&mut args, extra);
        self.spawn(id, &binary(program), &args)
    }

    /// The current leader, if any.
    pub async fn leader(&self) -> Option<Leadership> {
        let etcd = connect_etcd(&self.etcd_endpoints).await.ok()?;
        Election::new(etcd, FleetKeys::new(&self.name).election())
            .leader()
            .await
            .ok()
            .flatten()
    }

    /// The leader's status (asked over [`Fleet::admin`]); `None` while there is no leader or it does
    /// not answer.
    pub async fn status(&self) -> Option<proto::StatusResponse> {
        let leader = self.leader().await?;
        let endpoint =
            tonic::transport::Endpoint::from_shared(format!("http://{}", leader.info.address))
                .ok()?
                .connect_timeout(Duration::from_secs(1))
                .timeout(Duration::from_secs(2));
        let channel = self.admin.connect(endpoint).await.ok()?;
        let mut admin = proto::admin_client::AdminClient::new(channel);
        admin
            .status(proto::StatusRequest {})
            .await
            .ok()
            .map(|r| r.into_inner())
    }

    /// Waits until the leader reports `n` connected workers and every shard owned.
    pub async fn wait_for_workers(&self, n: usize, timeout: Duration) -> proto::StatusResponse {
        wait_for(
            timeout,
            &format!("{n} connected workers owning all shards"),
            || async {
                let s = self.status().await?;
                let connected = s.workers.iter().filter(|w| w.connected).count();
                let owned: u32 = s.workers.iter().map(|w| w.shards).sum();
                (connected == n && owned == s.shard_count).then_some(s)
            },
        )
        .await
    }

    /// Where the processes' logs go.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new("/tmp"), TempDir::path)
    }
}

/// The scope (`support::namespace`) a kubeconfig carries: the default namespace of its current
/// context (without one, its first), when that is a scope.
fn scope_in(kubeconfig: &Path) -> Option<String> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).ok()?;
    let current = file.current_context.as_deref();
    let named = match current {
        Some(name) => file.contexts.iter().find(|c| c.name == name)?,
        None => file.contexts.first()?,
    };
    let namespace = named.context.as_ref()?.namespace.clone()?;
    super::namespace::is_scope(&namespace).then_some(namespace)
}

/// Adds `--insecure-plaintext` to a fleet process's `args` unless its `extra` flags choose the transport
/// (a `--tls-*` flag, or `--insecure-plaintext` already): without either the process refuses to start.
fn plaintext_unless_tls(args: &mut Vec<String>, extra: &[&str]) {
    if !extra
        .iter()
        .any(|a| a.starts_with("--tls-") || a.starts_with("--insecure-plaintext"))
    {
        args.push("--insecure-plaintext".into());
    }
}

/// The status code of a plain HTTP/1.0 GET on loopback; 0 on any failure.
fn http_get_status(url: &str) -> u16 {
    http_get_raw(url)
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// A plain HTTP/1.0 GET on loopback; the body, or empty on any failure.
fn http_get(url: &str) -> String {
    http_get_raw(url)
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// The whole response of a plain HTTP/1.0 GET on loopback, or empty on any failure.
fn http_get_raw(url: &str) -> String {
    use std::io::{Read, Write};
    let Some(rest) = url.strip_prefix("http://") else {
        return String::new();
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut stream) = std::net::TcpStream::connect(host) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(stream, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").is_err() {
        return String::new();
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

/// The value of a metric series in Prometheus text (the first line starting with `series`).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
