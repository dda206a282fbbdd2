//! The ways a sync moves a Deployment (upstream `syncDeployment`'s branches): scaling only (paused, or
//! `spec.replicas` changed mid-rollout), a rolling update, a recreate, or the status alone (being
//! deleted); each ends with the status write.

use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::apps::v1::ReplicaSet;
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;

use super::cleanup::to_delete;
use super::conditions::{self, PAUSED, PROGRESSING, RESUMED, TIMED_OUT, new_condition};
use super::progress::{self, complete};
use super::replica_sets::{DESIRED_REPLICAS, actual, int_annotation, is_active, size};
use super::rolling::{reconcile_new, reconcile_old};
use super::scale::plan;
use super::status::calculate;
use super::sync::Sync;
use super::{Error, spec};
use flotilla_sdk::k8s_openapi;
use flotilla_sdk::{Action, CacheQuery};

/// How soon a Recreate rollout waiting for old pods to go looks again. The last old pod's removal
/// changes nothing the Deployment watches (its ReplicaSet's status already stopped counting it when it
/// began terminating), so this wait polls.
const OLD_PODS_POLL: Duration = Duration::from_secs(1);

impl Sync {
    /// Sets `Progressing` to `DeploymentPaused` / `DeploymentResumed` when the pause flag changed,
    /// unless the rollout already timed out (upstream `checkPausedConditions`).
    pub(super) fn check_paused_conditions(&mut self) {
        if spec::progress_deadline(&self.d).is_none() {
            return;
        }
        let current = conditions::get(self.status_mut(), PROGRESSING);
        let reason = current.and_then(|c| c.reason.clone());
        if reason.as_deref() == Some(TIMED_OUT) {
            return;
        }
        let paused_recorded = reason.as_deref() == Some(PAUSED);
        let paused = spec::paused(&self.d);
        let condition = if paused && !paused_recorded {
            new_condition(
                PROGRESSING,
                "Unknown",
                PAUSED,
                "Deployment is paused".into(),
                self.now,
            )
        } else if !paused && paused_recorded {
            new_condition(
                PROGRESSING,
                "Unknown",
                RESUMED,
                "Deployment is resumed".into(),
                self.now,
            )
        } else {
            return;
        };
        conditions::set(self.status_mut(), condition);
    }

    /// Whether `spec.replicas` differs from what an active ReplicaSet was last sized for (upstream
    /// `isScalingEvent`).
    pub(super) async fn is_scaling_event(&mut self) -> Result<bool, Error> {
        self.new_replica_set(false).await?;
        let desired = spec::replicas(&self.d);
        Ok(self.rss.iter().filter(|rs| is_active(rs)).any(|rs| {
            int_annotation(rs, DESIRED_REPLICAS).is_some_and(|annotated| annotated != desired)
        }))
    }

    /// Scales the ReplicaSets to `spec.replicas` without moving the rollout; a paused Deployment also
    /// cleans up its history (upstream `sync`).
    pub(super) async fn scale_only(&mut self) -> Result<Action, Error> {
        let new = self.new_replica_set(false).await?;
        let (_, olds) = self.split();
        let resizes = {
            let new_rs = new.map(|i| &self.rss[i]);
            plan(&self.d, new_rs, &self.at(&olds))
        };
        for resize in resizes {
            let Some(i) = self.index_of(&resize.name) else {
                continue;
            };
            if resize.always {
                self.scale(i, resize.replicas).await?;
            } else {
                self.scale_if_needed(i, resize.replicas).await?;
            }
        }
        if spec::paused(&self.d) {
            self.cleanup(&olds).await?;
        }
        let status = self.calculated(new);
        self.write_status(status).await?;
        Ok(Action::await_change())
    }

    /// A rolling update step (upstream `rolloutRolling`): grow the new ReplicaSet within the surge, or
    /// else shrink old ones within the unavailability; a complete rollout cleans up its history.
    pub(super) async fn rolling(&mut self) -> Result<Action, Error> {
        let Some(new) = self.new_replica_set(true).await? else {
            return self.rollout_status(None).await;
        };
        let (_, olds) = self.split();
        let grow = {
            let all: Vec<&ReplicaSet> = self.rss.iter().collect();
            reconcile_new(&self.d, &all, &self.rss[new])
        };
        if let Some(replicas) = grow {
            self.scale_if_needed(new, replicas).await?;
            return self.rollout_status(Some(new)).await;
        }
        let shrink = {
            let all: Vec<&ReplicaSet> = self.rss.iter().collect();
            let active: Vec<&ReplicaSet> = self
                .at(&olds)
                .into_iter()
                .filter(|rs| is_active(rs))
                .collect();
            reconcile_old(&self.d, &all, &self.rss[new], &active)
        };
        if !shrink.is_empty() {
            for (name, replicas) in shrink {
                if let Some(i) = self.index_of(&name) {
                    self.scale_if_needed(i, replicas).await?;
                }
            }
            return self.rollout_status(Some(new)).await;
        }
        if self.stored_rollout_complete() {
            self.cleanup(&olds).await?;
        }
        self.rollout_status(Some(new)).await
    }

    /// A recreate step (upstream `rolloutRecreate`): scale every old ReplicaSet to 0, wait until none of
    /// their pods runs, then create the new ReplicaSet at full size.
    pub(super) async fn recreate(&mut self) -> Result<Action, Error> {
        let new = self.new_replica_set(false).await?;
        let (_, olds) = self.split();
        let mut scaled_down = false;
        for &i in &olds {
            if size(&self.rss[i]) > 0 {
                self.scale_if_needed(i, 0).await?;
                scaled_down = true;
            }
        }
        if scaled_down {
            return self.rollout_status(new).await;
        }
        if self.old_pods_running(&olds).await? {
            let action = self.rollout_status(new).await?;
            let poll = match action.requeue_after() {
                Some(after) => after.min(OLD_PODS_POLL),
                None => OLD_PODS_POLL,
            };
            return Ok(Action::requeue(poll));
        }
        let new = match new {
            Some(i) => i,
            None => match self.new_replica_set(true).await? {
                Some(i) => i,
                None => return self.rollout_status(None).await,
            },
        };
        self.scale_if_needed(new, spec::replicas(&self.d)).await?;
        if self.stored_rollout_complete() {
            let (_, olds) = self.split();
            self.cleanup(&olds).await?;
        }
        self.rollout_status(Some(new)).await
    }

    /// Only the status (upstream `syncStatusOnly`, for a Deployment being deleted).
    pub(super) async fn status_only(&mut self) -> Result<Action, Error> {
        let new = self.new_replica_set(false).await?;
        let status = self.calculated(new);
        self.write_status(status).await?;
        Ok(Action::await_change())
    }

    /// Whether any pod of the old ReplicaSets may still run: one they count, or one in the cache that
    /// has not finished (a terminating pod still runs).
    async fn old_pods_running(&self, olds: &[usize]) -> Result<bool, Error> {
        if olds.iter().any(|&i| actual(&self.rss[i]) > 0) {
            return Ok(true);
        }
        let namespace = self.d.metadata.namespace.clone().unwrap_or_default();
        for &i in olds {
            let Some(uid) = self.rss[i].metadata.uid.as_deref() else {
                continue;
            };
            let query = CacheQuery::all().namespace(&namespace).owned_by(uid);
            let pods: Vec<Pod> = self.ctx.cache().list(&query).await.map_err(Error::Pods)?;
            let running = pods.iter().any(|pod| {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Failed" | "Succeeded"))
            });
            if running {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Deletes the old ReplicaSets beyond the revision history limit.
    async fn cleanup(&self, olds: &[usize]) -> Result<(), Error> {
        let doomed: Vec<ReplicaSet> =
            to_delete(&self.at(olds), spec::revision_history_limit(&self.d))
                .into_iter()
                .cloned()
                .collect();
        for rs in &doomed {
            self.delete(rs).await?;
        }
        Ok(())
    }

    /// Whether the status as stored (and changed by this sync) says the rollout is complete.
    fn stored_rollout_complete(&self) -> bool {
        complete(&self.d, &self.d.status.clone().unwrap_or_default())
    }

    /// The counts and `Available` condition for the ReplicaSets as they are now.
    fn calculated(&self, new: Option<usize>) -> k8s_openapi::api::apps::v1::DeploymentStatus {
        let all: Vec<&ReplicaSet> = self.rss.iter().collect();
        calculate(&self.d, &all, new.map(|i| &self.rss[i]), self.now)
    }

    /// Writes the rollout's status (upstream `syncRolloutStatus`) and asks to be looked at again when
    /// the progress deadline passes.
    async fn rollout_status(&mut self, new: Option<usize>) -> Result<Action, Error> {
        let status = {
            let all: Vec<&ReplicaSet> = self.rss.iter().collect();
            let new_rs = new.map(|i| &self.rss[i]);
            let counted = calculate(&self.d, &all, new_rs, self.now);
            progress::rollout_status(&self.d, counted, new_rs, &all, self.now)
        };
        let requeue = progress::requeue_after(&self.d, &status, self.now);
        self.write_status(status).await?;
        Ok(requeue.map_or_else(Action::await_change, Action::requeue))
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.rss
            .iter()
            .position(|rs| rs.metadata.name.as_deref() == Some(name))
    }
}
