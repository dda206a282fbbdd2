//! Which pods an owner claims (upstream `PodControllerRefManager.ClaimPods`): its own pods that still
//! match stay, its pods that stopped matching are released, matching orphans are adopted.

use flotilla_common::LabelSelector;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// What to do with the pods an owner could claim.
#[derive(Debug, Default)]
pub struct Claims {
    /// Controlled by the owner and matching: they count.
    pub keep: Vec<Pod>,
    /// Controlled by the owner but no longer matching: remove the owner reference.
    pub release: Vec<Pod>,
    /// Matching and controlled by nobody: add the owner reference, then they count.
    pub adopt: Vec<Pod>,
}

/// Sorts `owned` (the pods the owner controls) and `matching` (the pods its selector selects, any
/// owner). An owner being deleted neither adopts nor releases; a pod being deleted is neither adopted
/// nor released; pods of another controller are left alone.
pub fn claim(
    owned: Vec<Pod>,
    matching: Vec<Pod>,
    selector: &LabelSelector,
    owner_deleting: bool,
) -> Claims {
    let mut claims = Claims::default();
    for pod in owned {
        if selector.matches(pod.labels()) {
            claims.keep.push(pod);
        } else if !owner_deleting && pod.metadata.deletion_timestamp.is_none() {
            claims.release.push(pod);
        }
    }
    if owner_deleting {
        return claims;
    }
    for pod in matching {
        let orphan = !pod
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true));
        if orphan && pod.metadata.deletion_timestamp.is_none() && selector.matches(pod.labels()) {
            claims.adopt.push(pod);
        }
    }
    claims
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;

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
