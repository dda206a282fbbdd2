//! The writes a StatefulSet sync makes on its pods and claims, with the Events
//! kube-controller-manager records for them (upstream `StatefulPodControl`): claims are created
//! before their pod, a created pod's claims get the owners the retention policy asks for, a pod whose
//! identity or storage drifted is repaired.

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::apps::v1::StatefulSet;
use flotilla_sdk::k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use flotilla_sdk::kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use flotilla_sdk::kube::{self, ResourceExt};
use flotilla_sdk::{Context, EventType};
use serde_json::json;

use super::super::events::publish;
use super::claims::{
    Owner, Retention, claim_owners_up_to_date, has_stale_ref, pod_claims, updated_owner_refs,
};
use super::identity::{identity_matches, storage_matches, update_identity, update_storage};
use super::ordinals::OrdinalRange;

/// Errors of a write on a pod or claim.
#[derive(Debug, thiserror::Error)]
pub enum PodControlError {
    /// The API refused a write on a pod.
    #[error("cannot {verb} pod {name}")]
    Pod {
        /// `create`, `update` or `delete`.
        verb: &'static str,
        /// The pod.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The API refused a write on a claim.
    #[error("cannot {verb} claim {name}")]
    Claim {
        /// `create` or `update`.
        verb: &'static str,
        /// The claim.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// A claim the pod needs is being deleted; the pod must wait for it to go and be recreated.
    #[error("pvc {0} is being deleted")]
    ClaimDeleting(String),
}

/// What the API said, as Go's error string prints it (the Status message when there is one).
fn message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// The writes of one sync of `set`.
pub struct PodControl<'a> {
    /// The reconcile's context (client, events).
    pub ctx: &'a Context,
    /// The set (its retention policy and name; the template comes with each pod).
    pub set: &'a StatefulSet,
    /// The set's ordinals.
    pub range: OrdinalRange,
    /// Its retention policy.
    pub policy: Retention,
    /// The claims of the namespace the cache holds, by name.
    pub claims: &'a BTreeMap<String, PersistentVolumeClaim>,
    /// Pods of the set's namespace.
    pub pods_api: Api<Pod>,
    /// Claims of the set's namespace.
    pub claims_api: Api<PersistentVolumeClaim>,
}

impl PodControl<'_> {
    fn record_pod(&self, verb: &'static str, pod: &str, err: Option<&kube::Error>) {
        let set = self.set.name_any();
        let title = title(verb);
        match err {
            None => publish(
                self.ctx,
                self.set,
                EventType::Normal,
                &format!("Successful{title}"),
                format!("{verb} Pod {pod} in StatefulSet {set} successful"),
            ),
            Some(err) => publish(
                self.ctx,
                self.set,
                EventType::Warning,
                &format!("Failed{title}"),
                format!(
                    "{verb} Pod {pod} in StatefulSet {set} failed error: {}",
                    message(err)
                ),
            ),
        }
    }

    fn record_claim(&self, claim: &str, pod: &str, err: Option<&kube::Error>) {
        let set = self.set.name_any();
        match err {
            None => publish(
                self.ctx,
                self.set,
                EventType::Normal,
                "SuccessfulCreate",
                format!("create Claim {claim} Pod {pod} in StatefulSet {set} success"),
            ),
            Some(err) => publish(
                self.ctx,
                self.set,
                EventType::Warning,
                "FailedCreate",
                format!(
                    "create Claim {claim} for Pod {pod} in StatefulSet {set} failed error: {}",
                    message(err)
                ),
            ),
        }
    }

    /// Whether a claim of the (not yet created) pod at `ordinal` still carries another pod's uid
    /// (upstream `PodClaimIsStale`); only under `whenScaled: Delete`, where claims are not reused.
    pub fn claims_stale(&self, pod_name: &str, ordinal: i32) -> bool {
        if !self.policy.when_scaled {
            return false;
        }
        let unborn = Pod {
            metadata: flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(pod_name.to_owned()),
                ..Default::default()
            },
            ..Pod::default()
        };
        pod_claims(self.set, ordinal).iter().any(|c| {
            self.claims
                .get(&c.name_any())
                .is_some_and(|found| has_stale_ref(found, &Owner::pod(&unborn)))
        })
    }

    /// Whether the claims of the existing `pod` at `ordinal` carry the owners the policy asks for
    /// (upstream `ClaimsMatchRetentionPolicy`; a claim the cache lacks counts as matching).
    pub fn claims_match(&self, pod: &Pod, ordinal: i32) -> bool {
        let in_range = self.range.contains(ordinal);
        pod_claims(self.set, ordinal).iter().all(|c| {
            self.claims.get(&c.name_any()).is_none_or(|found| {
                claim_owners_up_to_date(
                    found,
                    self.policy,
                    &Owner::set(self.set),
                    &Owner::pod(pod),
                    in_range,
                )
            })
        })
    }

    /// Creates the claims `pod` (at `ordinal`) mounts that the cache lacks, recording an Event for
    /// each (upstream `createPersistentVolumeClaims`). The claims created, for setting their owners.
    ///
    /// # Errors
    /// The first failure, after trying every claim; a claim being deleted is one.
    pub async fn create_claims(
        &self,
        pod_name: &str,
        ordinal: i32,
    ) -> Result<Vec<PersistentVolumeClaim>, PodControlError> {
        let mut created = Vec::new();
        let mut first = None;
        for claim in pod_claims(self.set, ordinal) {
            let name = claim.name_any();
            if let Some(found) = self.claims.get(&name) {
                if found.metadata.deletion_timestamp.is_some() {
                    first.get_or_insert(PodControlError::ClaimDeleting(name));
                }
                continue;
            }
            match self.claims_api.create(&PostParams::default(), &claim).await {
                Ok(claim) => {
                    self.record_claim(&name, pod_name, None);
                    created.push(claim);
                }
                Err(source) => {
                    // A claim that exists already was created by an earlier sync the cache has not
                    // caught up with: no Event, and the sync retries.
                    if !is_status(&source, 409) {
                        self.record_claim(&name, pod_name, Some(&source));
                    }
                    first.get_or_insert(PodControlError::Claim {
                        verb: "create",
                        name,
                        source,
                    });
                }
            }
        }
        first.map_or(Ok(created), Err)
    }

    /// Creates `pod` at `ordinal` after its claims (upstream `CreateStatefulPod`), then gives the claims
    /// just created the owners the retention policy asks for.
    ///
    /// # Errors
    /// When a claim or the pod cannot be created (an Event says so, except for a pod that already
    /// exists), or a claim's owners cannot be set.
    pub async fn create_pod(&self, pod: &Pod, ordinal: i32) -> Result<(), PodControlError> {
        let name = pod.name_any();
        let created_claims = match self.create_claims(&name, ordinal).await {
            Ok(claims) => claims,
            Err(err) => {
                let source = match &err {
                    PodControlError::Claim { source, .. } | PodControlError::Pod { source, .. } => {
                        message(source)
                    }
                    PodControlError::ClaimDeleting(_) => err.to_string(),
                };
                let set = self.set.name_any();
                publish(
                    self.ctx,
                    self.set,
                    EventType::Warning,
                    "FailedCreate",
                    format!("create Pod {name} in StatefulSet {set} failed error: {source}"),
                );
                return Err(err);
            }
        };
        let created = match self.pods_api.create(&PostParams::default(), pod).await {
            Ok(created) => created,
            Err(source) if is_status(&source, 409) => {
                return Err(PodControlError::Pod {
                    verb: "create",
                    name,
                    source,
                });
            }
            Err(source) => {
                self.record_pod("create", &name, Some(&source));
                return Err(PodControlError::Pod {
                    verb: "create",
                    name,
                    source,
                });
            }
        };
        // Upstream sets the owners here too, but from its informer, which has not seen the claims
        // yet; the claims just created are at hand, so they get their owners now rather than on the
        // next sync.
        for claim in &created_claims {
            self.set_claim_owners(claim, &created, ordinal).await?;
        }
        self.record_pod("create", &name, None);
        Ok(())
    }

    /// Creates the claims a Pending pod lacks and sets the owners of those it has (upstream
    /// `createMissingPersistentVolumeClaims`).
    ///
    /// # Errors
    /// When a claim cannot be created or updated.
    pub async fn create_missing_claims(
        &self,
        pod: &Pod,
        ordinal: i32,
    ) -> Result<(), PodControlError> {
        let created = self.create_claims(&pod.name_any(), ordinal).await?;
        for claim in &created {
            self.set_claim_owners(claim, pod, ordinal).await?;
        }
        self.update_claims_for_retention(pod, ordinal).await
    }

    /// Gives each cached claim of `pod` the owners the retention policy asks for (upstream
    /// `UpdatePodClaimForRetentionPolicy`).
    ///
    /// # Errors
    /// When a claim cannot be updated.
    pub async fn update_claims_for_retention(
        &self,
        pod: &Pod,
        ordinal: i32,
    ) -> Result<(), PodControlError> {
        for claim in pod_claims(self.set, ordinal) {
            if let Some(found) = self.claims.get(&claim.name_any()) {
                self.set_claim_owners(found, pod, ordinal).await?;
            }
        }
        Ok(())
    }

    async fn set_claim_owners(
        &self,
        claim: &PersistentVolumeClaim,
        pod: &Pod,
        ordinal: i32,
    ) -> Result<(), PodControlError> {
        let in_range = self.range.contains(ordinal);
        let (set, owner) = (Owner::set(self.set), Owner::pod(pod));
        if claim_owners_up_to_date(claim, self.policy, &set, &owner, in_range) {
            return Ok(());
        }
        let refs = updated_owner_refs(claim, self.policy, &set, &owner, in_range);
        let name = claim.name_any();
        // Guarded by the resourceVersion read: a claim changed meanwhile is looked at again.
        let patch = json!({"metadata": {
            "ownerReferences": refs,
            "resourceVersion": claim.resource_version(),
        }});
        match self
            .claims_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(source) if is_status(&source, 404) => Ok(()),
            Err(source) => Err(PodControlError::Claim {
                verb: "update",
                name,
                source,
            }),
        }
    }

    /// Restores the identity and storage of `pod` at `ordinal` and its claims' owners (upstream
    /// `UpdateStatefulPod`), recording `SuccessfulUpdate` or `FailedUpdate` as upstream does.
    ///
    /// # Errors
    /// When a claim or the pod cannot be written.
    pub async fn repair(&self, pod: &Pod, ordinal: i32) -> Result<(), PodControlError> {
        let name = pod.name_any();
        let result = self.repair_inner(pod, ordinal).await;
        match &result {
            Ok(()) => self.record_pod("update", &name, None),
            Err(PodControlError::Pod { source, .. } | PodControlError::Claim { source, .. }) => {
                self.record_pod("update", &name, Some(source));
            }
            Err(PodControlError::ClaimDeleting(_)) => {}
        }
        result
    }

    async fn repair_inner(&self, pod: &Pod, ordinal: i32) -> Result<(), PodControlError> {
        let name = pod.name_any();
        let mut fixed = pod.clone();
        let mut patch = json!({"metadata": {"resourceVersion": pod.resource_version()}});
        let mut dirty = false;
        if !identity_matches(self.set, pod) {
            update_identity(self.set, &mut fixed, ordinal);
            patch["metadata"]["labels"] = json!(fixed.metadata.labels);
            dirty = true;
        }
        if !storage_matches(self.set, pod) {
            // A pod's volumes are immutable, so the API refuses this as it refuses upstream's update;
            // the claims are made all the same, and the error says what is wrong.
            update_storage(self.set, &mut fixed, ordinal);
            self.create_claims(&name, ordinal).await?;
            patch["spec"] = json!({"volumes": fixed.spec.as_ref().and_then(|s| s.volumes.clone())});
            dirty = true;
        }
        if !self.claims_match(pod, ordinal) {
            self.update_claims_for_retention(pod, ordinal).await?;
        }
        if !dirty {
            return Ok(());
        }
        self.pods_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|source| PodControlError::Pod {
                verb: "update",
                name,
                source,
            })
    }

    /// Deletes `pod` (upstream `DeleteStatefulPod`); a pod already gone is no error and no Event.
    ///
    /// # Errors
    /// When the API refuses (an Event says so).
    pub async fn delete_pod(&self, pod: &Pod) -> Result<(), PodControlError> {
        let name = pod.name_any();
        match self.pods_api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                self.record_pod("delete", &name, None);
                Ok(())
            }
            Err(source) if is_status(&source, 404) => Ok(()),
            Err(source) => {
                self.record_pod("delete", &name, Some(&source));
                Err(PodControlError::Pod {
                    verb: "delete",
                    name,
                    source,
                })
            }
        }
    }
}

/// `create` → `Create` (Go's `strings.Title` of the verb).
fn title(verb: &str) -> String {
    let mut chars = verb.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_reasons_title_case_the_verb() {
        assert_eq!(title("create"), "Create");
        assert_eq!(title("delete"), "Delete");
        assert_eq!(title(""), "");
    }
}
