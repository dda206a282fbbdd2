//! Keeping a StatefulSet's ControllerRevisions (upstream `getStatefulSetRevisions`,
//! `adoptOrphanRevisions`, `truncateHistory`): the set's revisions are those its selector matches that
//! it controls or nobody does (orphans are adopted); the update revision is the one equal to the
//! current template — the newest if it already is, an older one renumbered to the next revision on a
//! rollback, or a new one (its name made unique with the collision count); the current revision is
//! the one `status.currentRevision` names, else the update revision.

use std::collections::BTreeSet;

use flotilla_sdk::apimachinery::LabelSelector;
use flotilla_sdk::k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use flotilla_sdk::kube::api::{Api, DeleteParams, Patch, PatchParams};
use flotilla_sdk::kube::{self, ResourceExt};
use flotilla_sdk::{CacheError, CacheQuery, Context};
use serde_json::json;

use super::super::controller_ref::{ClaimError, adopt, recheck_owner};
use super::super::history::{
    self, HistoryError, ParentRef, equal_revision, find_equal_revisions, new_revision,
    next_revision, sort_revisions,
};
use super::revisions::{RevisionError, revision_data, to_truncate};

/// Errors of keeping the revisions.
#[derive(Debug, thiserror::Error)]
pub enum RevisionControlError {
    /// The cache could not list the revisions.
    #[error("cannot list the controller revisions")]
    List(#[source] CacheError),
    /// Adopting an orphan revision failed.
    #[error(transparent)]
    Adopt(#[from] ClaimError),
    /// The revision data could not be built.
    #[error(transparent)]
    Data(#[from] RevisionError),
    /// Creating the update revision failed.
    #[error(transparent)]
    Create(#[from] HistoryError),
    /// Renumbering a revision (a rollback) failed.
    #[error("cannot renumber controller revision {name}")]
    Renumber {
        /// The revision.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Deleting an old revision failed.
    #[error("cannot delete controller revision {name}")]
    Delete {
        /// The revision.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// The set's revisions after resolving them.
#[derive(Debug)]
pub struct Revisions {
    /// Every revision of the set (adopted ones included) as listed, oldest first.
    pub history: Vec<ControllerRevision>,
    /// The revision of the pods before the update in progress.
    pub current: ControllerRevision,
    /// The revision the set's template makes.
    pub update: ControllerRevision,
    /// `status.collisionCount`, raised for every name collision met.
    pub collision_count: i32,
}

/// The parent reference of `set` for its revisions.
pub fn parent(set: &StatefulSet) -> ParentRef {
    ParentRef {
        api_version: "apps/v1".into(),
        kind: "StatefulSet".into(),
        name: set.name_any(),
        namespace: set.namespace().unwrap_or_default(),
        uid: set.uid().unwrap_or_default(),
    }
}

/// Lists, adopts and resolves the revisions of `set`, creating or renumbering the update revision.
///
/// # Errors
/// [`RevisionControlError`] when a read or write fails.
pub async fn resolve(
    ctx: &Context,
    set: &StatefulSet,
    selector: &LabelSelector,
    api: &Api<ControllerRevision>,
) -> Result<Revisions, RevisionControlError> {
    let namespace = set.namespace().unwrap_or_default();
    let uid = set.uid().unwrap_or_default();
    let query = CacheQuery::all()
        .namespace(&namespace)
        .labels(&selector.to_string());
    let listed: Vec<ControllerRevision> = ctx
        .cache()
        .list(&query)
        .await
        .map_err(RevisionControlError::List)?;
    let mut revisions = Vec::new();
    let mut orphans = Vec::new();
    for revision in listed {
        match revision
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
        {
            None => orphans.push(revision),
            Some(owner) if owner.uid == uid => revisions.push(revision),
            Some(_) => {}
        }
    }
    if !orphans.is_empty() && set.metadata.deletion_timestamp.is_none() {
        let sets: Api<StatefulSet> = Api::namespaced(ctx.client(), &namespace);
        recheck_owner(&sets, set).await?;
        for orphan in orphans {
            revisions.extend(adopt(api, orphan, set).await?);
        }
    }
    sort_revisions(&mut revisions);

    let mut collision_count = set
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let parent = parent(set);
    let wanted = build(set, &parent, next_revision(&revisions), collision_count)?;
    let equal = find_equal_revisions(&revisions, &wanted);
    let update = match (equal.last(), revisions.last()) {
        (Some(found), Some(newest)) if equal_revision(newest, found) => newest.clone(),
        (Some(found), _) => {
            // A rollback: the old revision becomes the newest.
            let name = found.name_any();
            let patch = json!({"revision": wanted.revision});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| RevisionControlError::Renumber { name, source })?
        }
        (None, _) => history::create_revision(api, &parent, wanted, &mut collision_count).await?,
    };
    let current_name = set
        .status
        .as_ref()
        .and_then(|s| s.current_revision.as_deref())
        .unwrap_or_default();
    let current = revisions
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(current_name))
        .cloned()
        .unwrap_or_else(|| update.clone());
    Ok(Revisions {
        history: revisions,
        current,
        update,
        collision_count,
    })
}

/// The revision `set`'s template makes at number `revision` (upstream `newRevision`): the template's
/// labels and the hash label (`controller.kubernetes.io/hash`), the set's annotations, the set as
/// controller.
fn build(
    set: &StatefulSet,
    parent: &ParentRef,
    revision: i64,
    collision_count: i32,
) -> Result<ControllerRevision, RevisionError> {
    let labels = set
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let data = revision_data(set)?;
    let mut built = new_revision(parent, &labels, data, revision, Some(collision_count));
    if let Some(annotations) = set.metadata.annotations.clone() {
        built
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(annotations);
    }
    Ok(built)
}

/// Deletes the revisions beyond `revisionHistoryLimit` that neither status revision nor any pod uses
/// (upstream `truncateHistory`).
///
/// # Errors
/// [`RevisionControlError::Delete`] when a deletion fails.
pub async fn truncate(
    api: &Api<ControllerRevision>,
    set: &StatefulSet,
    revisions: &Revisions,
    pod_revisions: &BTreeSet<&str>,
) -> Result<(), RevisionControlError> {
    let limit = set
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10);
    let mut live: BTreeSet<&str> = pod_revisions.clone();
    live.extend(revisions.current.metadata.name.as_deref());
    live.extend(revisions.update.metadata.name.as_deref());
    for name in to_truncate(&revisions.history, &live, limit) {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(RevisionControlError::Delete {
                    name: name.to_owned(),
                    source,
                });
            }
        }
    }
    Ok(())
}
