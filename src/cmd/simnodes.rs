//! `flotilla simnodes`: simulated nodes (kwok-like) against any Kubernetes API reachable through a
//! kubeconfig. Runs until SIGINT/SIGTERM.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use flotilla_devcluster::{NodeSimulator, SimConfig};

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
    println!("simulating nodes: {}", simulator.node_names().join(", "));
    if !args.stop_nodes.is_empty() {
        println!("stopped: {}", args.stop_nodes.join(", "));
    }
    let signal = shutdown_signal().await;
    println!("received {signal}, stopping");
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
