//! One sync of a Job (upstream `syncJob`): claim its pods, decide whether it is done, create or
//! delete pods toward its parallelism (after the failure backoff), and account for finished pods
//! through the tracking finalizer ([`super::tracking`]). No expectations: the fleet holds the key
//! until its cache has seen this sync's writes; where that cannot hold — the item was taken from a
//! worker that died, or a new leader's first pass — the pods are read live instead of from the cache,
//! so a pod whose finalizer the dead worker removed is never recorded again.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use flotilla_sdk::apimachinery::LabelSelector;
use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use flotilla_sdk::kube::{self, Resource, ResourceExt};
use flotilla_sdk::{Action, CacheQuery, Context, ContextError, EventType, Reason, Request};
use serde_json::json;

use super::super::claim::{candidates, claim};
use super::super::controller_ref::{ClaimError, recheck_owner, release};
use super::super::events::publish;
use super::adoption::{AdoptionError, adopt};
use super::backoff::Failures;
use super::conditions::{ensure, is_true, new_condition};
use super::manage::{MAX_POD_CHANGES_PER_SYNC, removal, want_active};
use super::names::{MANAGED_BY_US, SUSPENDED, TRACKING_FINALIZER};
use super::per_index::{last_failures, next_counts, remaining};
use super::pods::{completion_index, has_finalizer, is_active, is_ready, is_terminating, uid};
use super::spec::JobSpec;
use super::status::Status;
use super::template::new_pod;
use super::tracking::{Tally, tracked};
use super::verdict::{
    Verdict, completion, failure, index_failure, is_finished, policy_failure, policy_success,
    standing,
};

/// Errors of one sync; each retries the key.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Job from the cache lacks a uid or namespace, so no owner reference can point at it.
    #[error("{0} lacks a uid or namespace")]
    Incomplete(String),
    /// The owned pods shipped with the item are unreadable.
    #[error("cannot read prefetched pods")]
    Prefetched(#[source] ContextError),
    /// The live read of the Job's pods failed.
    #[error("cannot list the job's pods")]
    ListPods(#[source] kube::Error),
    /// Releasing a pod, or the live read of the Job before an adoption, failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// Adopting a pod failed.
    #[error(transparent)]
    Adopt(#[from] AdoptionError),
    /// Creating a pod failed.
    #[error("cannot create a pod")]
    Create(#[source] kube::Error),
    /// Deleting a pod failed.
    #[error("cannot delete pod {name}")]
    Delete {
        /// The pod.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Removing the tracking finalizer from a pod failed.
    #[error("cannot remove the tracking finalizer of pod {name}")]
    Finalizer {
        /// The pod.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Writing the status failed (a conflict: the Job changed since it was read).
    #[error("cannot update the status")]
    Status(#[source] kube::Error),
}

/// Syncs one Job.
///
/// # Errors
/// [`Error`] when reading, claiming, managing pods, removing finalizers or writing the status fails.
pub async fn reconcile(request: Request<Job>, ctx: Context) -> Result<Action, Error> {
    let Some(job) = request.object() else {
        release_leftovers(&ctx, &request).await?;
        return Ok(Action::await_change());
    };
    let job = job.as_ref();
    let managed_by = job.spec.as_ref().and_then(|s| s.managed_by.as_deref());
    if managed_by.is_some_and(|m| m != MANAGED_BY_US) {
        // Another controller (e.g. a multi-cluster dispatcher) owns this Job's pods and status.
        return Ok(Action::await_change());
    }
    let incomplete = || Error::Incomplete(request.key().to_owned());
    let namespace = job.namespace().ok_or_else(incomplete)?;
    let job_uid = job.uid().ok_or_else(incomplete)?;
    let pods_api: Api<Pod> = Api::namespaced(ctx.client(), &namespace);
    let spec = JobSpec::of(job);
    let selector = job
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .map(LabelSelector::from_label_selector)
        .transpose();
    let selector = match selector {
        Ok(selector) => selector.unwrap_or_else(LabelSelector::nothing),
        Err(err) => {
            // Retrying cannot fix the spec; the next edit of the Job re-triggers it.
            tracing::warn!(error = %err, key = request.key(), "invalid selector");
            return Ok(Action::await_change());
        }
    };

    let owned = if fresh_read_needed(request.reason()) {
        tracing::debug!(
            key = request.key(),
            reason = request.reason().name(),
            "reading the job's pods live: the cache may not have seen the last sync's writes"
        );
        let list = ListParams::default().labels(&selector.to_string());
        let listed = pods_api.list(&list).await.map_err(Error::ListPods)?;
        listed
            .items
            .into_iter()
            .filter(|p| controlled_by(p, &job_uid))
            .collect()
    } else {
        ctx.prefetched::<Pod>().map_err(Error::Prefetched)?
    };

    if job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .is_some_and(is_finished)
    {
        // Done: only finalizers left behind (a pod that finished after the verdict) go.
        let leftovers: Vec<&Pod> = owned.iter().filter(|p| has_finalizer(p)).collect();
        strip_finalizers(&pods_api, &leftovers)
            .await
            .1
            .map_or(Ok(()), Err)?;
        return Ok(Action::await_change());
    }
    if spec.mode.is_none() {
        let note = "Skipped Job sync because completion mode is unknown".to_owned();
        publish(&ctx, job, EventType::Warning, "UnknownCompletionMode", note);
        return Ok(Action::await_change());
    }

    let deleting = job.meta().deletion_timestamp.is_some();
    let matching: Vec<Pod> = candidates(&ctx, &namespace, &selector, deleting).await;
    let claims = claim(owned, matching, &selector, deleting);
    for pod in &claims.release {
        release(&pods_api, pod, &job_uid).await?;
    }
    // A released pod is no longer this Job's to count: its finalizer would only block its deletion
    // (upstream's orphan-pod cleanup removes it too).
    let released: Vec<&Pod> = claims.release.iter().filter(|p| has_finalizer(p)).collect();
    if let Some(err) = strip_finalizers(&pods_api, &released).await.1 {
        return Err(err);
    }
    let mut pods = claims.keep;
    if !claims.adopt.is_empty() {
        let jobs: Api<Job> = Api::namespaced(ctx.client(), &namespace);
        recheck_owner(&jobs, job).await?;
    }
    for pod in claims.adopt {
        pods.extend(adopt(&pods_api, pod, job).await?);
    }

    let sync = JobSync {
        ctx: &ctx,
        pods_api: &pods_api,
        job,
        spec: &spec,
        pods: &pods,
        now: Timestamp::now(),
    };
    sync.run().await
}

/// Whether this item may run on a cache that has not seen the previous sync's writes: taken back from
/// a lost worker (its writes were never reported), a new leader's first pass, or a peer that does not
/// say.
fn fresh_read_needed(reason: &Reason) -> bool {
    matches!(
        reason,
        Reason::Handover | Reason::InitialList | Reason::Unknown
    )
}

fn controlled_by(pod: &Pod, owner_uid: &str) -> bool {
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid)
}

/// One sync's inputs.
struct JobSync<'a> {
    ctx: &'a Context,
    pods_api: &'a Api<Pod>,
    job: &'a Job,
    spec: &'a JobSpec,
    pods: &'a [Pod],
    now: Timestamp,
}

/// A pod to create: its completion index (Indexed) and the failure counts of its index
/// (`backoffLimitPerIndex`).
type NewPod = (Option<i32>, Option<(i32, i32)>);

/// What managing the pods did.
#[derive(Default)]
struct Managed {
    /// Pods created (positive) or deleted (negative) from the active count.
    created: i32,
    /// Pods deleted.
    deleted: i32,
    /// Ready pods deleted.
    deleted_ready: i32,
    /// The indexes of the pods created.
    created_indexes: Vec<i32>,
    /// When to look again (failure backoff).
    requeue: Option<Duration>,
    /// The first failure.
    error: Option<Error>,
}

impl JobSync<'_> {
    async fn run(self) -> Result<Action, Error> {
        let (spec, now) = (self.spec, self.now);
        let before = Status::of(self.job, spec);
        let mut status = before.clone();
        let active_pods: Vec<&Pod> = self.pods.iter().filter(|p| is_active(p)).collect();
        let mut active = count(active_pods.len());
        let mut ready = count(active_pods.iter().filter(|p| is_ready(p)).count());
        let mut terminating = count(self.pods.iter().filter(|p| is_terminating(p)).count());

        // What the counts will be once every finished pod is accounted for.
        let mut seen = status.tally.clone();
        seen.record(self.pods, spec, false, &HashSet::new());
        let succeeded = seen.succeeded + count(seen.uncounted_succeeded.len());
        let failed = seen.failed + count(seen.uncounted_failed.len());

        if status.start_time.is_none() && !spec.suspend {
            status.start_time = Some(Time(now));
        }
        let mut requeue = None;
        let mut verdict = standing(&status.conditions).or_else(|| policy_failure(spec, self.pods));
        if verdict.is_none() {
            let (found, deadline) =
                failure(spec, failed, self.pods, status.start_time.as_ref(), now);
            verdict = found;
            requeue = deadline;
        }
        if verdict.is_none()
            && let Some(failed_indexes) = &seen.failed_indexes
        {
            verdict = index_failure(spec, failed_indexes, seen.succeeded);
        }
        if verdict.is_none()
            && let Some(completed) = &seen.completed
        {
            verdict = policy_success(spec, completed);
        }
        let mut error = None;
        let mut created_indexes = Vec::new();
        if verdict.is_some() {
            let managed = self.delete(&active_pods).await;
            if managed.deleted != active {
                // Not every active pod is gone: the verdict waits for a sync that deletes them all.
                verdict = None;
            }
            active -= managed.deleted;
            terminating += managed.deleted;
            ready -= managed.deleted_ready;
            error = managed.error;
        } else {
            let manage_called = self.job.meta().deletion_timestamp.is_none();
            if manage_called {
                let managed = self
                    .manage(&active_pods, &seen, succeeded, terminating)
                    .await;
                created_indexes = managed.created_indexes;
                active += managed.created - managed.deleted;
                terminating += managed.deleted;
                ready -= managed.deleted_ready;
                requeue = earliest(requeue, managed.requeue);
                error = managed.error;
            }
            verdict = completion(spec, succeeded, active);
            if verdict.is_none() && manage_called {
                self.suspension(&mut status);
            }
        }
        status.active = active;
        status.ready = Some(ready.max(0));
        status.terminating = Some(terminating);
        status.has_uncounted = true;

        // An index's last failure keeps its finalizer until its replacement exists.
        let held: HashSet<&str> = if spec.backoff_limit_per_index.is_some()
            && verdict.is_none()
            && self.job.meta().deletion_timestamp.is_none()
        {
            let busy: BTreeSet<i32> = active_pods
                .iter()
                .filter_map(|p| completion_index(p))
                .chain(created_indexes)
                .collect();
            let done = seen.completed.clone().unwrap_or_default();
            let failed = seen.failed_indexes.clone().unwrap_or_default();
            last_failures(spec, self.pods, &busy, &done, &failed)
                .values()
                .map(|p| uid(p))
                .collect()
        } else {
            HashSet::new()
        };

        // Step 1: record the finished pods (and the interim verdict) before any finalizer goes.
        status.tally.settle(&tracked(self.pods, &HashSet::new()));
        let (strip, full) = status
            .tally
            .record(self.pods, spec, verdict.is_some(), &held);
        if let Some(v) = &verdict
            && !is_true(&status.conditions, v.interim())
        {
            let interim = new_condition(v.interim(), "True", &v.reason, &v.message, now);
            status.conditions.push(interim);
        }
        let jobs: Api<Job> =
            Api::namespaced(self.ctx.client(), &self.job.namespace().unwrap_or_default());
        let mut resource_version = self.job.resource_version().unwrap_or_default();
        if status != before {
            resource_version = write(&jobs, self.job, &status, &resource_version).await?;
        }

        // Step 2: the recorded pods lose their finalizer.
        let (stripped, strip_error) = strip_finalizers(self.pods_api, &strip).await;

        // Step 3: what lost its finalizer is counted; the verdict becomes terminal once nothing is
        // left to count.
        let recorded = status.clone();
        status.tally.settle(&tracked(self.pods, &stripped));
        let finished = match &verdict {
            Some(v) if !full && status.tally.uncounted() == 0 && terminating == 0 => {
                ensure(
                    &mut status.conditions,
                    v.terminal(),
                    "True",
                    &v.reason,
                    &v.message,
                    now,
                );
                if v.success {
                    status.completion_time = Some(Time(now));
                }
                Some(v)
            }
            _ => None,
        };
        if status != recorded {
            write(&jobs, self.job, &status, &resource_version).await?;
        }
        if let Some(v) = finished {
            self.announce(v, status.tally.succeeded);
        }
        if let Some(err) = strip_error.or(error) {
            return Err(err);
        }
        Ok(requeue.map_or_else(Action::await_change, Action::requeue))
    }

    /// Upstream `manageJob`: delete every active pod of a suspended Job; else delete the surplus or
    /// create the missing pods (after the failure backoff).
    async fn manage(
        &self,
        active_pods: &[&Pod],
        seen: &Tally,
        succeeded: i32,
        terminating: i32,
    ) -> Managed {
        let spec = self.spec;
        let active = count(active_pods.len());
        if spec.suspend {
            return self.delete(active_pods).await;
        }
        let want = want_active(spec, succeeded, active);
        let surplus = usize::try_from(active - want).unwrap_or(0);
        let doomed = removal(spec, active_pods, surplus);
        if !doomed.is_empty() {
            // Deleting and creating in one sync is left to the next one, as upstream.
            return self.delete(&doomed).await;
        }
        let blocked = if spec.only_replace_failed_pods {
            terminating
        } else {
            0
        };
        let missing = usize::try_from(want - blocked - active).unwrap_or(0);
        if missing == 0 {
            return Managed::default();
        }
        let missing = missing.min(MAX_POD_CHANGES_PER_SYNC);
        if !spec.indexed() {
            let wait = Failures::of(self.pods, spec.only_replace_failed_pods).remaining(self.now);
            if !wait.is_zero() {
                return Managed {
                    requeue: Some(wait),
                    ..Managed::default()
                };
            }
            return self.create(&vec![(None, None); missing]).await;
        }
        let busy: BTreeSet<i32> = active_pods
            .iter()
            .filter_map(|p| completion_index(p))
            .collect();
        let done = seen.completed.clone().unwrap_or_default();
        let failed = seen.failed_indexes.clone().unwrap_or_default();
        let mut taken = busy.clone();
        taken.extend((0..spec.index_bound()).filter(|i| failed.contains(*i)));
        let pending = done.first_pending(&taken, missing, spec.index_bound());
        if spec.backoff_limit_per_index.is_none() {
            let wait = Failures::of(self.pods, spec.only_replace_failed_pods).remaining(self.now);
            if !wait.is_zero() {
                return Managed {
                    requeue: Some(wait),
                    ..Managed::default()
                };
            }
            let indexes: Vec<_> = pending.into_iter().map(|ix| (Some(ix), None)).collect();
            return self.create(&indexes).await;
        }
        // Each index waits out its own backoff; the rest go now.
        let last = last_failures(spec, self.pods, &busy, &done, &failed);
        let mut ready_now = Vec::new();
        let mut wait: Option<Duration> = None;
        for ix in pending {
            let replaced = last.get(&ix).copied();
            let left = remaining(replaced, self.now);
            if left.is_zero() {
                ready_now.push((Some(ix), Some(next_counts(spec, replaced))));
            } else {
                wait = earliest(wait, Some(left));
            }
        }
        if ready_now.is_empty() {
            return Managed {
                requeue: wait,
                ..Managed::default()
            };
        }
        self.create(&ready_now).await
    }

    /// Creates one pod per entry of `indexes` in slow-start batches (1, 2, 4, …), stopping after a
    /// batch with a failure so that a template the API rejects costs one call, not hundreds.
    async fn create(&self, indexes: &[NewPod]) -> Managed {
        let mut managed = Managed::default();
        let mut rest = indexes;
        let mut batch = 1;
        while !rest.is_empty() {
            let (now, later) = rest.split_at(batch.min(rest.len()));
            rest = later;
            batch *= 2;
            let results = futures::future::join_all(
                now.iter()
                    .map(|(ix, counts)| async move { (*ix, self.create_one(*ix, *counts).await) }),
            )
            .await;
            for (ix, result) in results {
                match result {
                    Ok(()) => {
                        managed.created += 1;
                        managed.created_indexes.extend(ix);
                    }
                    Err(err) => {
                        managed.error.get_or_insert(err);
                    }
                }
            }
            if managed.error.is_some() {
                break;
            }
        }
        managed
    }

    async fn create_one(
        &self,
        index: Option<i32>,
        counts: Option<(i32, i32)>,
    ) -> Result<(), Error> {
        let Some(pod) = new_pod(self.job, index, counts) else {
            return Ok(());
        };
        match self.pods_api.create(&PostParams::default(), &pod).await {
            Ok(created) => {
                let note = format!("Created pod: {}", created.name_any());
                publish(
                    self.ctx,
                    self.job,
                    EventType::Normal,
                    "SuccessfulCreate",
                    note,
                );
                Ok(())
            }
            Err(err) => {
                let note = format!("Error creating: {err}");
                publish(self.ctx, self.job, EventType::Warning, "FailedCreate", note);
                Err(Error::Create(err))
            }
        }
    }

    /// Deletes `doomed`, each after removing its finalizer (a pod the controller deletes is not a
    /// failure to count).
    async fn delete(&self, doomed: &[&Pod]) -> Managed {
        let results = futures::future::join_all(doomed.iter().map(|pod| async move {
            let name = pod.name_any();
            if has_finalizer(pod)
                && let Err(source) = remove_finalizer(self.pods_api, &name).await
            {
                return Err(Error::Finalizer { name, source });
            }
            let deleted = match self.pods_api.delete(&name, &DeleteParams::default()).await {
                // Already gone: the goal holds.
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(err) => Err(err),
                Ok(_) => Ok(()),
            };
            match deleted {
                Ok(()) => {
                    let note = format!("Deleted pod: {name}");
                    publish(
                        self.ctx,
                        self.job,
                        EventType::Normal,
                        "SuccessfulDelete",
                        note,
                    );
                    Ok(is_ready(pod))
                }
                Err(source) => {
                    let note = format!("Error deleting: {source}");
                    publish(self.ctx, self.job, EventType::Warning, "FailedDelete", note);
                    Err(Error::Delete { name, source })
                }
            }
        }))
        .await;
        let mut managed = Managed::default();
        for result in results {
            match result {
                Ok(was_ready) => {
                    managed.deleted += 1;
                    managed.deleted_ready += i32::from(was_ready);
                }
                Err(err) => {
                    managed.error.get_or_insert(err);
                }
            }
        }
        managed
    }

    /// The `Suspended` condition follows `spec.suspend`; resuming restarts `startTime`, so
    /// `activeDeadlineSeconds` counts only the time the Job runs.
    fn suspension(&self, status: &mut Status) {
        let now = self.now;
        if self.spec.suspend {
            if ensure(
                &mut status.conditions,
                SUSPENDED,
                "True",
                "JobSuspended",
                "Job suspended",
                now,
            ) {
                let note = "Job suspended".to_owned();
                publish(self.ctx, self.job, EventType::Normal, "Suspended", note);
            }
        } else if ensure(
            &mut status.conditions,
            SUSPENDED,
            "False",
            "JobResumed",
            "Job resumed",
            now,
        ) {
            status.start_time = Some(Time(now));
            publish(
                self.ctx,
                self.job,
                EventType::Normal,
                "Resumed",
                "Job resumed".to_owned(),
            );
        }
    }

    /// The Events of a finished Job (upstream `recordJobFinished`).
    fn announce(&self, verdict: &Verdict, succeeded: i32) {
        if verdict.success {
            if self.spec.completions.is_some_and(|c| succeeded > c) {
                let note =
                    "Too many succeeded pods running after completion count reached".to_owned();
                publish(
                    self.ctx,
                    self.job,
                    EventType::Warning,
                    "TooManySucceededPods",
                    note,
                );
            }
            publish(
                self.ctx,
                self.job,
                EventType::Normal,
                "Completed",
                "Job completed".to_owned(),
            );
        } else {
            publish(
                self.ctx,
                self.job,
                EventType::Warning,
                &verdict.reason,
                verdict.message.clone(),
            );
        }
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Writes `status` over `job` as it was at `resource_version`; the new resourceVersion.
async fn write(
    jobs: &Api<Job>,
    job: &Job,
    status: &Status,
    resource_version: &str,
) -> Result<String, Error> {
    let written = jobs
        .patch_status(
            &job.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status.patch(resource_version)),
        )
        .await
        .map_err(Error::Status)?;
    Ok(written.resource_version().unwrap_or_default())
}

/// Removes the tracking finalizer from `pods`, concurrently; the uids it was removed from (or that
/// are gone) and the first failure.
async fn strip_finalizers(api: &Api<Pod>, pods: &[&Pod]) -> (HashSet<String>, Option<Error>) {
    let results = futures::future::join_all(pods.iter().map(|pod| async move {
        let name = pod.name_any();
        match remove_finalizer(api, &name).await {
            Ok(()) => Ok(uid(pod).to_owned()),
            Err(source) => Err(Error::Finalizer { name, source }),
        }
    }))
    .await;
    let mut stripped = HashSet::new();
    let mut error = None;
    for result in results {
        match result {
            Ok(uid) => {
                stripped.insert(uid);
            }
            Err(err) => {
                error.get_or_insert(err);
            }
        }
    }
    (stripped, error)
}

/// Removes the tracking finalizer from the pod `name` (a strategic merge patch that deletes only
/// this finalizer, as upstream's, so it needs no resourceVersion); a pod already gone is fine.
async fn remove_finalizer(api: &Api<Pod>, name: &str) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err),
    }
}

/// The Job is gone: its pods (found by the `batch.kubernetes.io/job-name` label in the cache) that
/// still carry the finalizer and are controlled by no one else lose it, or they could never be
/// deleted (upstream's orphan-pod cleanup).
async fn release_leftovers(ctx: &Context, request: &Request<Job>) -> Result<(), Error> {
    let Some(namespace) = request.namespace() else {
        return Ok(());
    };
    let name = request.name();
    let query = CacheQuery::all()
        .namespace(namespace)
        .labels(&format!("batch.kubernetes.io/job-name={name}"));
    let pods: Vec<Pod> = ctx.cache().list(&query).await.unwrap_or_else(|err| {
        tracing::warn!(error = %err, key = request.key(), "cannot list the pods of a deleted job");
        Vec::new()
    });
    let leftovers: Vec<&Pod> = pods
        .iter()
        .filter(|p| has_finalizer(p))
        .filter(|p| {
            let controller = p
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true));
            controller.is_none_or(|o| o.kind == "Job" && o.name == name)
        })
        .collect();
    if leftovers.is_empty() {
        return Ok(());
    }
    let api: Api<Pod> = Api::namespaced(ctx.client(), namespace);
    strip_finalizers(&api, &leftovers)
        .await
        .1
        .map_or(Ok(()), Err)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use flotilla_sdk::kube::client::Body;
    use http::{Method, Request as HttpRequest, Response, StatusCode};
    use parking_lot::Mutex;
    use serde_json::{Value, json};

    use super::*;

    /// The writes the mock API received, as (method, path, body).
    type Writes = Arc<Mutex<Vec<(Method, String, Value)>>>;

    /// A mock API for Job `j` in `ns`: status patches answered with a new resourceVersion (or a
    /// conflict when `conflict`), pod patches and deletes accepted, pod creates named `j-<n>`, Events
    /// accepted; a live list of pods answers `live`.
    fn api(writes: Writes, conflict: bool, live: Vec<Pod>) -> kube::Client {
        let service = tower::service_fn(move |request: HttpRequest<Body>| {
            let writes = writes.clone();
            let live = live.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await?;
                let sent: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let path = parts.uri.path().to_owned();
                let (status, answer) = match (&parts.method, path.as_str()) {
                    (&Method::GET, "/api/v1/namespaces/ns/pods") => (
                        StatusCode::OK,
                        json!({"kind": "PodList", "apiVersion": "v1",
                            "metadata": {}, "items": live}),
                    ),
                    (&Method::PATCH, "/apis/batch/v1/namespaces/ns/jobs/j/status") if conflict => (
                        StatusCode::CONFLICT,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "the object has been modified", "reason": "Conflict", "code": 409}),
                    ),
                    (&Method::PATCH, "/apis/batch/v1/namespaces/ns/jobs/j/status") => {
                        let n = writes.lock().len();
                        (
                            StatusCode::OK,
                            json!({"apiVersion": "batch/v1", "kind": "Job",
                            "metadata": {"name": "j", "namespace": "ns", "resourceVersion": format!("{}", 100 + n)}}),
                        )
                    }
                    (&Method::POST, "/api/v1/namespaces/ns/pods") => {
                        let n = writes.lock().len();
                        let mut pod = sent.clone();
                        pod["metadata"]["name"] = json!(format!("j-{n}"));
                        pod["metadata"]["resourceVersion"] = json!("7");
                        (StatusCode::CREATED, pod)
                    }
                    (_, p) if p.starts_with("/api/v1/namespaces/ns/pods/") => (
                        StatusCode::OK,
                        json!({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": p.rsplit('/').next(), "namespace": "ns", "resourceVersion": "8"}}),
                    ),
                    _ => (StatusCode::CREATED, sent.clone()),
                };
                if parts.method != Method::GET && !path.contains("/events") {
                    writes.lock().push((parts.method.clone(), path, sent));
                }
                let mut response = Response::new(Body::from(serde_json::to_vec(&answer)?));
                *response.status_mut() = status;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        kube::Client::new(service, "ns")
    }

    fn job(status: Value) -> Job {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid", "resourceVersion": "41"},
            "spec": {
                "parallelism": 2, "completions": 3, "backoffLimit": 6,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "job-uid"}},
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}},
            },
            "status": status,
        }))
        .unwrap()
    }

    fn pod(name: &str, uid: &str, phase: &str, tracked: bool) -> Pod {
        let finalizers = if tracked {
            json!([TRACKING_FINALIZER])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "finalizers": finalizers,
                "labels": {"batch.kubernetes.io/controller-uid": "job-uid"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                    "uid": "job-uid", "controller": true}]},
            "spec": {"nodeName": "n", "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn running_status() -> Value {
        json!({"startTime": "2026-01-01T00:00:00Z", "active": 2, "ready": 0, "terminating": 0,
            "uncountedTerminatedPods": {}})
    }

    async fn sync(
        job: Job,
        pods: &[Pod],
        reason: Reason,
        client: kube::Client,
    ) -> Result<Action, Error> {
        let mut ctx = Context::for_test().client(client);
        for pod in pods {
            ctx = ctx.prefetched(pod);
        }
        let request = Request::new(Some("ns"), "j")
            .with_object(job)
            .with_reason(reason);
        reconcile(request, ctx.build()).await
    }

    fn summary(writes: &Writes) -> Vec<String> {
        writes
            .lock()
            .iter()
            .map(|(method, path, body)| {
                if path.ends_with("/status") {
                    let s = &body["status"];
                    format!(
                        "status rv={} succeeded={} uncounted={}",
                        body["metadata"]["resourceVersion"].as_str().unwrap_or(""),
                        s["succeeded"],
                        s["uncountedTerminatedPods"]["succeeded"]
                    )
                } else if *method == Method::POST {
                    "create pod".to_owned()
                } else {
                    format!("{method} {}", path.rsplit('/').next().unwrap_or(""))
                }
            })
            .collect()
    }

    #[tokio::test]
    async fn the_pods_of_a_deleted_job_lose_their_finalizer_unless_another_controls_them() {
        let writes = Writes::default();
        let label = |mut p: Pod| {
            p.metadata
                .labels
                .get_or_insert_default()
                .insert("batch.kubernetes.io/job-name".into(), "j".into());
            p
        };
        let mut orphaned = label(pod("a", "ua", "Running", true));
        orphaned.metadata.owner_references = None;
        let mine = label(pod("b", "ub", "Succeeded", true));
        let mut theirs = label(pod("c", "uc", "Running", true));
        if let Some(owner) = theirs.metadata.owner_references.as_mut() {
            owner[0].name = "other".into();
        }
        let cache = flotilla_sdk::MemoryCache::default()
            .with(&orphaned)
            .with(&mine)
            .with(&theirs);
        let ctx = Context::for_test()
            .client(api(writes.clone(), false, vec![]))
            .cache(cache)
            .build();
        let request = Request::<Job>::new(Some("ns"), "j").with_reason(Reason::RequeueAfter);
        reconcile(request, ctx).await.unwrap();
        let mut patched = summary(&writes);
        patched.sort();
        assert_eq!(patched, ["PATCH a", "PATCH b"]);
    }

    #[tokio::test]
    async fn a_job_managed_by_another_controller_is_left_alone() {
        let writes = Writes::default();
        let mut managed = job(running_status());
        if let Some(spec) = managed.spec.as_mut() {
            spec.managed_by = Some("example.com/elsewhere".into());
        }
        let pods = [pod("a", "ua", "Succeeded", true)];
        let client = api(writes.clone(), false, vec![]);
        let action = sync(managed, &pods, Reason::RequeueAfter, client)
            .await
            .unwrap();
        assert_eq!(action, Action::await_change());
        assert!(writes.lock().is_empty());
    }

    #[tokio::test]
    async fn a_success_is_recorded_then_released_then_counted_and_replaced() {
        let writes = Writes::default();
        let pods = [
            pod("a", "ua", "Succeeded", true),
            pod("b", "ub", "Running", true),
        ];
        let action = sync(
            job(running_status()),
            &pods,
            Reason::RequeueAfter,
            api(writes.clone(), false, vec![]),
        )
        .await
        .unwrap();
        assert_eq!(action, Action::await_change());
        assert_eq!(
            summary(&writes),
            [
                "create pod",
                "status rv=41 succeeded=null uncounted=[\"ua\"]",
                "PATCH a",
                "status rv=101 succeeded=1 uncounted=null",
            ]
        );
        let writes = writes.lock();
        assert_eq!(
            writes[2].2,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}}),
            "only the tracking finalizer is removed"
        );
        assert_eq!(
            writes[1].2["status"]["active"], 2,
            "the replacement is active"
        );
    }

    #[tokio::test]
    async fn a_stale_job_conflicts_before_any_finalizer_is_removed() {
        let writes = Writes::default();
        let pods = [
            pod("a", "ua", "Succeeded", true),
            pod("b", "ub", "Running", true),
        ];
        let outcome = sync(
            job(running_status()),
            &pods,
            Reason::RequeueAfter,
            api(writes.clone(), true, vec![]),
        )
        .await;
        assert!(matches!(outcome, Err(Error::Status(_))), "{outcome:?}");
        assert!(
            !summary(&writes).iter().any(|w| w.starts_with("PATCH")),
            "no finalizer may go before the pod is recorded: {:?}",
            summary(&writes)
        );
    }

    #[tokio::test]
    async fn a_pod_recorded_by_a_dead_worker_is_released_and_counted_once() {
        // The dead worker wrote step 1 and removed the finalizer, then died: the live read shows the
        // pod without it; the prefetched (stale) pods still show it.
        let writes = Writes::default();
        let mut status = running_status();
        status["uncountedTerminatedPods"] = json!({"succeeded": ["ua"]});
        status["active"] = json!(1);
        let stale = [
            pod("a", "ua", "Succeeded", true),
            pod("b", "ub", "Running", true),
        ];
        let live = vec![
            pod("a", "ua", "Succeeded", false),
            pod("b", "ub", "Running", true),
        ];
        sync(
            job(status),
            &stale,
            Reason::Handover,
            api(writes.clone(), false, live),
        )
        .await
        .unwrap();
        let summary = summary(&writes);
        assert_eq!(summary[0], "create pod");
        assert_eq!(
            summary[1], "status rv=41 succeeded=1 uncounted=null",
            "{summary:?}"
        );
        assert_eq!(
            summary.len(),
            2,
            "nothing to release, nothing counted twice: {summary:?}"
        );
    }

    #[tokio::test]
    async fn the_last_success_writes_success_criteria_met_then_complete_with_the_completion_time() {
        let writes = Writes::default();
        let mut status = running_status();
        status["succeeded"] = json!(2);
        status["active"] = json!(1);
        let pods = [
            pod("a", "ua", "Succeeded", false),
            pod("b", "ub", "Succeeded", false),
            pod("c", "uc", "Succeeded", true),
        ];
        sync(
            job(status),
            &pods,
            Reason::RequeueAfter,
            api(writes.clone(), false, vec![]),
        )
        .await
        .unwrap();
        let writes = writes.lock();
        assert_eq!(writes.len(), 3, "{writes:#?}");
        let first = &writes[0].2["status"];
        let types = |s: &Value| -> Vec<String> {
            s["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["type"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(types(first), ["SuccessCriteriaMet"]);
        assert_eq!(first["uncountedTerminatedPods"]["succeeded"], json!(["uc"]));
        assert!(first["completionTime"].is_null());
        let last = &writes[2].2["status"];
        assert_eq!(types(last), ["SuccessCriteriaMet", "Complete"]);
        assert_eq!(last["succeeded"], 3);
        assert_eq!(
            last["completionTime"],
            last["conditions"][1]["lastTransitionTime"]
        );
        assert_eq!(last["conditions"][1]["reason"], "CompletionsReached");
    }

    #[tokio::test]
    async fn a_failed_pod_is_replaced_only_after_the_backoff_which_is_a_requeue() {
        let writes = Writes::default();
        let now = Timestamp::now();
        let mut failed = pod("a", "ua", "Failed", false);
        failed.metadata.deletion_timestamp = None;
        failed.status = Some(serde_json::from_value(json!({"phase": "Failed", "containerStatuses": [
            {"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 1, "finishedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}}}]})).unwrap());
        let mut status = running_status();
        status["failed"] = json!(1);
        status["active"] = json!(1);
        let pods = [failed, pod("b", "ub", "Running", true)];
        let action = sync(
            job(status),
            &pods,
            Reason::RequeueAfter,
            api(writes.clone(), false, vec![]),
        )
        .await
        .unwrap();
        let delay = action.requeue_after().unwrap();
        assert!(
            delay > Duration::from_secs(8) && delay <= Duration::from_secs(10),
            "{delay:?}"
        );
        assert!(!summary(&writes).contains(&"create pod".to_owned()));
    }
}
