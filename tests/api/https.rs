//! `flotilla devcluster --authorization-mode RBAC` with kubectl, as a user runs it: the binary serves
//! HTTPS and writes a kubeconfig naming `https://…` with its CA, so kubectl sends the kubeconfig's
//! token (client-go sends credentials only over TLS; over plain HTTP every kubectl request was
//! `system:anonymous`). kubectl then authenticates as the admin and as a ServiceAccount whose token
//! it presents, `auth whoami` and `auth can-i` answer for that identity, and a forbidden request is
//! refused naming it.
//!
//! Skipped when kubectl is not installed, and with `FLOTILLA_TEST_KUBECONFIG`: this tests how
//! devcluster serves, which an external cluster does not show (its kubectl identity checks are
//! `rbac`'s, through kube-rs).

use std::path::Path;
use std::process::Stdio;

use flotilla_devcluster::EtcdServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::common::SOON;
use super::kubectl::{kubectl, kubectl_installed, run};
use crate::support::cluster::is_external;
use crate::support::wait::within;

/// The Role and binding `bot` gets in namespace `https-e2e`: read ConfigMaps, nothing else.
const BOT_RBAC: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: https-e2e
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: bot
  namespace: https-e2e
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: configmap-reader
  namespace: https-e2e
rules:
- apiGroups: [\"\"]
  resources: [\"configmaps\"]
  verbs: [\"get\", \"list\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: bot
  namespace: https-e2e
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: configmap-reader
subjects:
- kind: ServiceAccount
  name: bot
  namespace: https-e2e
";

const NS: &str = "https-e2e";

/// Runs kubectl with `args` (and `--token token` when given) in [`NS`]; returns (success,
/// stdout, stderr).
async fn kubectl_as(
    kubeconfig: &Path,
    token: Option<&str>,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    let mut command = kubectl(kubeconfig, NS);
    if let Some(token) = token {
        command.args(["--token", token]);
    }
    command.args(args);
    run(command, stdin).await
}

#[tokio::test]
async fn kubectl_authenticates_to_an_rbac_devcluster_over_https() {
    if !kubectl_installed() {
        eprintln!("skipped: kubectl is not installed");
        return;
    }
    if is_external() {
        eprintln!(
            "skipped: tests how `flotilla devcluster` serves, but FLOTILLA_TEST_KUBECONFIG names an \
             external cluster"
        );
        return;
    }
    let etcd = EtcdServer::start().await.expect("etcd starts");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut devcluster = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args([
            "devcluster",
            "--listen",
            "127.0.0.1:0",
            "--authorization-mode",
            "RBAC",
        ])
        .arg("--etcd-endpoints")
        .arg(etcd.endpoints().join(","))
        .arg("--write-kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("flotilla devcluster runs");
    // It prints its URL once the kubeconfig is written.
    let mut stdout = BufReader::new(devcluster.stdout.take().unwrap()).lines();
    let url = within(SOON, "devcluster to say where it serves", async {
        while let Some(line) = stdout.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("devcluster serving at ") {
                return url.to_owned();
            }
        }
        panic!("flotilla devcluster exited before serving");
    })
    .await;
    assert!(url.starts_with("https://127.0.0.1:"), "served at {url}");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    let cluster = &file["clusters"][0]["cluster"];
    assert_eq!(cluster["server"], url.as_str(), "{file}");
    assert!(
        cluster["certificate-authority-data"]
            .as_str()
            .is_some_and(|ca| !ca.is_empty()),
        "the kubeconfig carries the CA: {file}"
    );

    // The admin: the kubeconfig's token reaches the server (over plain HTTP it would not).
    let (ok, out, err) = kubectl_as(
        &kubeconfig,
        None,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    )
    .await;
    assert!(ok, "kubectl auth whoami: {err}");
    assert_eq!(out, "system:admin");
    let (ok, out, err) = kubectl_as(&kubeconfig, None, &["apply", "-f", "-"], Some(BOT_RBAC)).await;
    assert!(ok, "kubectl apply as the admin: {out}{err}");
    let (ok, out, err) = kubectl_as(&kubeconfig, None, &["get", "pods"], None).await;
    assert!(ok, "kubectl get pods as the admin: {out}{err}");
    assert!(
        err.contains("No resources found"),
        "an empty namespace: {out}{err}"
    );

    // The ServiceAccount, through a token kubectl asked for.
    let (ok, token, err) = kubectl_as(&kubeconfig, None, &["create", "token", "bot"], None).await;
    assert!(ok, "kubectl create token: {err}");
    let token = token.trim();
    let bot = Some(token);
    let (ok, out, err) = kubectl_as(
        &kubeconfig,
        bot,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    )
    .await;
    assert!(ok, "kubectl auth whoami as bot: {err}");
    assert_eq!(out, "system:serviceaccount:https-e2e:bot");
    let (ok, out, err) = kubectl_as(
        &kubeconfig,
        bot,
        &["auth", "can-i", "list", "configmaps"],
        None,
    )
    .await;
    assert!(ok, "bot may list configmaps: {out}{err}");
    assert_eq!(out.trim(), "yes");
    let (ok, out, _) = kubectl_as(
        &kubeconfig,
        bot,
        &["auth", "can-i", "delete", "configmaps"],
        None,
    )
    .await;
    assert!(!ok, "kubectl auth can-i exits 1 for no");
    assert_eq!(out.trim(), "no");
    let (ok, out, err) = kubectl_as(&kubeconfig, bot, &["get", "configmaps"], None).await;
    assert!(ok, "bot lists configmaps: {out}{err}");
    let (ok, _, err) = kubectl_as(&kubeconfig, bot, &["get", "pods"], None).await;
    assert!(!ok, "bot may not list pods");
    assert!(
        err.contains(
            "pods is forbidden: User \"system:serviceaccount:https-e2e:bot\" cannot list resource \
             \"pods\" in API group \"\" in the namespace \"https-e2e\""
        ),
        "refused as itself, not as system:anonymous: {err}"
    );

    devcluster.start_kill().unwrap();
    let _ = devcluster.wait().await;
}
