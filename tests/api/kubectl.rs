//! kubectl against the server: apply a Deployment manifest, get it, watch it change, delete it.
//! Skipped (with a message) when kubectl is not installed.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::common::SOON;
use crate::support::cluster::TestCluster;
use crate::support::namespace::unique_namespace;
use crate::support::wait::within;

const MANIFEST: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.27
";

/// Whether kubectl runs here (tests that need it skip themselves, saying so, when it does not).
pub(super) fn kubectl_installed() -> bool {
    std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// kubectl against `kubeconfig`, in namespace `ns`, with a bounded request timeout.
pub(super) fn kubectl(kubeconfig: &Path, ns: &str) -> Command {
    let mut command = Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--namespace", ns, "--request-timeout", "20s"])
        .kill_on_drop(true);
    command
}

/// Runs kubectl to completion; returns (success, stdout, stderr).
pub(super) async fn run(mut command: Command, stdin: Option<&str>) -> (bool, String, String) {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("kubectl runs");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(input.as_bytes())
            .await
            .expect("kubectl reads the manifest");
    }
    drop(child.stdin.take());
    let output = within(SOON * 3, "kubectl to finish", child.wait_with_output())
        .await
        .expect("kubectl output");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn kubectl_applies_gets_watches_and_deletes_a_deployment() {
    if !kubectl_installed() {
        eprintln!("skipped: kubectl is not installed");
        return;
    }
    let cluster = TestCluster::start().await;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let ns = unique_namespace(&cluster.client(), "kubectl").await;

    let mut apply = kubectl(&kubeconfig, &ns);
    apply.args(["apply", "-f", "-"]);
    let (ok, out, err) = run(apply, Some(MANIFEST)).await;
    assert!(ok, "kubectl apply failed: {out}{err}");
    assert_eq!(out.trim(), "deployment.apps/web created");

    let mut get = kubectl(&kubeconfig, &ns);
    get.args(["get", "deployment", "web", "-o", "json"]);
    let (ok, out, err) = run(get, None).await;
    assert!(ok, "kubectl get failed: {err}");
    let deploy: serde_json::Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    assert_eq!(deploy["spec"]["replicas"], 1);
    assert_eq!(deploy["spec"]["strategy"]["type"], "RollingUpdate");

    let mut watch = kubectl(&kubeconfig, &ns);
    watch
        .args([
            "get",
            "deploy",
            "web",
            "-w",
            "--no-headers",
            "-o",
            "custom-columns=NAME:.metadata.name,REPLICAS:.spec.replicas",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut watcher = watch.spawn().expect("kubectl get -w runs");
    let mut lines = BufReader::new(watcher.stdout.take().expect("stdout is piped")).lines();
    let first = within(
        SOON,
        "kubectl -w to print the deployment",
        lines.next_line(),
    )
    .await
    .unwrap()
    .unwrap_or_default();
    assert_eq!(first.split_whitespace().collect::<Vec<_>>(), ["web", "1"]);

    let mut scale = kubectl(&kubeconfig, &ns);
    scale.args(["scale", "deployment", "web", "--replicas", "3"]);
    let (ok, out, err) = run(scale, None).await;
    assert!(ok, "kubectl scale failed: {out}{err}");
    let update = within(SOON, "kubectl -w to print the update", async {
        loop {
            match lines.next_line().await {
                Ok(Some(line)) if line.split_whitespace().nth(1) == Some("3") => return line,
                Ok(Some(_)) => continue,
                other => panic!("kubectl -w stopped before the update: {other:?}"),
            }
        }
    })
    .await;
    assert!(update.starts_with("web"), "{update}");
    let _ = watcher.kill().await;

    let mut delete = kubectl(&kubeconfig, &ns);
    delete.args(["delete", "deployment", "web"]);
    let (ok, out, err) = run(delete, None).await;
    assert!(ok, "kubectl delete failed: {out}{err}");
    assert_eq!(out.trim(), "deployment.apps \"web\" deleted");

    let mut gone = kubectl(&kubeconfig, &ns);
    gone.args(["get", "deployment", "web"]);
    let (ok, _out, err) = run(gone, None).await;
    assert!(!ok, "the deployment must be gone");
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
}
