//! `flotilla status --watch` in a pseudo-terminal against a running fleet: the live table shows the
//! leader and every worker, and Ctrl-C (the terminal's interrupt character, as a user types it) ends it
//! with exit status 0 and the terminal given back (cursor shown, alternate screen left).

use std::time::Duration;

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, binary};
use crate::support::pty::Pty;

/// The flags `flotilla status` needs to reach a plaintext test fleet: `--insecure-plaintext` once the
/// binary requires a TLS choice, nothing before.
pub fn plaintext_flags() -> Vec<String> {
    let help = std::process::Command::new(binary("flotilla"))
        .args(["status", "--help"])
        .output()
        .expect("flotilla status --help");
    if String::from_utf8_lossy(&help.stdout).contains("--insecure-plaintext") {
        vec!["--insecure-plaintext".into()]
    } else {
        Vec::new()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn status_watch_draws_the_leader_and_workers_in_a_terminal_and_exits_0_on_ctrl_c() {
    let cluster = TestCluster::start().await;
    let (fleet, _procs) = Fleet::of_controllers(&cluster, "serviceaccount", 2).await;

    let mut args: Vec<String> = [
        "status",
        "--watch",
        "--interval",
        "200ms",
        "--fleet",
        &fleet.name,
        "--etcd-endpoints",
        &fleet.etcd_endpoints.join(","),
    ]
    .map(String::from)
    .to_vec();
    args.extend(plaintext_flags());
    let mut pty = Pty::spawn(&binary("flotilla"), &args);

    let shown = pty
        .read_until(
            &["leader c0", "w0", "w1", "serviceaccount", "RECONCILES/S"],
            Duration::from_secs(30),
        )
        .await;
    assert!(
        shown.contains("\x1b[?1049h"),
        "the view should take the alternate screen: {shown:?}"
    );

    pty.ctrl_c().await;
    let (status, screen) = pty.wait(Duration::from_secs(10)).await;
    assert!(
        status.success(),
        "exit status {status:?}; screen: {screen:?}"
    );
    let tail = &screen[screen.rfind("RECONCILES/S").unwrap_or(0)..];
    assert!(
        tail.contains("\x1b[?25h") && tail.contains("\x1b[?1049l"),
        "the terminal should get its cursor and main screen back: {tail:?}"
    );
}
