//! Fleet processes whose network links go through proxies a test can cut, blackhole, delay or
//! throttle ([`FaultProxy`]): each process gets a proxy of its own in front of etcd
//! (`--etcd-endpoints`) and in front of the Kubernetes API (a copy of the kubeconfig whose `server:`
//! names the proxy), and a coordinator gets one in front of its gRPC listener (`--advertise`), so
//! one link of one process breaks while every other link stays up.
//!
//! Every worker dials the coordinator's advertised address, so all of them share its gRPC proxy;
//! cut one worker from its coordinator with
//! `coordinator.grpc.set_for(Clients::Pid(worker.proc.pid()), Direction::Both, Fault::Cut)`.
//!
//! Works on a devcluster and on the cluster `FLOTILLA_TEST_KUBECONFIG` names: an `https` server
//! keeps its certificate checked, because the copied kubeconfig sets `tls-server-name` to the
//! server's own host.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use flotilla_devcluster::{Clients, Direction, Fault, FaultProxy};
use kube::config::Kubeconfig;

use super::fleet::{Fleet, Proc};
use super::wait::wait_for;

/// The etcd and API links of one process, each through its own proxy.
pub struct Links {
    /// In front of the fleet's etcd (its first endpoint).
    pub etcd: FaultProxy,
    /// In front of the Kubernetes API server of the fleet's kubeconfig.
    pub api: FaultProxy,
    /// A copy of the fleet's kubeconfig whose current cluster's `server:` is [`Links::api`].
    pub kubeconfig: PathBuf,
    /// `--etcd-endpoints` through [`Links::etcd`].
    pub etcd_endpoints: Vec<String>,
}

impl Links {
    /// Proxies for a process called `name` of `fleet`; its kubeconfig copy goes to the fleet's
    /// directory as `<name>.kubeconfig`.
    ///
    /// # Panics
    /// When the fleet's etcd endpoint or kubeconfig server cannot be parsed or resolved, or a proxy
    /// cannot listen.
    pub async fn new(fleet: &Fleet, name: &str) -> Links {
        let endpoint = fleet
            .etcd_endpoints
            .first()
            .unwrap_or_else(|| panic!("fleet {} has no etcd endpoint", fleet.name));
        let (scheme, _host, etcd_upstream) = resolve_url(endpoint).await;
        let etcd = FaultProxy::start(etcd_upstream)
            .await
            .unwrap_or_else(|err| panic!("cannot start an etcd proxy: {err}"));
        let etcd_endpoints = vec![format!("{scheme}://{}", etcd.addr())];

        let mut file = Kubeconfig::read_from(&fleet.kubeconfig).unwrap_or_else(|err| {
            panic!(
                "cannot read kubeconfig {}: {err}",
                fleet.kubeconfig.display()
            )
        });
        let cluster = current_cluster(&mut file, &fleet.kubeconfig);
        let server = cluster
            .server
            .clone()
            .unwrap_or_else(|| panic!("kubeconfig {} names no server", fleet.kubeconfig.display()));
        let (scheme, host, api_upstream) = resolve_url(&server).await;
        let api = FaultProxy::start(api_upstream)
            .await
            .unwrap_or_else(|err| panic!("cannot start an API proxy: {err}"));
        cluster.server = Some(format!("{scheme}://{}", api.addr()));
        if scheme == "https" && cluster.tls_server_name.is_none() {
            // The certificate names the real server, not the proxy's loopback address.
            cluster.tls_server_name = Some(host);
        }
        let kubeconfig = fleet.dir().join(format!("{name}.kubeconfig"));
        let text = serde_json::to_string_pretty(&file)
            .unwrap_or_else(|err| panic!("cannot encode a kubeconfig: {err}"));
        std::fs::write(&kubeconfig, text).unwrap_or_else(|err| {
            panic!("cannot write kubeconfig {}: {err}", kubeconfig.display())
        });
        Links {
            etcd,
            api,
            kubeconfig,
            etcd_endpoints,
        }
    }

    /// Lifts every fault on both links.
    pub fn heal(&self) {
        self.etcd.heal();
        self.api.heal();
    }
}

/// A worker started with its links through proxies.
pub struct LinkedWorker {
    /// The process.
    pub proc: Proc,
    /// Its etcd and API links.
    pub links: Links,
}

/// A coordinator started with its links through proxies, and a proxy in front of its gRPC listener
/// that it advertises to workers.
pub struct LinkedCoordinator {
    /// The process.
    pub proc: Proc,
    /// Its etcd and API links.
    pub links: Links,
    /// In front of its gRPC listener: every worker's stream to it, and [`Fleet::status`], pass here.
    pub grpc: FaultProxy,
}

/// Starts [`Fleet::worker`] `id` (`program`, `extra` as there) with its links through proxies.
pub async fn worker(fleet: &Fleet, program: &str, id: &str, extra: &[&str]) -> LinkedWorker {
    let links = Links::new(fleet, id).await;
    let proc = fleet.worker_via(program, id, extra, &links.etcd_endpoints, &links.kubeconfig);
    LinkedWorker { proc, links }
}

/// Starts [`Fleet::coordinator`] `id` with its links through proxies and `--advertise` naming its
/// gRPC proxy; returns once it listens and the proxy forwards to it.
///
/// # Panics
/// When `extra` already has `--advertise`, or the coordinator does not log its address within 30 s.
pub async fn coordinator(fleet: &Fleet, id: &str, extra: &[&str]) -> LinkedCoordinator {
    assert!(
        !extra.iter().any(|a| a.starts_with("--advertise")),
        "links::coordinator sets --advertise itself"
    );
    let links = Links::new(fleet, id).await;
    // Until the coordinator says where it listens, a worker that dials the proxy is reset and retries.
    let unknown: SocketAddr = ([127, 0, 0, 1], 1).into();
    let grpc = FaultProxy::start(unknown)
        .await
        .unwrap_or_else(|err| panic!("cannot start a gRPC proxy: {err}"));
    grpc.set(Fault::Cut);
    let advertise = grpc.addr().to_string();
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["--advertise", &advertise]);
    let proc = fleet.coordinator_via(id, &args, &links.etcd_endpoints, &links.kubeconfig);
    let listen = grpc_addr(&proc).await;
    grpc.set_upstream(listen);
    grpc.heal();
    LinkedCoordinator { proc, links, grpc }
}

/// The gRPC address a coordinator logged at start (`coordinator started addr=…`).
pub async fn grpc_addr(proc: &Proc) -> SocketAddr {
    wait_for(
        Duration::from_secs(30),
        &format!("{} to log its gRPC address", proc.name),
        || async {
            let log = proc.log_text();
            let line = log.lines().find(|l| l.contains("coordinator started"))?;
            let addr = line
                .split_whitespace()
                .find_map(|field| field.strip_prefix("addr="))?;
            addr.parse().ok()
        },
    )
    .await
}

/// The cluster entry of `file`'s current context (its first context without one).
fn current_cluster<'a>(file: &'a mut Kubeconfig, path: &Path) -> &'a mut kube::config::Cluster {
    let context = match file.current_context.as_deref() {
        Some(current) => file.contexts.iter().find(|c| c.name == current),
        None => file.contexts.first(),
    };
    let cluster_name = context
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .unwrap_or_else(|| panic!("kubeconfig {} has no current context", path.display()));
    file.clusters
        .iter_mut()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.as_mut())
        .unwrap_or_else(|| {
            panic!(
                "kubeconfig {} has no cluster {cluster_name}",
                path.display()
            )
        })
}

/// `(scheme, host, resolved address)` of a `scheme://host[:port][/path]` URL; the port defaults to
/// the scheme's (443 for https, 80 for http).
async fn resolve_url(url: &str) -> (String, String, SocketAddr) {
    let (scheme, rest) = url
        .split_once("://")
        .unwrap_or_else(|| panic!("{url} is not a URL"));
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (
            host,
            port.parse::<u16>()
                .unwrap_or_else(|err| panic!("bad port in {url}: {err}")),
        ),
        _ => (authority, if scheme == "https" { 443 } else { 80 }),
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addr = tokio::net::lookup_host((bare, port))
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .unwrap_or_else(|| panic!("cannot resolve {url}"));
    (scheme.to_owned(), bare.to_owned(), addr)
}
