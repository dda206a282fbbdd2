//! Running the workspace's binaries as a deployment would: by name, with a bounded wait.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// How long one `--check-config` or `rbac` run may take; each needs milliseconds, so only a process
/// stuck on a connection it should never have made comes near this.
const RUN_BOUND: Duration = Duration::from_secs(30);

/// The path of a workspace binary by its name (`flotilla`, `greeting-controller`); panics with the
/// command that builds it when it is missing.
pub fn binary(name: &str) -> PathBuf {
    let flotilla = PathBuf::from(env!("CARGO_BIN_EXE_flotilla"));
    let path = flotilla
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
        .join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo build --workspace --bins` first (the README's test command does)",
        path.display()
    );
    path
}

/// Runs `name` with `args` to completion; panics if it runs longer than [`RUN_BOUND`].
pub async fn run(name: &str, args: &[String]) -> Output {
    let mut command = tokio::process::Command::new(binary(name));
    command.args(args).kill_on_drop(true);
    match tokio::time::timeout(RUN_BOUND, command.output()).await {
        Ok(output) => output.unwrap(),
        Err(_) => panic!("`{name} {}` still runs after {RUN_BOUND:?}", args.join(" ")),
    }
}

/// `flotilla <args>`, as strings.
pub async fn flotilla(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    run("flotilla", &args).await
}

/// The process's stdout and stderr, for assertion messages.
pub fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
