//! ServiceAccount tokens for tests: a token from the TokenRequest API (what `kubectl create token`
//! calls), and clients and kubeconfig files that present it, on devcluster and real clusters alike.

use std::path::Path;

use serde_json::json;

use super::raw;

/// Asks the TokenRequest API for a token of ServiceAccount `namespace/name` (1 hour).
///
/// # Panics
/// When the request is not answered with 201 and a token.
pub async fn service_account_token(client: &kube::Client, namespace: &str, name: &str) -> String {
    let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token");
    let body = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    });
    let reply = raw::post(client, &path, &body).await;
    assert_eq!(reply.status, 201, "TokenRequest at {path}: {}", reply.text);
    reply.json()["status"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("TokenRequest answered without status.token: {}", reply.text))
        .to_owned()
}

/// The kubeconfig at `kubeconfig` with every user's credentials replaced by `token`.
///
/// # Panics
/// When the file cannot be read.
pub fn kubeconfig_with_token(kubeconfig: &Path, token: &str) -> kube::config::Kubeconfig {
    let mut file = kube::config::Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|err| panic!("cannot read kubeconfig {}: {err}", kubeconfig.display()));
    for user in &mut file.auth_infos {
        user.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.to_owned().into()),
            ..kube::config::AuthInfo::default()
        });
    }
    file
}

/// Writes [`kubeconfig_with_token`] to `dest` (JSON, which kubeconfig readers accept as YAML), for
/// processes a test starts with `--kubeconfig`.
///
/// # Panics
/// When a file cannot be read or written.
pub fn write_kubeconfig_with_token(kubeconfig: &Path, token: &str, dest: &Path) {
    let file = kubeconfig_with_token(kubeconfig, token);
    let text = serde_json::to_string_pretty(&file)
        .unwrap_or_else(|err| panic!("cannot encode a kubeconfig: {err}"));
    std::fs::write(dest, text)
        .unwrap_or_else(|err| panic!("cannot write kubeconfig {}: {err}", dest.display()));
}

/// A client for the cluster behind `kubeconfig` that presents `token`.
///
/// # Panics
/// When the kubeconfig cannot be used.
pub async fn client_with_token(kubeconfig: &Path, token: &str) -> kube::Client {
    let file = kubeconfig_with_token(kubeconfig, token);
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap_or_else(|err| panic!("cannot use kubeconfig {}: {err}", kubeconfig.display()));
    kube::Client::try_from(config)
        .unwrap_or_else(|err| panic!("cannot build a client from {}: {err}", kubeconfig.display()))
}
