//! `flotilla up --keep-running` in a pseudo-terminal, on a small demo: the steps are ticked off, the
//! workloads (a Job, a CronJob, a DaemonSet, a StatefulSet, a Service with endpoints) finish, the live
//! view of the `demo` fleet follows once the samples are reconciled, `kubectl describe` lists a
//! Deployment's Events, and Ctrl-C stops it with exit status 0 and leaves no process it started
//! running. Without a terminal (and without the workloads) it prints plain lines.

use std::time::Duration;

use crate::support::fleet::binary;
use crate::support::pty::Pty;
use crate::support::wait::wait_for;

/// Pids of live processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .filter(|pid| {
            // A zombie has ended; only its parent's wait is missing.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    !s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(false)
        })
        .collect()
}

/// The text after `prefix` on the screen, up to the end of its line.
fn after<'a>(screen: &'a str, prefix: &str) -> &'a str {
    let start = screen.find(prefix).expect(prefix) + prefix.len();
    screen[start..]
        .split(['\r', '\n', ' '])
        .next()
        .unwrap_or_default()
}

/// `kubectl describe deployment web` on the demo ends with the Deployment's Events, as the
/// deployment controller recorded them (kubectl selects them by `involvedObject.*` fields). Skipped,
/// saying so, when kubectl is not installed.
async fn describe_lists_the_events(kubeconfig: &str) {
    let installed = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        eprintln!("kubectl describe skipped: kubectl is not installed");
        return;
    }
    let describe = tokio::process::Command::new("kubectl")
        .args(["--kubeconfig", kubeconfig, "--namespace", "demo"])
        .args(["--request-timeout", "20s", "describe", "deployment", "web"])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), describe)
        .await
        .expect("kubectl describe within 30 s")
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kubectl describe failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let events = stdout
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section: {stdout}"));
    assert!(
        events.contains("ScalingReplicaSet") && events.contains("deployment-controller"),
        "the Deployment's Events are not listed: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn up_ticks_off_its_steps_shows_the_live_view_and_stops_everything_on_ctrl_c() {
    let args: Vec<String> = [
        "up",
        "--keep-running",
        "--coordinators",
        "1",
        "--workers",
        "1",
        "--greetings",
        "3",
        "--builtin-workers",
        "1",
        "--deployments",
        "1",
        "--nodes",
        "1",
        // The CronJob's first Job waits for the next wall-clock minute.
        "--timeout",
        "150s",
    ]
    .map(String::from)
    .to_vec();
    let mut pty = Pty::spawn(&binary("flotilla"), &args);

    let screen = pty
        .read_until(&["✔  starting etcd"], Duration::from_secs(30))
        .await;
    let logs = after(&screen, "logs in ").to_owned();
    let etcd_endpoint = screen
        .split("✔  starting etcd")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().find(|w| w.starts_with("http://")))
        .expect("etcd's endpoint after its tick")
        .to_owned();
    assert!(!logs.is_empty(), "{screen:?}");
    let shown = pty
        .read_until(
            &[
                "✔  starting the local Kubernetes API",
                "✔  starting fleet \"demo\": coordinators",
                "✔  starting fleet \"demo\": workers",
                "✔  starting fleet \"builtins\"",
                "✔  applying the sample workload",
                "✔  waiting for the fleets to reconcile the samples",
                "the Job, the CronJob's first Job, the DaemonSet and the StatefulSet done, the Service has endpoints",
                // The live view.
                "leader coordinator-0",
                "worker-0",
                "RECONCILES/S",
            ],
            Duration::from_secs(180),
        )
        .await;
    assert!(
        !processes_with(&logs).is_empty(),
        "no process of the demo found: {shown:?}"
    );
    let kubeconfig = after(&shown, "kubeconfig ").to_owned();
    describe_lists_the_events(&kubeconfig).await;

    pty.ctrl_c().await;
    let (status, screen) = pty.wait(Duration::from_secs(60)).await;
    assert!(
        status.success(),
        "exit status {status:?}; screen: {screen:?}"
    );
    wait_for(
        Duration::from_secs(10),
        "every process of the demo to be gone",
        || async {
            let left = [processes_with(&logs), processes_with(&etcd_endpoint)].concat();
            left.is_empty().then_some(())
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&logs);
}

#[tokio::test(flavor = "multi_thread")]
async fn up_prints_plain_step_lines_when_stdout_is_not_a_terminal() {
    let output = tokio::process::Command::new(binary("flotilla"))
        .args([
            "up",
            "--coordinators",
            "1",
            "--workers",
            "1",
            "--greetings",
            "2",
            "--builtin-workers",
            "1",
            "--deployments",
            "0",
            "--workloads=false",
            "--nodes",
            "1",
            "--timeout",
            "90s",
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .expect("flotilla up within 120 s")
        .expect("flotilla up runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !stdout.contains('\x1b'),
        "no terminal control in plain output: {stdout:?}"
    );
    for step in [
        "ok  starting etcd",
        "ok  starting the local Kubernetes API",
        "ok  applying the sample workload",
        "ok  waiting for the fleets to reconcile the samples",
    ] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(step)),
            "{step} missing from {stdout}"
        );
    }
    if let Some(logs) = stdout
        .lines()
        .next()
        .and_then(|l| l.split("logs in ").nth(1))
    {
        let _ = std::fs::remove_dir_all(logs.trim());
    }
}
