//! Releasing a namespace whose content is gone: `kubernetes` is removed from `spec.finalizers` through
//! `PUT /api/v1/namespaces/{name}/finalize`; with no finalizer left, the API server deletes it.

use flotilla_sdk::k8s_openapi::api::core::v1::{Namespace, NamespaceSpec};
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, PostParams};

/// The `spec.finalizers` token of this controller (upstream's `v1.FinalizerKubernetes`).
pub const FINALIZER: &str = "kubernetes";

/// How many times a finalize that lost a race with another writer (409) is retried on a fresh read;
/// upstream retries without bound, but a namespace that keeps changing is better retried later.
const CONFLICT_RETRIES: usize = 5;

/// Errors of finalizing.
#[derive(Debug, thiserror::Error)]
pub enum FinalizeError {
    /// The finalize request, or the read after a conflict, failed.
    #[error("cannot finalize namespace {namespace}")]
    Api {
        /// The namespace.
        namespace: String,
        /// Why.
        source: kube::Error,
    },
    /// The namespace was deleted and created again meanwhile.
    #[error("namespace {0} changed its uid while being finalized")]
    UidChanged(String),
    /// Every attempt conflicted.
    #[error("namespace {0} kept changing while being finalized")]
    Conflicts(String),
}

/// Whether `namespace` still waits for this controller.
pub fn has_finalizer(namespace: &Namespace) -> bool {
    namespace
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.as_ref())
        .is_some_and(|f| f.iter().any(|t| t == FINALIZER))
}

/// The object to PUT to `finalize`: `namespace` (its resourceVersion guards the write) with
/// [`FINALIZER`] removed from `spec.finalizers`, the others kept, sorted and deduplicated as upstream
/// does.
pub fn finalized(namespace: &Namespace) -> Namespace {
    let mut rest: Vec<String> = namespace
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t != FINALIZER)
        .collect();
    rest.sort();
    rest.dedup();
    Namespace {
        metadata: namespace.metadata.clone(),
        spec: Some(NamespaceSpec {
            finalizers: Some(rest),
        }),
        status: None,
    }
}

/// Removes [`FINALIZER`] from `namespace`, re-reading and retrying on conflicts. A namespace already
/// gone, or no longer carrying the finalizer, is done.
///
/// # Errors
/// [`FinalizeError`] when the API refuses, the namespace was replaced by another of the same name, or
/// it kept conflicting.
pub async fn finalize(api: &Api<Namespace>, namespace: &Namespace) -> Result<(), FinalizeError> {
    let name = namespace.metadata.name.clone().unwrap_or_default();
    let api_error = |source| FinalizeError::Api {
        namespace: name.clone(),
        source,
    };
    let mut current = namespace.clone();
    for _ in 0..CONFLICT_RETRIES {
        if !has_finalizer(&current) {
            return Ok(());
        }
        match api
            .replace_subresource(
                "finalize",
                &name,
                &PostParams::default(),
                &finalized(&current),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => return Err(api_error(err)),
        }
        let Some(latest) = api.get_opt(&name).await.map_err(api_error)? else {
            return Ok(());
        };
        if latest.metadata.uid != current.metadata.uid {
            return Err(FinalizeError::UidChanged(name));
        }
        current = latest;
    }
    Err(FinalizeError::Conflicts(name))
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn namespace(finalizers: Option<&[&str]>) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some("team-a".into()),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            spec: Some(NamespaceSpec {
                finalizers: finalizers.map(|f| f.iter().map(|s| (*s).to_owned()).collect()),
            }),
            status: None,
        }
    }

    #[test]
    fn finalizing_removes_only_the_kubernetes_token() {
        let ns = namespace(Some(&[
            "z.example/keep",
            FINALIZER,
            "a.example/keep",
            "a.example/keep",
        ]));
        assert!(has_finalizer(&ns));
        let put = finalized(&ns);
        assert!(!has_finalizer(&put));
        assert_eq!(
            put.spec.unwrap().finalizers.unwrap(),
            ["a.example/keep", "z.example/keep"]
        );
        assert_eq!(put.metadata.resource_version.as_deref(), Some("42"));
    }

    #[test]
    fn a_namespace_without_the_token_is_not_waiting_for_us() {
        assert!(!has_finalizer(&namespace(None)));
        assert!(!has_finalizer(&namespace(Some(&["other"]))));
        let put = finalized(&namespace(Some(&[FINALIZER])));
        assert_eq!(put.spec.unwrap().finalizers, Some(vec![]));
    }
}
