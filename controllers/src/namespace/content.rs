//! Deleting the content of one resource in a namespace and listing what is left: `deletecollection`
//! where served, else list and delete each item, then a verifying list (upstream's
//! `deleteAllContentForGroupVersionResource`).

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::kube::api::{Api, DeleteParams, DynamicObject, ListParams};

use super::discovery::Deletable;
use super::tally::{Leftover, assess};
use flotilla_sdk::kube;

/// Errors of deleting one resource's content.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// Listing pods for their grace periods failed.
    #[error("cannot list pods to estimate their graceful termination")]
    EstimatePods(#[source] kube::Error),
    /// The collection delete failed with something other than "not supported".
    #[error("cannot delete the collection of {resource}")]
    DeleteCollection {
        /// `plural.group`.
        resource: String,
        /// Why.
        source: kube::Error,
    },
    /// Deleting one item failed with something other than "already gone" or "not supported".
    #[error("cannot delete {resource} {name}")]
    DeleteItem {
        /// `plural.group`.
        resource: String,
        /// The item.
        name: String,
        /// Why.
        source: kube::Error,
    },
    /// Listing the resource failed with something other than "not supported".
    #[error("cannot list {resource}")]
    List {
        /// `plural.group`.
        resource: String,
        /// Why.
        source: kube::Error,
    },
    /// Items without finalizers or a grace period are still there after their deletion.
    #[error("unexpected items still remain in namespace: {namespace} for gvr: {resource}")]
    Unexpected {
        /// The namespace.
        namespace: String,
        /// `plural.group`.
        resource: String,
    },
}

impl ContentError {
    /// The error with its cause, on one line, for the namespace's condition message.
    pub fn describe(&self) -> String {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        message
    }
}

/// Deletes everything of `deletable` in `namespace` and reports what is left, and an error if the
/// deletion failed or left items nothing explains. Every delete propagates in the background, so the
/// garbage collector removes dependents and no orphan finalizer is added.
pub async fn purge(
    client: &kube::Client,
    namespace: &str,
    deletable: &Deletable,
) -> (Leftover, Option<ContentError>) {
    let name = deletable.display_name();
    let estimate = if deletable.resource.group.is_empty() && deletable.resource.plural == "pods" {
        match graceful_estimate(client, namespace).await {
            Ok(estimate) => estimate,
            Err(err) => return (Leftover::default(), Some(err)),
        }
    } else {
        0
    };
    let pending = Leftover {
        estimate,
        ..Leftover::default()
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &deletable.resource);
    if let Err(err) = delete_all(&api, deletable, &name).await {
        return (pending, Some(err));
    }
    if !deletable.list {
        return (pending, None);
    }
    let items = match list(&api, &name).await {
        Ok(Some(items)) => items,
        Ok(None) => return (pending, None),
        Err(err) => return (pending, Some(err)),
    };
    let finalizers: Vec<Vec<String>> = items
        .into_iter()
        .map(|item| item.metadata.finalizers.unwrap_or_default())
        .collect();
    let (leftover, unexpected) = assess(estimate, &finalizers);
    let error = unexpected.then(|| ContentError::Unexpected {
        namespace: namespace.to_owned(),
        resource: name,
    });
    (leftover, error)
}

/// Whether the server says the verb is not served here (405), or the resource is not found at all
/// (upstream treats a 404 on a collection the same: a resource discovery lists without serving it).
fn not_supported(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 405 || status.code == 404)
}

async fn delete_all(
    api: &Api<DynamicObject>,
    deletable: &Deletable,
    name: &str,
) -> Result<(), ContentError> {
    if deletable.deletecollection {
        match api
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await
        {
            Ok(_) => return Ok(()),
            Err(err) if not_supported(&err) => {}
            Err(source) => {
                return Err(ContentError::DeleteCollection {
                    resource: name.to_owned(),
                    source,
                });
            }
        }
    }
    if !deletable.list {
        return Ok(());
    }
    let Some(items) = list(api, name).await? else {
        return Ok(());
    };
    for item in items {
        let Some(item_name) = item.metadata.name else {
            continue;
        };
        match api.delete(&item_name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(err) if not_supported(&err) => {}
            Err(source) => {
                return Err(ContentError::DeleteItem {
                    resource: name.to_owned(),
                    name: item_name,
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The items of the resource; `None` when listing is not served.
async fn list(
    api: &Api<DynamicObject>,
    name: &str,
) -> Result<Option<Vec<DynamicObject>>, ContentError> {
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(Some(list.items)),
        Err(err) if not_supported(&err) => Ok(None),
        Err(source) => Err(ContentError::List {
            resource: name.to_owned(),
            source,
        }),
    }
}

/// The longest grace period of the namespace's pods that have not finished (upstream's
/// `estimateGracefulTerminationForPods`): they remain that long after their deletion.
async fn graceful_estimate(client: &kube::Client, namespace: &str) -> Result<i64, ContentError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default())
        .await
        .map_err(ContentError::EstimatePods)?;
    Ok(longest_grace(&list.items))
}

/// The longest `terminationGracePeriodSeconds` of pods not Succeeded or Failed; 0 without any.
pub fn longest_grace(pods: &[Pod]) -> i64 {
    pods.iter()
        .filter(|pod| {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .filter_map(|pod| pod.spec.as_ref()?.termination_grace_period_seconds)
        .max()
        .unwrap_or(0)
        .max(0)
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    use super::*;

    fn pod(phase: &str, grace: Option<i64>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                termination_grace_period_seconds: grace,
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn the_estimate_is_the_longest_grace_period_of_pods_still_running() {
        let pods = [
            pod("Running", Some(30)),
            pod("Pending", Some(45)),
            pod("Succeeded", Some(600)),
            pod("Failed", Some(600)),
            pod("Running", None),
        ];
        assert_eq!(longest_grace(&pods), 45);
    }

    #[test]
    fn finished_pods_alone_need_no_wait() {
        assert_eq!(longest_grace(&[pod("Succeeded", Some(30))]), 0);
        assert_eq!(longest_grace(&[]), 0);
    }
}
