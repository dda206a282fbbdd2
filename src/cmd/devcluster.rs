//! `flotilla devcluster`.

/// Flags of `flotilla devcluster`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `flotilla devcluster` until interrupted.
pub async fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}

/// Waits for SIGINT or SIGTERM and names the one that came.
pub async fn shutdown_signal() -> &'static str {
    let interrupt = async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "SIGINT",
            Err(_) => std::future::pending().await,
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
                "SIGTERM"
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        name = interrupt => name,
        name = terminate => name,
    }
}
