//! An etcd process for tests, the demo and benchmarks: started on free loopback ports, killed on drop;
//! plaintext, or ([`EtcdServer::start_tls`]) serving clients over TLS and demanding client
//! certificates, as a production etcd does.

use std::fs::File;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

/// Environment variable naming the etcd binary to run instead of `/usr/bin/etcd` or `etcd` on `PATH`.
pub const ETCD_BIN_ENV: &str = "FLOTILLA_ETCD_BIN";

/// How long [`EtcdServer::start`] waits for etcd to answer before giving up. etcd 3.4 on a loaded
/// 2-core machine elects itself within about a second; the slack covers parallel test binaries.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a start is retried with fresh ports when another process took a port between our probe
/// and etcd's bind.
const BIND_ATTEMPTS: usize = 5;

/// Errors of starting an etcd process.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No etcd binary could be found.
    #[error(
        "etcd binary not found (looked at ${ETCD_BIN_ENV}, /usr/bin/etcd and PATH); install the Debian package \
         etcd-server (`apt-get install etcd-server`) or set {ETCD_BIN_ENV}"
    )]
    BinaryMissing,
    /// Creating the temporary data directory or log file failed.
    #[error("cannot prepare the etcd data directory")]
    TempDir(#[source] std::io::Error),
    /// No free loopback port could be reserved.
    #[error("cannot find a free loopback port for etcd")]
    NoFreePort(#[source] std::io::Error),
    /// The etcd process could not be spawned.
    #[error("cannot run {binary}")]
    Spawn {
        /// The binary that was run.
        binary: PathBuf,
        /// Why spawning failed.
        #[source]
        source: std::io::Error,
    },
    /// etcd exited during start-up for a reason other than a port race.
    #[error("etcd exited during start-up ({status}); log at {log}: {tail}")]
    Exited {
        /// The exit status.
        status: String,
        /// Where etcd logged.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// etcd did not answer in time.
    #[error("etcd did not become ready within {timeout:?}; log at {log}: {tail}")]
    NotReady {
        /// How long we waited.
        timeout: Duration,
        /// Where etcd logged.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
    /// Every attempt lost the race for its ports.
    #[error("etcd could not bind free ports after {BIND_ATTEMPTS} attempts; last log at {log}")]
    PortsTaken {
        /// Where the last attempt logged.
        log: PathBuf,
    },
}

/// Client TLS of an [`EtcdServer`] (etcd's `--cert-file`, `--key-file`, `--trusted-ca-file` and
/// `--client-cert-auth`): etcd serves `https://` and refuses a client without a certificate signed by
/// `trusted_ca`. The serving certificate must name `127.0.0.1` (an IP SAN), the address clients dial.
#[derive(Debug, Clone)]
pub struct EtcdServerTls {
    /// The serving certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA client certificates must chain to (PEM).
    pub trusted_ca: PathBuf,
}

/// A single-member etcd listening on loopback, with its data in a temporary directory.
///
/// The process is killed and its data directory removed when the value is dropped, so a test that
/// panics still cleans up. etcd's own output goes to [`EtcdServer::log_path`], not to the terminal.
pub struct EtcdServer {
    child: Option<Child>,
    /// Kills etcd if this process dies without running Drop (SIGKILL, abort, a test timeout).
    watchdog: Option<Child>,
    binary: PathBuf,
    /// Client TLS; `None` serves plaintext.
    tls: Option<EtcdServerTls>,
    /// Length of the log when the process was last spawned: readiness of a TLS server is read from
    /// what etcd logged since.
    log_offset: u64,
    client_url: String,
    peer_url: String,
    log_path: PathBuf,
    // Its Drop removes the data directory and the log; etcd restarts on the same data.
    dir: TempDir,
}

impl std::fmt::Debug for EtcdServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdServer")
            .field("client_url", &self.client_url)
            .field("log_path", &self.log_path)
            .finish()
    }
}

impl EtcdServer {
    /// Starts etcd on free loopback ports and waits until it serves requests.
    ///
    /// # Errors
    /// [`EtcdError::BinaryMissing`] when no etcd binary is installed; the other variants when the
    /// process cannot start or does not answer within 30 s (they name the log file).
    pub async fn start() -> Result<Self, EtcdError> {
        Self::start_with(None).await
    }

    /// Starts etcd as [`EtcdServer::start`] does, serving clients over TLS with client certificate
    /// authentication ([`EtcdServerTls`]); [`EtcdServer::endpoints`] are then `https://` URLs. etcd's
    /// auth is off, as etcd starts: a test enables it through the auth API.
    ///
    /// # Errors
    /// As [`EtcdServer::start`]; unreadable or mismatched certificate files make etcd exit
    /// ([`EtcdError::Exited`], with its log).
    pub async fn start_tls(tls: EtcdServerTls) -> Result<Self, EtcdError> {
        Self::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<EtcdServerTls>) -> Result<Self, EtcdError> {
        let binary = find_binary()?;
        let mut last_log = PathBuf::new();
        for _ in 0..BIND_ATTEMPTS {
            match Self::start_once(&binary, tls.clone()).await {
                Ok(server) => return Ok(server),
                Err(Attempt::PortRace(log)) => {
                    tracing::debug!(log = %log.display(), "etcd lost a port race; retrying on new ports");
                    last_log = log;
                }
                Err(Attempt::Failed(err)) => return Err(err),
            }
        }
        Err(EtcdError::PortsTaken { log: last_log })
    }

    async fn start_once(binary: &Path, tls: Option<EtcdServerTls>) -> Result<Self, Attempt> {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-etcd-")
            .tempdir()
            .map_err(|e| Attempt::Failed(EtcdError::TempDir(e)))?;
        let client_port = free_port().map_err(Attempt::Failed)?;
        let peer_port = free_port().map_err(Attempt::Failed)?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let client_url = format!("{scheme}://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let log_path = dir.path().join("etcd.log");
        let mut server = EtcdServer {
            child: None,
            watchdog: None,
            binary: binary.to_path_buf(),
            tls,
            log_offset: 0,
            client_url,
            peer_url,
            log_path,
            dir,
        };
        server.spawn().map_err(Attempt::Failed)?;
        server.wait_ready().await?;
        Ok(server)
    }

    /// Starts the etcd process on this server's ports and data directory (appending to its log).
    fn spawn(&mut self) -> Result<(), EtcdError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(EtcdError::TempDir)?;
        let log_err = log.try_clone().map_err(EtcdError::TempDir)?;
        self.log_offset = log.metadata().map_err(EtcdError::TempDir)?.len();
        let (client_url, peer_url) = (&self.client_url, &self.peer_url);
        let mut command = Command::new(&self.binary);
        if let Some(tls) = &self.tls {
            command
                .arg(format!("--cert-file={}", tls.cert.display()))
                .arg(format!("--key-file={}", tls.key.display()))
                .arg(format!("--trusted-ca-file={}", tls.trusted_ca.display()))
                .arg("--client-cert-auth");
        }
        let child = command
            .arg("--name=flotilla")
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=flotilla={peer_url}"))
            .arg("--logger=zap")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|source| EtcdError::Spawn {
                binary: self.binary.clone(),
                source,
            })?;
        self.watchdog = spawn_watchdog(child.id());
        self.child = Some(child);
        Ok(())
    }

    /// Starts etcd again after [`EtcdServer::kill`], on the same ports and with the same data, as an
    /// etcd that crashed and was restarted by its supervisor; waits until it serves requests. A no-op
    /// while it runs.
    ///
    /// # Errors
    /// As [`EtcdServer::start`]; a port taken meanwhile by another process is reported as
    /// [`EtcdError::Exited`] with etcd's log.
    pub async fn restart(&mut self) -> Result<(), EtcdError> {
        if self.is_running() {
            return Ok(());
        }
        self.spawn()?;
        self.wait_ready().await.map_err(|attempt| match attempt {
            Attempt::Failed(err) => err,
            Attempt::PortRace(log) => EtcdError::Exited {
                status: "port taken".into(),
                tail: log_tail(&log),
                log,
            },
        })
    }

    async fn wait_ready(&mut self) -> Result<(), Attempt> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                let tail = log_tail(&self.log_path);
                if tail.contains("address already in use") {
                    return Err(Attempt::PortRace(self.log_path.clone()));
                }
                return Err(Attempt::Failed(EtcdError::Exited {
                    status: status.to_string(),
                    log: self.log_path.clone(),
                    tail,
                }));
            }
            if self.answers().await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Attempt::Failed(EtcdError::NotReady {
                    timeout: READY_TIMEOUT,
                    log: self.log_path.clone(),
                    tail: log_tail(&self.log_path),
                }));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn answers(&self) -> bool {
        if self.tls.is_some() {
            // A status request would need a client certificate (and, once a test enabled auth, a
            // user); etcd's log says when its TLS listener serves.
            return log_since(&self.log_path, self.log_offset)
                .contains("serving client traffic securely");
        }
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(Duration::from_secs(2));
        match etcd_client::Client::connect([self.client_url.as_str()], Some(options)).await {
            Ok(mut client) => client.status().await.is_ok(),
            Err(_) => false,
        }
    }

    /// The client URLs, e.g. `["http://127.0.0.1:40123"]` (`https://` for [`EtcdServer::start_tls`]).
    pub fn endpoints(&self) -> Vec<String> {
        vec![self.client_url.clone()]
    }

    /// Where etcd writes its log (inside the temporary directory; gone once this value is dropped).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Whether the process is still running (false after [`EtcdServer::kill`] or a crash).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Kills the process at once (SIGKILL) and reaps it; the data directory stays until drop, so
    /// [`EtcdServer::restart`] can start it again. Calling it again is a no-op.
    pub fn kill(&mut self) {
        for mut child in [self.child.take(), self.watchdog.take()]
            .into_iter()
            .flatten()
        {
            // Already exited is the only failure of kill(); wait() reaps either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops etcd and removes its data directory.
    pub fn stop(mut self) {
        self.kill();
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Why one start attempt failed: lost a port race (retry), or anything else (give up).
enum Attempt {
    PortRace(PathBuf),
    Failed(EtcdError),
}

fn find_binary() -> Result<PathBuf, EtcdError> {
    if let Some(path) = std::env::var_os(ETCD_BIN_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(EtcdError::BinaryMissing)
        };
    }
    let debian = PathBuf::from("/usr/bin/etcd");
    if debian.is_file() {
        return Ok(debian);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
        .ok_or(EtcdError::BinaryMissing)
}

/// A shell loop that kills `etcd_pid` once this process is gone. Without it a test binary killed
/// by a timeout would leave etcd running forever (no PR_SET_PDEATHSIG without unsafe code).
/// Best effort: without `sh`, there is simply no watchdog.
fn spawn_watchdog(etcd_pid: u32) -> Option<Child> {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill -9 {etcd_pid} 2>/dev/null",
        parent = std::process::id()
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

fn free_port() -> Result<u16, EtcdError> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(EtcdError::NoFreePort)?;
    let port = listener.local_addr().map_err(EtcdError::NoFreePort)?.port();
    Ok(port)
}

/// What the log holds past byte `offset` (empty when it cannot be read).
fn log_since(path: &Path, offset: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.read_to_end(&mut bytes);
    }
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// The last ~2 KiB of the log, for error messages.
fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    let start = text.len().saturating_sub(2048);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].trim().to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_started_server_answers_and_is_gone_after_drop() {
        let server = EtcdServer::start().await.unwrap();
        let endpoints = server.endpoints();
        let mut client = etcd_client::Client::connect(&endpoints, None)
            .await
            .unwrap();
        client.put("k", "v", None).await.unwrap();
        let log = server.log_path().to_path_buf();
        assert!(log.exists());
        drop(server);
        assert!(!log.exists(), "the temporary directory is removed on drop");
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(300))
            .with_timeout(Duration::from_millis(300));
        let after = etcd_client::Client::connect(&endpoints, Some(options)).await;
        let still_answers = match after {
            Ok(mut client) => client.status().await.is_ok(),
            Err(_) => false,
        };
        assert!(!still_answers, "etcd must be killed on drop");
    }

    #[tokio::test]
    async fn two_servers_run_side_by_side_on_different_ports() {
        let (a, b) = tokio::join!(EtcdServer::start(), EtcdServer::start());
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_ne!(a.endpoints(), b.endpoints());
    }

    #[tokio::test]
    async fn kill_stops_the_process_and_is_idempotent() {
        let mut server = EtcdServer::start().await.unwrap();
        assert!(server.is_running());
        server.kill();
        assert!(!server.is_running());
        server.kill();
    }
}
