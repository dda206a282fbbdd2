//! A command run in a pseudo-terminal, driven as a user would: read what it draws, type Ctrl-C, see it
//! exit. The pty comes from util-linux's `script` (in every Debian and Ubuntu base image, unlike tmux): it
//! runs the command on a new pty (an unsized one: 0 columns), copies its own stdin to it and the pty's
//! output to its stdout, and with `-e` exits with the command's status. `script` starts the command
//! through `$SHELL -c`; the line `exec`s it, so the command, not a shell, is the pty's foreground process.
//! (A waiting dash — `/bin/sh` on Debian, used when `SHELL` is unset — dies of the SIGINT that Ctrl-C
//! sends the whole foreground group, and `script` then reports 130 whatever the command did.)

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// A command running in a pty; killed when dropped.
pub struct Pty {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// Everything the command wrote to the terminal so far.
    screen: Vec<u8>,
}

/// Single-quotes `arg` for `script -c`'s shell.
fn quoted(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

impl Pty {
    /// Starts `program args…` in a new pty (`TERM=xterm`).
    pub fn spawn(program: &Path, args: &[String]) -> Self {
        let command = std::iter::once(program.display().to_string())
            .chain(args.iter().cloned())
            .map(|a| quoted(&a))
            .collect::<Vec<_>>()
            .join(" ");
        let line = format!("exec {command}");
        let mut child = tokio::process::Command::new("script")
            .args(["-q", "-e", "-c", &line, "/dev/null"])
            .env("TERM", "xterm")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("util-linux script, for a pseudo-terminal");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        Self {
            child,
            stdin,
            stdout,
            screen: Vec::new(),
        }
    }

    /// What the command drew so far, escape sequences included.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen).into_owned()
    }

    /// Reads until the screen shows every one of `wanted`, at most for `timeout`; panics with the screen
    /// otherwise (or when the command ends first).
    pub async fn read_until(&mut self, wanted: &[&str], timeout: Duration) -> String {
        let read = async {
            let mut buf = [0u8; 4096];
            loop {
                let text = self.screen();
                if wanted.iter().all(|w| text.contains(w)) {
                    return Some(text);
                }
                let n = self.stdout.read(&mut buf).await.ok()?;
                if n == 0 {
                    return None;
                }
                self.screen.extend_from_slice(&buf[..n]);
            }
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(Some(text)) => text,
            Ok(None) => panic!(
                "the command ended before showing {wanted:?}: {:?}",
                self.screen()
            ),
            Err(_) => panic!(
                "not shown within {timeout:?}: {wanted:?}; screen: {:?}",
                self.screen()
            ),
        }
    }

    /// Types Ctrl-C: the terminal sends SIGINT to its foreground process group.
    pub async fn ctrl_c(&mut self) {
        self.stdin
            .write_all(b"\x03")
            .await
            .expect("write to the pty");
        self.stdin.flush().await.expect("write to the pty");
    }

    /// Waits at most `timeout` for the command to end; its exit status and the whole screen.
    pub async fn wait(&mut self, timeout: Duration) -> (ExitStatus, String) {
        let wait = async {
            let mut rest = Vec::new();
            let _ = self.stdout.read_to_end(&mut rest).await;
            self.screen.extend_from_slice(&rest);
            self.child.wait().await.expect("wait for script")
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(status) => (status, self.screen()),
            Err(_) => panic!(
                "still running after {timeout:?}; screen: {:?}",
                self.screen()
            ),
        }
    }
}
