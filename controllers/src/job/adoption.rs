//! Adopting an orphan pod into a Job (upstream `ClaimPods` with the tracking finalizer): the Job's
//! controller reference and the `batch.kubernetes.io/job-tracking` finalizer are added in one merge
//! patch guarded by the pod's resourceVersion, so an adopted pod is counted like the Job's own — a
//! pod adopted without the finalizer could finish and vanish uncounted.

use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::kube;
use flotilla_sdk::kube::ResourceExt;
use flotilla_sdk::kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::super::controller_ref::controller_ref;
use super::names::TRACKING_FINALIZER;

/// Errors of an adoption.
#[derive(Debug, thiserror::Error)]
pub enum AdoptionError {
    /// The Job has no uid, so nothing can point at it.
    #[error("job {0} has no uid")]
    NoUid(String),
    /// The API refused the patch (409: the pod changed since it was read).
    #[error("cannot adopt pod {name}")]
    Write {
        /// The pod.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// The merge patch adopting `pod` into `job`; `None` when the Job has no uid.
pub fn patch(pod: &Pod, job: &Job) -> Option<Value> {
    let mut references = pod.owner_references().to_vec();
    references.push(controller_ref(job)?);
    let mut finalizers = pod.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
        finalizers.push(TRACKING_FINALIZER.to_owned());
    }
    Some(json!({"metadata": {
        "ownerReferences": references,
        "finalizers": finalizers,
        "resourceVersion": pod.resource_version(),
    }}))
}

/// Adopts `pod` into `job`; the adopted pod, or `None` when it is gone.
///
/// # Errors
/// [`AdoptionError`] when the Job has no uid or the API refuses the patch.
pub async fn adopt(api: &Api<Pod>, pod: Pod, job: &Job) -> Result<Option<Pod>, AdoptionError> {
    let name = pod.name_any();
    let body = patch(&pod, job).ok_or_else(|| AdoptionError::NoUid(job.name_any()))?;
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(adopted) => Ok(Some(adopted)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(source) => Err(AdoptionError::Write { name, source }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_adopted_pod_gets_the_controller_reference_and_the_tracking_finalizer_guarded_by_its_version()
     {
        let job: Job = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
        }))
        .unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "stray", "resourceVersion": "12", "finalizers": ["other"]},
        }))
        .unwrap();
        let patch = patch(&pod, &job).unwrap();
        let meta = &patch["metadata"];
        assert_eq!(meta["resourceVersion"], "12");
        assert_eq!(meta["finalizers"], json!(["other", TRACKING_FINALIZER]));
        assert_eq!(meta["ownerReferences"][0]["uid"], "job-uid");
        assert_eq!(meta["ownerReferences"][0]["controller"], true);
        assert_eq!(meta["ownerReferences"][0]["blockOwnerDeletion"], true);
    }
}
