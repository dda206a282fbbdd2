//! Which objects an owner claims (upstream `ControllerRefManager`: `ClaimPods` of the replica
//! controllers, `ClaimReplicaSets` of the deployment controller): its own objects that still match stay,
//! its objects that stopped matching are released, matching orphans are adopted. The decision only; the
//! writes are [`super::controller_ref`]'s.

use flotilla_sdk::apimachinery::LabelSelector;
use flotilla_sdk::kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use flotilla_sdk::{CacheQuery, Context, KindScope};

/// What to do with the objects (pods, ReplicaSets) an owner could claim.
#[derive(Debug)]
pub struct Claims<T> {
    /// Controlled by the owner and matching: they count.
    pub keep: Vec<T>,
    /// Controlled by the owner but no longer matching: remove the owner reference.
    pub release: Vec<T>,
    /// Matching and controlled by nobody: add the owner reference, then they count.
    pub adopt: Vec<T>,
}

impl<T> Default for Claims<T> {
    fn default() -> Self {
        Self {
            keep: Vec::new(),
            release: Vec::new(),
            adopt: Vec::new(),
        }
    }
}

/// Sorts `owned` (the objects the owner controls) and `matching` (the objects its selector selects,
/// any owner). An owner being deleted neither adopts nor releases; an object being deleted is neither
/// adopted nor released; objects of another controller are left alone.
pub fn claim<T: Resource>(
    owned: Vec<T>,
    matching: Vec<T>,
    selector: &LabelSelector,
    owner_deleting: bool,
) -> Claims<T> {
    let mut claims = Claims::default();
    for object in owned {
        if selector.matches(object.labels()) {
            claims.keep.push(object);
        } else if !owner_deleting && object.meta().deletion_timestamp.is_none() {
            claims.release.push(object);
        }
    }
    if owner_deleting {
        return claims;
    }
    for object in matching {
        let orphan = !object
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true));
        if orphan && object.meta().deletion_timestamp.is_none() && selector.matches(object.labels())
        {
            claims.adopt.push(object);
        }
    }
    claims
}

/// The objects of kind `T` in `namespace` that `selector` matches, from the cache: what an owner may
/// adopt. Empty for an owner being deleted (it adopts nothing), and when the list fails: adoption can
/// wait for a later sync, the owner's own work cannot (a failed list, e.g. more matching objects than
/// one message holds, must not stall it); the failure is logged.
pub async fn candidates<T>(
    ctx: &Context,
    namespace: &str,
    selector: &LabelSelector,
    owner_deleting: bool,
) -> Vec<T>
where
    T: Resource<DynamicType = ()> + DeserializeOwned,
    T::Scope: KindScope,
{
    if owner_deleting {
        return Vec::new();
    }
    let query = CacheQuery::all()
        .namespace(namespace)
        .labels(&selector.to_string());
    ctx.cache().list(&query).await.unwrap_or_else(|err| {
        tracing::warn!(error = %err, kind = %T::kind(&()), "cannot list the objects to adopt");
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use flotilla_sdk::k8s_openapi::jiff::Timestamp;

    use super::*;

    fn pod(name: &str, app: &str, controller: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.labels = Some(BTreeMap::from([("app".to_owned(), app.to_owned())]));
        pod.metadata.owner_references = controller.map(|uid| {
            vec![OwnerReference {
                uid: uid.into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]
        });
        pod
    }

    fn deleting(mut pod: Pod) -> Pod {
        pod.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        pod
    }

    fn names(pods: &[Pod]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap())
            .collect()
    }

    fn web() -> LabelSelector {
        LabelSelector::parse("app=web").unwrap()
    }

    #[test]
    fn own_matching_pods_stay_and_own_non_matching_pods_are_released() {
        let owned = vec![pod("a", "web", Some("me")), pod("b", "db", Some("me"))];
        let claims = claim(owned, Vec::new(), &web(), false);
        assert_eq!(names(&claims.keep), ["a"]);
        assert_eq!(names(&claims.release), ["b"]);
        assert!(claims.adopt.is_empty());
    }

    #[test]
    fn matching_orphans_are_adopted_but_pods_of_other_controllers_are_not() {
        let matching = vec![
            pod("orphan", "web", None),
            pod("theirs", "web", Some("them")),
            pod("mine", "web", Some("me")),
        ];
        let claims = claim(Vec::new(), matching, &web(), false);
        assert_eq!(names(&claims.adopt), ["orphan"]);
    }

    #[test]
    fn pods_being_deleted_are_neither_adopted_nor_released() {
        let owned = vec![deleting(pod("leaving", "db", Some("me")))];
        let matching = vec![deleting(pod("dying-orphan", "web", None))];
        let claims = claim(owned, matching, &web(), false);
        assert!(claims.release.is_empty() && claims.adopt.is_empty());
    }

    #[test]
    fn an_owner_being_deleted_neither_adopts_nor_releases() {
        let owned = vec![pod("a", "web", Some("me")), pod("b", "db", Some("me"))];
        let matching = vec![pod("orphan", "web", None)];
        let claims = claim(owned, matching, &web(), true);
        assert_eq!(names(&claims.keep), ["a"]);
        assert!(claims.release.is_empty() && claims.adopt.is_empty());
    }
}
