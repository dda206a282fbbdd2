//! One sync's view of a Deployment and its ReplicaSets, and the writes it makes: finding or creating
//! the new ReplicaSet (upstream `getNewReplicaSet`), sizing ReplicaSets, deleting old ones and writing
//! the status. The Deployment is changed in memory (revision annotation, conditions, collision count)
//! and written once, at the end, only if it changed.

use std::sync::Arc;

use flotilla_sdk::EventType;
use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube::ResourceExt;
use flotilla_sdk::kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::super::events;
use super::annotations::{set_deployment_revision, set_new_replica_set_annotations};
use super::conditions::{
    self, FAILED_RS_CREATE, FOUND_NEW_RS, NEW_RS_CREATED, PROGRESSING, new_condition,
};
use super::hash::pod_template_hash;
use super::replica_sets::{
    REVISION, max_revision, replicas_annotations_need_update, set_replicas_annotations, set_size,
    size,
};
use super::rolling::new_replica_set_size;
use super::status;
use super::template::{equal_ignore_hash, find_new, new_replica_set};
use super::{Error, spec};
use flotilla_sdk::Context;
use flotilla_sdk::kube;

/// The state of one sync.
pub struct Sync {
    pub(super) ctx: Context,
    pub(super) replica_sets: Api<ReplicaSet>,
    deployments: Api<Deployment>,
    /// The Deployment as the cache held it: what "changed" is measured against.
    original: Arc<Deployment>,
    /// The Deployment as this sync changed it.
    pub(super) d: Deployment,
    /// The ReplicaSets it controls, as last written or read.
    pub(super) rss: Vec<ReplicaSet>,
    /// The time of this sync.
    pub(super) now: Timestamp,
}

impl Sync {
    pub(super) fn new(ctx: Context, original: Arc<Deployment>, rss: Vec<ReplicaSet>) -> Self {
        let namespace = original.namespace().unwrap_or_default();
        Self {
            replica_sets: Api::namespaced(ctx.client(), &namespace),
            deployments: Api::namespaced(ctx.client(), &namespace),
            ctx,
            d: (*original).clone(),
            original,
            rss,
            now: Timestamp::now(),
        }
    }

    /// The working status.
    pub(super) fn status_mut(&mut self) -> &mut DeploymentStatus {
        self.d.status.get_or_insert_with(DeploymentStatus::default)
    }

    /// The index of the new ReplicaSet (running the current template) and of the others.
    pub(super) fn split(&self) -> (Option<usize>, Vec<usize>) {
        let new = find_new(&self.d, &self.rss).and_then(|found| {
            self.rss
                .iter()
                .position(|rs| rs.metadata.uid == found.metadata.uid)
        });
        let olds = (0..self.rss.len()).filter(|i| Some(*i) != new).collect();
        (new, olds)
    }

    /// References to the ReplicaSets at `indexes`.
    pub(super) fn at(&self, indexes: &[usize]) -> Vec<&ReplicaSet> {
        indexes.iter().map(|i| &self.rss[*i]).collect()
    }

    /// The new ReplicaSet, its revision and annotations brought up to date and the Deployment's revision
    /// set to its; created (sized as far as the strategy allows) when missing and `create` holds.
    ///
    /// # Errors
    /// [`Error`] when a write fails; on a name taken by a ReplicaSet with another template the
    /// collision count is raised first, so the retry picks another name.
    pub(super) async fn new_replica_set(&mut self, create: bool) -> Result<Option<usize>, Error> {
        let (new, olds) = self.split();
        let new_revision = max_revision(self.at(&olds)) + 1;
        let desired = spec::replicas(&self.d);
        let replicas = (desired, desired + spec::max_surge(&self.d));
        if let Some(i) = new {
            let mut copy = self.rss[i].clone();
            let annotated =
                set_new_replica_set_annotations(&self.d, &mut copy, new_revision, true, replicas);
            let min_ready = spec::min_ready_seconds(&self.d);
            let rs_spec = copy.spec.get_or_insert_with(Default::default);
            let min_ready_changed = rs_spec.min_ready_seconds.unwrap_or(0) != min_ready;
            rs_spec.min_ready_seconds = Some(min_ready);
            if annotated || min_ready_changed {
                let name = copy.name_any();
                self.rss[i] = self
                    .replica_sets
                    .replace(&name, &PostParams::default(), &copy)
                    .await
                    .map_err(|source| Error::Update { name, source })?;
            }
            let revision = self.rss[i]
                .annotations()
                .get(REVISION)
                .cloned()
                .unwrap_or_default();
            set_deployment_revision(&mut self.d, &revision);
            if spec::progress_deadline(&self.d).is_some()
                && conditions::get(self.status_mut(), PROGRESSING).is_none()
            {
                let message = format!("Found new replica set {:?}", self.rss[i].name_any());
                let condition = new_condition(PROGRESSING, "True", FOUND_NEW_RS, message, self.now);
                conditions::set(self.status_mut(), condition);
            }
            return Ok(Some(i));
        }
        if !create {
            return Ok(None);
        }
        let incomplete = || Error::Incomplete(self.d.name_any());
        let template = spec::template(&self.d).ok_or_else(incomplete)?;
        let collision_count = self.d.status.as_ref().and_then(|s| s.collision_count);
        let hash = pod_template_hash(template, collision_count);
        let mut rs = new_replica_set(&self.d, &hash).ok_or_else(incomplete)?;
        let all: Vec<&ReplicaSet> = self.rss.iter().chain(std::iter::once(&rs)).collect();
        let new_size = new_replica_set_size(&self.d, &all, &rs);
        set_size(&mut rs, new_size);
        set_new_replica_set_annotations(&self.d, &mut rs, new_revision, false, replicas);
        let name = rs.name_any();
        match self.replica_sets.create(&PostParams::default(), &rs).await {
            Ok(created) => {
                if new_size > 0 {
                    let note = format!("Scaled up replica set {name} from 0 to {new_size}");
                    self.publish(EventType::Normal, "ScalingReplicaSet", note);
                }
                set_deployment_revision(&mut self.d, &new_revision.to_string());
                if spec::progress_deadline(&self.d).is_some() {
                    let message = format!("Created new replica set {name:?}");
                    let condition =
                        new_condition(PROGRESSING, "True", NEW_RS_CREATED, message, self.now);
                    conditions::set(self.status_mut(), condition);
                }
                self.rss.push(created);
                Ok(Some(self.rss.len() - 1))
            }
            Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => {
                self.already_exists(&name, new_revision).await
            }
            Err(source) => {
                if spec::progress_deadline(&self.d).is_some() {
                    let message = format!("Failed to create new replica set {name:?}: {source}");
                    let condition =
                        new_condition(PROGRESSING, "False", FAILED_RS_CREATE, message, self.now);
                    conditions::set(self.status_mut(), condition);
                    let status = self.status_mut().clone();
                    self.write_status(status).await?;
                }
                Err(Error::Create { name, source })
            }
        }
    }

    /// The name of the new ReplicaSet is taken: it is ours if it runs our template under our
    /// controller reference (the cache had not shown it yet); otherwise it is a hash collision.
    async fn already_exists(&mut self, name: &str, revision: i64) -> Result<Option<usize>, Error> {
        let existing = self
            .replica_sets
            .get(name)
            .await
            .map_err(|source| Error::Create {
                name: name.to_owned(),
                source,
            })?;
        let ours = existing
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == self.d.metadata.uid.as_ref());
        let same_template = match (
            existing.spec.as_ref().and_then(|s| s.template.as_ref()),
            spec::template(&self.d),
        ) {
            (Some(a), Some(b)) => equal_ignore_hash(a, b),
            _ => false,
        };
        if ours && same_template {
            set_deployment_revision(&mut self.d, &revision.to_string());
            self.rss
                .retain(|rs| rs.metadata.uid != existing.metadata.uid);
            self.rss.push(existing);
            return Ok(Some(self.rss.len() - 1));
        }
        let status = self.status_mut();
        status.collision_count = Some(status.collision_count.unwrap_or(0).saturating_add(1));
        let status = status.clone();
        self.write_status(status).await?;
        Err(Error::Collision(name.to_owned()))
    }

    /// Sizes the ReplicaSet at `i` to `replicas` if that changes its size (upstream
    /// `scaleReplicaSetAndRecordEvent`); whether it did.
    pub(super) async fn scale_if_needed(&mut self, i: usize, replicas: i32) -> Result<bool, Error> {
        if size(&self.rss[i]) == replicas {
            return Ok(false);
        }
        self.scale(i, replicas).await
    }

    /// Sizes the ReplicaSet at `i` to `replicas` and records the Deployment's size on it (upstream
    /// `scaleReplicaSet`); whether its size changed.
    pub(super) async fn scale(&mut self, i: usize, replicas: i32) -> Result<bool, Error> {
        let desired = spec::replicas(&self.d);
        let max = desired + spec::max_surge(&self.d);
        let rs = &self.rss[i];
        let old = size(rs);
        if old == replicas && !replicas_annotations_need_update(rs, desired, max) {
            return Ok(false);
        }
        let mut copy = rs.clone();
        set_replicas_annotations(&mut copy, desired, max);
        set_size(&mut copy, replicas);
        let name = copy.name_any();
        // A merge patch of the fields this controller owns: the ReplicaSet controller's status writes
        // in between must not turn the scale into a conflict.
        let patch = json!({
            "metadata": {"annotations": copy.annotations()},
            "spec": {"replicas": replicas},
        });
        self.rss[i] = self
            .replica_sets
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::Scale {
                name: name.clone(),
                source,
            })?;
        if old != replicas {
            let direction = if replicas > old { "up" } else { "down" };
            let note = format!("Scaled {direction} replica set {name} from {old} to {replicas}");
            self.publish(EventType::Normal, "ScalingReplicaSet", note);
        }
        Ok(old != replicas)
    }

    /// Deletes an old ReplicaSet (revision history cleanup), if it is still the one the cache showed.
    pub(super) async fn delete(&self, rs: &ReplicaSet) -> Result<(), Error> {
        let name = rs.name_any();
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: rs.uid(),
                resource_version: rs.resource_version(),
            }),
            ..DeleteParams::default()
        };
        match self.replica_sets.delete(&name, &params).await {
            Ok(_) => Ok(()),
            // Gone, or changed since (it may have pods again): the next sync decides afresh.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(source) => Err(Error::Delete { name, source }),
        }
    }

    /// Writes `status` (and the revision annotation) if either differs from what the cache held.
    ///
    /// The revision annotation goes with the status through the status subresource, as upstream does,
    /// so it does not bump the generation; a server that ignores metadata there gets it through the
    /// main resource instead.
    pub(super) async fn write_status(&mut self, status: DeploymentStatus) -> Result<(), Error> {
        let revision = |d: &Deployment| d.annotations().get(REVISION).cloned();
        let original_status = self.original.status.clone().unwrap_or_default();
        let revision_changed = revision(&self.original) != revision(&self.d);
        self.d.status = Some(status.clone());
        if status::same(&original_status, &status) && !revision_changed {
            return Ok(());
        }
        let name = self.d.name_any();
        let written = self
            .deployments
            .replace_status(&name, &PostParams::default(), &self.d)
            .await
            .map_err(Error::Status)?;
        if revision_changed && revision(&written) != revision(&self.d) {
            let patch = json!({"metadata": {"annotations": {REVISION: revision(&self.d)}}});
            self.deployments
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::Status)?;
        }
        // A second write in this sync (rare) must carry the new resourceVersion.
        self.d.metadata.resource_version = written.metadata.resource_version.clone();
        self.original = Arc::new(Deployment {
            status: Some(status),
            ..self.d.clone()
        });
        Ok(())
    }

    /// Records an event on the Deployment (see [`events::publish`]).
    pub(super) fn publish(&self, type_: EventType, reason: &str, note: String) {
        events::publish(&self.ctx, &self.d, type_, reason, note);
    }
}
