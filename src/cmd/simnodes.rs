//! `flotilla simnodes`: simulated nodes (kwok-like) against any Kubernetes API reachable through a
//! kubeconfig. Runs until SIGINT/SIGTERM.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use flotilla_devcluster::{NodeSimulator, SimConfig, serve_control};

use super::devcluster::shutdown_signal;
use flotilla_common::parse_duration;

/// Flags of `flotilla simnodes`.
#[derive(clap::Args)]
pub struct Args {
    /// Kubeconfig of the cluster to add nodes to [default: $KUBECONFIG or ~/.kube/config].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How many simulated nodes (sim-node-0..N-1) to run.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Nodes that start stopped (no heartbeats, pods frozen); repeat the flag for several.
    #[arg(long = "stop-node", value_name = "NAME")]
    pub stop_nodes: Vec<String>,
    /// Delay before a bound pod is reported Running and Ready.
    #[arg(long, value_parser = parse_duration, default_value = "100ms")]
    pub pod_ready_delay: Duration,
    /// How long pods with restartPolicy Never/OnFailure run before they are reported Succeeded.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub job_pod_duration: Duration,
    /// Whether the node simulator gives each node its pod range (`spec.podCIDR`) at registration.
    /// `--assign-pod-cidrs=false` registers nodes without one, for a node-ipam controller
    /// (`--allocate-node-cidrs`) to assign; their pods stay Pending until it does.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub assign_pod_cidrs: bool,
    /// Serve the node control routes on this address (plain HTTP; keep it on loopback):
    /// `POST /flotilla/v1/nodes/{name}/stop`, `…/start` and `…/conditions` with a JSON body such as
    /// `{"MemoryPressure": true}`, as `flotilla devcluster --nodes N` serves them. Unset: none.
    #[arg(long, value_name = "ADDR")]
    pub control_listen: Option<std::net::SocketAddr>,
}

/// Runs `flotilla simnodes` until interrupted.
///
/// # Errors
/// When the kubeconfig cannot be read, the cluster cannot be reached, a `--stop-node` is not one of
/// the simulated nodes, or the nodes cannot be registered.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let config = SimConfig {
        nodes: args.nodes,
        pod_ready_delay: args.pod_ready_delay,
        job_pod_duration: args.job_pod_duration,
        assign_pod_cidrs: args.assign_pod_cidrs,
        ..SimConfig::default()
    };
    config.validate()?;
    let client = client(args.kubeconfig.as_deref()).await?;
    let simulator = NodeSimulator::start(client, config)
        .await
        .context("cannot start the node simulator")?;
    for name in &args.stop_nodes {
        simulator.stop_node(name)?;
    }
    let stop_serving = tokio_util::sync::CancellationToken::new();
    let control = match args.control_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let local = listener.local_addr()?;
            println!("node control routes on http://{local}/flotilla/v1/nodes/{{name}}/…");
            let serving = serve_control(listener, simulator.handle(), stop_serving.clone());
            Some(tokio::spawn(serving))
        }
        None => None,
    };
    println!("simulating nodes: {}", simulator.node_names().join(", "));
    if !args.stop_nodes.is_empty() {
        println!("stopped: {}", args.stop_nodes.join(", "));
    }
    let signal = shutdown_signal().await;
    println!("received {signal}, stopping");
    stop_serving.cancel();
    if let Some(control) = control
        && let Ok(Err(err)) = control.await
    {
        eprintln!("node control routes failed: {err}");
    }
    simulator.shutdown().await;
    Ok(())
}

async fn client(path: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let config = match path {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .with_context(|| format!("cannot use kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("cannot find a kubeconfig (pass --kubeconfig)")?,
    };
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
}
