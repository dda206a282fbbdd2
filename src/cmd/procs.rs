//! Child processes of the commands that run a whole local fleet (`up`, `bench rollout`): spawning a
//! `flotilla` role with its log in a file, stopping it on drop, finding sibling binaries, and waiting
//! for the devcluster's API.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A child process, terminated (SIGTERM, then SIGKILL after 5 s) on drop. Its output goes to
/// `<dir>/<name>.log`.
pub struct Child {
    name: String,
    log: PathBuf,
    child: std::process::Child,
}

impl Child {
    /// The name it was spawned under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it at once (SIGKILL), as a crash would, and reaps it; dropping it afterwards signals
    /// nothing.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Everything it logged so far (empty when the log cannot be read).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// # Errors
    /// When the process has exited, naming it and its log.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            bail!(
                "{} exited ({status}); see {}",
                self.name,
                self.log.display()
            );
        }
        Ok(())
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Reaped already (killed, or seen exited): its pid may belong to another process by now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `program args…` with its output in `<dir>/<name>.log`.
///
/// # Errors
/// When the log cannot be created or the program cannot be started.
pub fn spawn(dir: &Path, name: &str, program: &Path, args: &[String]) -> anyhow::Result<Child> {
    spawn_with_env(dir, name, program, args, &[])
}

/// [`spawn`], with `env` added to (or replacing in) the environment the child inherits.
///
/// # Errors
/// When the log cannot be created or the program cannot be started.
pub fn spawn_with_env(
    dir: &Path,
    name: &str,
    program: &Path,
    args: &[String],
    env: &[(String, String)],
) -> anyhow::Result<Child> {
    let log_path = dir.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let child = std::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))?;
    Ok(Child {
        name: name.to_owned(),
        log: log_path,
        child,
    })
}

/// Stops `children` last-started first, so workers hand back their leases before coordinators go and
/// coordinators before the API server.
pub fn stop_all(children: &mut Vec<Child>) {
    while let Some(child) = children.pop() {
        drop(child);
    }
}

/// A loopback port that was free a moment ago (for a process that cannot report the port it bound).
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The flags every process of a fleet takes: its name, etcd, the Kubernetes API, metrics on a port of
/// its choosing (it logs the address), and `--insecure-plaintext`: the local demo and benchmarks run
/// on loopback without the certificates mutual TLS needs.
pub fn fleet_flags(fleet: &str, etcd_endpoints: &str, kubeconfig: &Path) -> Vec<String> {
    [
        "--insecure-plaintext",
        "--fleet",
        fleet,
        "--etcd-endpoints",
        etcd_endpoints,
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--metrics-listen",
        "127.0.0.1:0",
    ]
    .map(String::from)
    .to_vec()
}

/// A binary built next to this one.
///
/// # Errors
/// When it is not there, with the build command that makes it.
pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let path = me.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} is missing; build every binary first: cargo build --workspace --bins",
            path.display()
        );
    }
    Ok(path)
}

/// Waits until `kubeconfig` exists and the API server it names answers, and returns a client for it.
///
/// # Errors
/// When the API does not answer within 30 s.
pub async fn wait_for_api(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if kubeconfig.exists()
            && let Ok(client) = flotilla_common::kube_client(Some(kubeconfig)).await
            && client.apiserver_version().await.is_ok()
        {
            return Ok(client);
        }
        if Instant::now() > deadline {
            bail!("the devcluster did not come up within 30s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
