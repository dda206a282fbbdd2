//! `flotilla simnodes`.

/// Flags of `flotilla simnodes`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `flotilla simnodes` until interrupted.
pub async fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
