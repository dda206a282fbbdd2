//! What to do with a dependent, given the state of each of its owners (upstream `attemptToDeleteItem`):
//! keep it while any owner is solid (dropping references to owners that are gone or deleting in the
//! foreground), delete it in the foreground when an owner waits for it and it has dependents of its own
//! (first making its references non-blocking when one of those waits too: a possible ownerReference
//! cycle), and otherwise delete it with the policy its own finalizers ask for.

use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use flotilla_sdk::kube::api::DynamicObject;

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

/// What the decision needs to know of a dependent's own dependents.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnDependents {
    /// It has dependents.
    pub any: bool,
    /// One of them is being deleted in the foreground: it waits for its own dependents.
    pub one_waits: bool,
}

/// What the prefetched `dependents` of an object with `owners` tell [`decide`].
///
/// A dependent waits when the coordinator's copy shows it deleting with the `foregroundDeletion`
/// finalizer, or when it is also one of the object's owners and the live read found that owner
/// waiting: the copy may lag the read, and a two-object cycle is exactly the case that must not be
/// missed.
pub fn own_dependents(
    dependents: &[DynamicObject],
    owners: &[(OwnerReference, OwnerState)],
) -> OwnDependents {
    let waits = |d: &DynamicObject| {
        let meta = &d.metadata;
        let foreground = meta.deletion_timestamp.is_some()
            && meta
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FOREGROUND_FINALIZER);
        foreground
            || owners.iter().any(|(r, s)| {
                *s == OwnerState::Waiting && meta.uid.as_deref() == Some(r.uid.as_str())
            })
    };
    OwnDependents {
        any: !dependents.is_empty(),
        one_waits: dependents.iter().any(waits),
    }
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
    /// It goes in the foreground, but first its references stop blocking their owners (see
    /// [`unblocked`]): an owner waits for it and one of its own dependents waits too.
    UnblockThenDelete,
}

/// Decides for a dependent with `owners` (reference and state each), its own `finalizers`, and what it
/// knows of its own dependents.
pub fn decide(
    owners: &[(OwnerReference, OwnerState)],
    finalizers: &[String],
    dependents: OwnDependents,
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
    if waiting && dependents.any {
        // The ownerReference cycle (upstream `attemptToDeleteItem`): A and B own each other with
        // blockOwnerDeletion and A is deleted in the foreground. B, deleted in the foreground as
        // well, would wait for A while A waits for B, both forever. A dependent that waits is the
        // sign, so B first stops blocking its owners: A can go, then B. Like upstream's, the sign
        // has false positives (a waiting dependent outside any cycle); their only cost is that the
        // owners may go before this object is fully gone.
        return if dependents.one_waits {
            Decision::UnblockThenDelete
        } else {
            Decision::Delete(Policy::Foreground)
        };
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

/// `references` with every `blockOwnerDeletion: true` turned to `false` and nothing else changed
/// (upstream's `unblockOwnerReferences` patch); `None` when none blocks (nothing to write).
pub fn unblocked(references: &[OwnerReference]) -> Option<Vec<OwnerReference>> {
    if !references
        .iter()
        .any(|r| r.block_owner_deletion == Some(true))
    {
        return None;
    }
    Some(
        references
            .iter()
            .map(|r| OwnerReference {
                block_owner_deletion: r.block_owner_deletion.map(|_| false),
                ..r.clone()
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use flotilla_sdk::k8s_openapi::jiff::Timestamp;
    use flotilla_sdk::kube::api::ObjectMeta;

    use super::*;

    const NONE: OwnDependents = OwnDependents {
        any: false,
        one_waits: false,
    };
    const SOME: OwnDependents = OwnDependents {
        any: true,
        one_waits: false,
    };
    const ONE_WAITS: OwnDependents = OwnDependents {
        any: true,
        one_waits: true,
    };

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
            decide(&owners, &[], NONE),
            Decision::DropReferences(vec!["b".into(), "c".into()])
        );
        assert_eq!(decide(&owners[..1], &[], NONE), Decision::Keep);
        assert_eq!(decide(&[], &[], NONE), Decision::Keep);
    }

    #[test]
    fn a_dependent_whose_owners_are_gone_is_deleted_in_the_background_unless_it_asks_otherwise() {
        let owners = [(reference("a"), OwnerState::Dangling)];
        assert_eq!(
            decide(&owners, &[], SOME),
            Decision::Delete(Policy::Background)
        );
        assert_eq!(
            decide(&owners, &[ORPHAN_FINALIZER.into()], NONE),
            Decision::Delete(Policy::Orphan)
        );
        assert_eq!(
            decide(&owners, &[FOREGROUND_FINALIZER.into()], NONE),
            Decision::Delete(Policy::Foreground)
        );
    }

    #[test]
    fn a_waiting_owner_deletes_a_dependent_with_dependents_in_the_foreground() {
        let owners = [(reference("a"), OwnerState::Waiting)];
        assert_eq!(
            decide(&owners, &[], SOME),
            Decision::Delete(Policy::Foreground)
        );
        assert_eq!(
            decide(&owners, &[], NONE),
            Decision::Delete(Policy::Background)
        );
    }

    #[test]
    fn a_dependent_whose_waiting_owner_has_a_waiting_dependent_unblocks_its_owners_before_it_goes()
    {
        let waiting = [(reference("a"), OwnerState::Waiting)];
        assert_eq!(
            decide(&waiting, &[], ONE_WAITS),
            Decision::UnblockThenDelete
        );
        let solid = [(reference("a"), OwnerState::Solid)];
        assert_eq!(
            decide(&solid, &[], ONE_WAITS),
            Decision::Keep,
            "a solid owner keeps it, cycle or not"
        );
        let dangling = [(reference("a"), OwnerState::Dangling)];
        assert_eq!(
            decide(&dangling, &[], ONE_WAITS),
            Decision::Delete(Policy::Background),
            "no owner waits for it: nothing to unblock"
        );
    }

    fn object(uid: &str, deleting: bool, finalizers: &[&str]) -> DynamicObject {
        DynamicObject {
            types: None,
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
                ..ObjectMeta::default()
            },
            data: serde_json::Value::Null,
        }
    }

    #[test]
    fn a_dependent_waits_when_its_copy_deletes_in_the_foreground_or_it_is_an_owner_found_waiting() {
        let plain = [object("d", false, &[])];
        assert_eq!(own_dependents(&plain, &[]), SOME);
        assert_eq!(own_dependents(&[], &[]), NONE);
        let foreground = [object("d", true, &[FOREGROUND_FINALIZER])];
        assert_eq!(own_dependents(&foreground, &[]), ONE_WAITS);
        let orphaning = [object("d", true, &[ORPHAN_FINALIZER])];
        assert_eq!(
            own_dependents(&orphaning, &[]),
            SOME,
            "only a foreground deletion waits for dependents"
        );
        // The copy lags: it shows the owner not yet deleting, the live read found it waiting.
        let lagging = [object("a", false, &[])];
        assert_eq!(
            own_dependents(&lagging, &[(reference("a"), OwnerState::Waiting)]),
            ONE_WAITS
        );
        assert_eq!(
            own_dependents(&lagging, &[(reference("a"), OwnerState::Solid)]),
            SOME
        );
    }

    #[test]
    fn unblocking_clears_only_blocking_flags_and_keeps_every_reference() {
        let refs = [
            OwnerReference {
                block_owner_deletion: Some(true),
                ..reference("a")
            },
            OwnerReference {
                block_owner_deletion: None,
                ..reference("b")
            },
        ];
        let once = unblocked(&refs).expect("one reference blocks");
        assert_eq!(once.len(), 2);
        assert_eq!(once[0].block_owner_deletion, Some(false));
        assert_eq!(once[0].uid, "a");
        assert_eq!(once[1], refs[1]);
        assert_eq!(unblocked(&once), None, "nothing left to write");
    }
}
