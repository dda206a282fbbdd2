//! `flotilla devcluster`.

/// Flags of `flotilla devcluster`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `flotilla devcluster` until interrupted.
pub async fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
