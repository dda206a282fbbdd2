//! `flotilla status --watch` in a pseudo-terminal against a running fleet: the live table shows the
//! leader and every worker, and Ctrl-C (the terminal's interrupt character, as a user types it) ends it
//! with exit status 0 and the terminal given back (cursor shown, alternate screen left).
//!
//! The pty comes from util-linux's `script` (in every Debian and Ubuntu base image, unlike tmux): it runs
//! the command on a new pty, copies its own stdin to it and the pty's output to its stdout, and with
//! `-e` exits with the command's status.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, binary};
use crate::support::wait::within;

/// The flags `flotilla status` needs to reach a plaintext test fleet: `--insecure-plaintext` once the
/// binary requires a TLS choice, nothing before.
fn plaintext_flags() -> Vec<String> {
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

/// Single-quotes `arg` for `script -c`'s shell.
fn quoted(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

#[tokio::test(flavor = "multi_thread")]
async fn status_watch_draws_the_leader_and_workers_in_a_terminal_and_exits_0_on_ctrl_c() {
    let cluster = TestCluster::start().await;
    let (fleet, _procs) = Fleet::of_controllers(&cluster, "serviceaccount", 2).await;

    let mut command = vec![
        binary("flotilla").display().to_string(),
        "status".into(),
        "--watch".into(),
        "--interval".into(),
        "200ms".into(),
        "--fleet".into(),
        fleet.name.clone(),
        "--etcd-endpoints".into(),
        fleet.etcd_endpoints.join(","),
    ];
    command.extend(plaintext_flags());
    let line = command
        .iter()
        .map(|a| quoted(a))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = tokio::process::Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("util-linux script, for a pseudo-terminal");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();

    // Read the screen until the table shows the leader and both workers.
    let mut screen = Vec::new();
    let wanted = ["leader c0", "w0", "w1", "serviceaccount", "RECONCILES/S"];
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            let n = stdout.read(&mut buf).await.unwrap();
            if n == 0 {
                return None;
            }
            screen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&screen).into_owned();
            if wanted.iter().all(|w| text.contains(w)) {
                return Some(text);
            }
        }
    };
    let shown = tokio::time::timeout(Duration::from_secs(30), read).await;
    let Ok(Some(shown)) = shown else {
        let mut err = String::new();
        let _ = child.kill().await;
        let _ = child.stderr.take().unwrap().read_to_string(&mut err).await;
        panic!(
            "the live table did not show {wanted:?} within 30 s (or ended); screen: {:?}; stderr: {err}",
            String::from_utf8_lossy(&screen)
        );
    };
    assert!(
        shown.contains("\x1b[?1049h"),
        "the view should take the alternate screen: {shown:?}"
    );

    // Ctrl-C, typed into the terminal.
    stdin.write_all(b"\x03").await.unwrap();
    stdin.flush().await.unwrap();
    let status = within(
        Duration::from_secs(10),
        "status --watch to exit on Ctrl-C",
        async {
            let mut rest = Vec::new();
            let _ = stdout.read_to_end(&mut rest).await;
            screen.extend_from_slice(&rest);
            child.wait().await.unwrap()
        },
    )
    .await;
    let text = String::from_utf8_lossy(&screen);
    assert!(status.success(), "exit status {status:?}; output: {text:?}");
    let tail = &text[text.rfind("RECONCILES/S").unwrap_or(0)..];
    assert!(
        tail.contains("\x1b[?25h") && tail.contains("\x1b[?1049l"),
        "the terminal should get its cursor and main screen back: {tail:?}"
    );
}
