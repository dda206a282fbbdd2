//! Kubernetes client configuration the way kube-controller-manager finds it: an explicit `--kubeconfig`,
//! else the in-cluster service account, else `$KUBECONFIG` / `~/.kube/config`.

use std::path::Path;

/// Errors of loading Kubernetes client configuration.
#[derive(Debug, thiserror::Error)]
pub enum KubeConfigError {
    /// The kubeconfig file could not be read or used.
    #[error("cannot use kubeconfig {path}")]
    File {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither in-cluster configuration nor a kubeconfig was found.
    #[error(
        "no Kubernetes configuration found (pass --kubeconfig, run in a pod, or set KUBECONFIG)"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be built.
    #[error("cannot build a Kubernetes client")]
    Client(#[source] kube::Error),
}

/// Loads client configuration.
///
/// # Errors
/// See [`KubeConfigError`].
pub async fn kube_config(kubeconfig: Option<&Path>) -> Result<kube::Config, KubeConfigError> {
    match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                KubeConfigError::File {
                    path: path.display().to_string(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| KubeConfigError::File {
                    path: path.display().to_string(),
                    source,
                })
        }
        None => kube::Config::infer().await.map_err(KubeConfigError::Infer),
    }
}

/// Builds a client from [`kube_config`].
///
/// # Errors
/// See [`KubeConfigError`].
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, KubeConfigError> {
    let config = kube_config(kubeconfig).await?;
    kube::Client::try_from(config).map_err(KubeConfigError::Client)
}

/// Builds a client from [`kube_config`] for `component` (its User-Agent, see [`crate::user_agent`])
/// that counts every request it sends into `requests`, and whose streamed lists are consistent reads
/// ([`crate::consistent_watch_lists`]).
///
/// # Errors
/// See [`KubeConfigError`].
pub async fn counted_kube_client(
    kubeconfig: Option<&Path>,
    component: &str,
    requests: crate::RequestCounter,
) -> Result<kube::Client, KubeConfigError> {
    let config = kube_config(kubeconfig).await?;
    let builder = kube::client::ClientBuilder::try_from(config).map_err(KubeConfigError::Client)?;
    Ok(builder
        .with_layer(&crate::RequestCountLayer::new(requests))
        .with_layer(&crate::UserAgentLayer::new(component))
        .with_layer(&tower::util::MapRequestLayer::new(
            crate::consistent_watch_lists::<kube::client::Body>,
        ))
        .build())
}
