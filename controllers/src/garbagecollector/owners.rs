//! What to do with a dependent, given the state of each of its owners (upstream `attemptToDeleteItem`):
//! keep it while any owner is solid (dropping references to owners that are gone or deleting in the
//! foreground), delete it in the foreground when an owner waits for it and it has dependents of its own,
//! and otherwise delete it with the policy its own finalizers ask for.

use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use flotilla_sdk::apimachinery::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};

/// One owner as the API shows it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// It exists with the referenced uid and is not being deleted in the foreground.
    Solid,
    /// No object of that name has the referenced uid (or its kind is not served).
    Dangling,
    /// It exists and is being deleted in the foreground: it waits for its dependents to go.
    Waiting,
}

/// The state of an owner from the live object found under the reference's name, if any: its uid,
/// whether it is being deleted, and its finalizers.
pub fn owner_state(
    reference: &OwnerReference,
    live: Option<(&str, bool, &[String])>,
) -> OwnerState {
    match live {
        Some((uid, _, _)) if uid != reference.uid => OwnerState::Dangling,
        Some((_, true, finalizers)) if finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) => {
            OwnerState::Waiting
        }
        Some(_) => OwnerState::Solid,
        None => OwnerState::Dangling,
    }
}

/// The propagation policy of a delete, as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Dependents are collected after the object is gone.
    Background,
    /// The object stays until its blocking dependents are gone.
    Foreground,
    /// Dependents lose their reference to the object.
    Orphan,
}

/// What the collector does with a dependent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: it has no owners, or only solid ones.
    Keep,
    /// It stays (a solid owner remains) but loses its references to these owner uids.
    DropReferences(Vec<String>),
    /// It goes, with this propagation policy.
    Delete(Policy),
}

/// Decides for a dependent with `owners` (reference and state each), its own `finalizers`, and whether
/// it has dependents of its own.
pub fn decide(
    owners: &[(OwnerReference, OwnerState)],
    finalizers: &[String],
    has_dependents: bool,
) -> Decision {
    if owners.is_empty() {
        return Decision::Keep;
    }
    let solid = owners.iter().any(|(_, s)| *s == OwnerState::Solid);
    let waiting = owners.iter().any(|(_, s)| *s == OwnerState::Waiting);
    if solid {
        let gone: Vec<String> = owners
            .iter()
            .filter(|(_, s)| *s != OwnerState::Solid)
            .map(|(r, _)| r.uid.clone())
            .collect();
        return if gone.is_empty() {
            Decision::Keep
        } else {
            Decision::DropReferences(gone)
        };
    }
    if waiting && has_dependents {
        return Decision::Delete(Policy::Foreground);
    }
    let policy = if finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
        Policy::Orphan
    } else if finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
        Policy::Foreground
    } else {
        Policy::Background
    };
    Decision::Delete(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("rs-{uid}"),
            uid: uid.into(),
            ..OwnerReference::default()
        }
    }

    #[test]
    fn an_owner_with_another_uid_is_dangling() {
        let r = reference("u1");
        assert_eq!(
            owner_state(&r, Some(("u2", false, &[]))),
            OwnerState::Dangling
        );
        assert_eq!(owner_state(&r, None), OwnerState::Dangling);
        assert_eq!(owner_state(&r, Some(("u1", false, &[]))), OwnerState::Solid);
    }

    #[test]
    fn an_owner_deleting_in_the_foreground_waits_and_one_deleting_otherwise_is_solid() {
        let r = reference("u1");
        let fg = [FOREGROUND_FINALIZER.to_owned()];
        assert_eq!(
            owner_state(&r, Some(("u1", true, &fg))),
            OwnerState::Waiting
        );
        assert_eq!(owner_state(&r, Some(("u1", true, &[]))), OwnerState::Solid);
    }

    #[test]
    fn a_solid_owner_keeps_the_dependent_and_drops_references_to_the_others() {
        let owners = [
            (reference("a"), OwnerState::Solid),
            (reference("b"), OwnerState::Dangling),
            (reference("c"), OwnerState::Waiting),
        ];
        assert_eq!(
            decide(&owners, &[], false),
            Decision::DropReferences(vec!["b".into(), "c".into()])
        );
        assert_eq!(decide(&owners[..1], &[], false), Decision::Keep);
        assert_eq!(decide(&[], &[], false), Decision::Keep);
    }

    #[test]
    fn a_dependent_whose_owners_are_gone_is_deleted_in_the_background_unless_it_asks_otherwise() {
        let owners = [(reference("a"), OwnerState::Dangling)];
        assert_eq!(
            decide(&owners, &[], true),
            Decision::Delete(Policy::Background)
        );
        assert_eq!(
            decide(&owners, &[ORPHAN_FINALIZER.into()], false),
            Decision::Delete(Policy::Orphan)
        );
        assert_eq!(
            decide(&owners, &[FOREGROUND_FINALIZER.into()], false),
            Decision::Delete(Policy::Foreground)
        );
    }

    #[test]
    fn a_waiting_owner_deletes_a_dependent_with_dependents_in_the_foreground() {
        let owners = [(reference("a"), OwnerState::Waiting)];
        assert_eq!(
            decide(&owners, &[], true),
            Decision::Delete(Policy::Foreground)
        );
        assert_eq!(
            decide(&owners, &[], false),
            Decision::Delete(Policy::Background)
        );
    }
}
