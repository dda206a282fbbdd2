//! One sync of a CronJob (upstream `sync`, `syncCronJob`, `cleanupFinishedJobs`): trim the finished
//! Jobs beyond the history limits, bring `status.active` and `lastSuccessfulTime` in line with the
//! Jobs it controls, start the Job that is due, write the status once, and requeue for the next
//! start time (never a poll).

use std::sync::Arc;

use flotilla_sdk::EventType;
use flotilla_sdk::k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};
use flotilla_sdk::kube;
use flotilla_sdk::kube::ResourceExt;
use flotilla_sdk::kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use flotilla_sdk::{Action, Context, ContextError, Request};

use super::super::events::publish;
use super::clock::ScheduleClock;
use super::jobs::{beyond_history, finished, job_name, new_job, reference};
use super::policy::{Concurrency, Decision, Due, decide};
use super::schedule::{Schedule, has_zone_prefix, zone};
use super::timing::{Missed, Times, due, until_next};

/// Errors of one sync; the key is retried with the fleet's rate limiter, as upstream's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CronJob lacks a namespace, uid or creation time.
    #[error("cronjob {0} lacks a namespace, uid or creationTimestamp")]
    Incomplete(String),
    /// The Jobs shipped with the item are unreadable.
    #[error("cannot read prefetched jobs")]
    Prefetched(#[source] ContextError),
    /// A request to the API failed.
    #[error("cannot {action} {name}")]
    Api {
        /// What was asked (`get job`, `create job`, `update status of cronjob`, …).
        action: &'static str,
        /// The object's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// An active Job could not be deleted to make way under `Replace`.
    #[error("could not replace job {0}")]
    Replace(String),
}

/// Syncs one CronJob on `clock`.
///
/// # Errors
/// [`Error`] when reading, creating, deleting or writing fails; the key is retried.
pub async fn reconcile(
    request: Request<CronJob>,
    ctx: Context,
    clock: Arc<ScheduleClock>,
) -> Result<Action, Error> {
    let Some(cronjob) = request.object() else {
        // Its Jobs go with it through their owner references (garbage collection).
        return Ok(Action::await_change());
    };
    let cronjob: &CronJob = cronjob.as_ref();
    let incomplete = || Error::Incomplete(request.key().to_owned());
    let namespace = cronjob.namespace().ok_or_else(incomplete)?;
    let anchor = cronjob
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .ok_or_else(incomplete)?;
    let jobs = ctx.prefetched::<Job>().map_err(Error::Prefetched)?;
    let job_api: Api<Job> = Api::namespaced(ctx.client(), &namespace);
    let mut pass = Pass {
        ctx: &ctx,
        cronjob,
        jobs: &job_api,
        status: cronjob.status.clone().unwrap_or_default(),
        changed: false,
    };
    pass.cleanup(&jobs).await;
    let outcome = pass.sync(&jobs, clock.now(anchor)).await;
    if pass.changed {
        let mut status = pass.status.clone();
        // As upstream's `omitempty`: no Job active is no list, not an empty one.
        if status.active.as_ref().is_some_and(Vec::is_empty) {
            status.active = None;
        }
        let mut written = cronjob.clone();
        written.status = Some(status);
        let cronjobs: Api<CronJob> = Api::namespaced(ctx.client(), &namespace);
        cronjobs
            .replace_status(request.name(), &PostParams::default(), &written)
            .await
            .map_err(|source| Error::Api {
                action: "update status of cronjob",
                name: request.name().to_owned(),
                source,
            })?;
    }
    match outcome? {
        Some(after) => Ok(Action::requeue(clock.wall_delay(after))),
        None => Ok(Action::await_change()),
    }
}

/// One sync's working state: the status being rewritten and whether it changed.
struct Pass<'a> {
    ctx: &'a Context,
    cronjob: &'a CronJob,
    jobs: &'a Api<Job>,
    /// The status to write; starts as the cache's.
    status: CronJobStatus,
    /// Whether `status` must be written.
    changed: bool,
}

// === impl Pass ===

impl Pass<'_> {
    fn event(&self, type_: EventType, reason: &str, message: String) {
        publish(self.ctx, self.cronjob, type_, reason, message);
    }

    fn is_active(&self, uid: Option<&str>) -> bool {
        self.status
            .active
            .iter()
            .flatten()
            .any(|r| r.uid.is_some() && r.uid.as_deref() == uid)
    }

    fn forget(&mut self, uid: Option<&str>) {
        if let Some(active) = self.status.active.as_mut() {
            active.retain(|r| r.uid.as_deref() != uid);
        }
        self.changed = true;
    }

    /// Deletes `job` in the background (its pods go after it); whether it is gone.
    async fn delete(&mut self, job: &Job) -> bool {
        let name = job.name_any();
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        let result = match self.jobs.delete(&name, &params).await {
            // Already gone: the goal holds.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            other => other.map(|_| ()),
        };
        match result {
            Ok(()) => {
                self.forget(job.uid().as_deref());
                let note = format!("Deleted job {name}");
                self.event(EventType::Normal, "SuccessfulDelete", note);
                true
            }
            Err(err) => {
                tracing::warn!(error = %err, job = %name, "cannot delete job of cronjob");
                self.event(
                    EventType::Warning,
                    "FailedDelete",
                    format!("Deleted job: {err}"),
                );
                false
            }
        }
    }

    /// Upstream's `cleanupFinishedJobs`: the finished Jobs beyond the history limits go, oldest
    /// first; a failure is an Event and the next sync tries again.
    async fn cleanup(&mut self, jobs: &[Job]) {
        let spec = self.cronjob.spec.as_ref();
        let successful = spec.and_then(|s| s.successful_jobs_history_limit);
        let failed = spec.and_then(|s| s.failed_jobs_history_limit);
        for job in beyond_history(jobs, successful, failed) {
            self.delete(job).await;
        }
    }

    /// Upstream's `syncCronJob`: the schedule-time delay until the next look, if any.
    async fn sync(
        &mut self,
        jobs: &[Job],
        now: Timestamp,
    ) -> Result<Option<SignedDuration>, Error> {
        self.reconcile_active(jobs).await?;
        let cronjob = self.cronjob;
        if cronjob.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let spec = cronjob.spec.clone().unwrap_or_default();
        let zone = match zone(spec.time_zone.as_deref()) {
            Ok(zone) => zone,
            Err(err) => {
                let name = spec.time_zone.as_deref().unwrap_or_default();
                let note = format!("invalid timeZone: {name:?}: {err}");
                self.event(EventType::Warning, "UnknownTimeZone", note);
                return Ok(None);
            }
        };
        if spec.suspend == Some(true) {
            return Ok(None);
        }
        if has_zone_prefix(&spec.schedule) {
            let note = format!(
                "CRON_TZ or TZ used in schedule {:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
                spec.schedule
            );
            self.event(EventType::Warning, "UnsupportedSchedule", note);
        }
        let schedule = match Schedule::parse(&spec.schedule, zone) {
            Ok(schedule) => schedule,
            Err(err) => {
                // A user error: retrying cannot fix it, the next edit of the spec re-triggers.
                let note = format!("unparseable schedule: {:?} : {err}", spec.schedule);
                self.event(EventType::Warning, "UnparseableSchedule", note);
                return Ok(None);
            }
        };
        let times = Times {
            created: cronjob
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(now, |t| t.0),
            last_scheduled: self.status.last_schedule_time.as_ref().map(|t| t.0),
            starting_deadline: spec.starting_deadline_seconds,
        };
        let next = || until_next(&schedule, times, now);
        let scheduled = match due(&schedule, times, now) {
            Err(err) => {
                let note = format!("invalid schedule: {} : {err}", spec.schedule);
                self.event(EventType::Warning, "InvalidSchedule", note);
                return Ok(None);
            }
            Ok((None, _)) => return Ok(next()),
            Ok((Some(scheduled), missed)) => {
                if let Missed::Many(n) = missed {
                    tracing::info!(missed = n, "too many missed start times");
                    let note = "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".to_owned();
                    self.event(EventType::Warning, "TooManyMissedTimes", note);
                }
                scheduled
            }
        };
        let name = job_name(&cronjob.name_any(), scheduled);
        let decision = decide(&Due {
            scheduled,
            now,
            starting_deadline: spec.starting_deadline_seconds,
            concurrency: Concurrency::from_spec(spec.concurrency_policy.as_deref()),
            last_scheduled: times.last_scheduled,
            job_active: self
                .status
                .active
                .iter()
                .flatten()
                .any(|r| r.name.as_deref() == Some(name.as_str())),
            active: self.status.active.as_ref().map_or(0, Vec::len),
        });
        match decision {
            Decision::TooLate => {
                let at = chrono::DateTime::from_timestamp(scheduled.as_second(), 0)
                    .map(|t| t.to_rfc2822())
                    .unwrap_or_else(|| scheduled.to_string());
                let note = format!("Missed scheduled time to start a job: {at}");
                self.event(EventType::Warning, "MissSchedule", note);
                return Ok(next());
            }
            Decision::AlreadyStarted => return Ok(next()),
            Decision::Forbidden => {
                let note = "Not starting job because prior execution is running and concurrency policy is Forbid".to_owned();
                self.event(EventType::Normal, "JobAlreadyActive", note);
                return Ok(next());
            }
            Decision::Start { replace: true } => self.replace_active().await?,
            Decision::Start { replace: false } => {}
        }
        let Some(job) = new_job(cronjob, scheduled, zone) else {
            return Err(Error::Incomplete(cronjob.name_any()));
        };
        let created = match self.jobs.create(&PostParams::default(), &job).await {
            Ok(created) => {
                self.event(
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("Created job {name}"),
                );
                created
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                // Created before, by us in a sync whose status write failed, or by someone else.
                let existing = self.get_job(&name).await?;
                let ours = existing
                    .owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && Some(&o.uid) == cronjob.uid().as_ref());
                if !ours || self.is_active(existing.uid().as_deref()) {
                    return Ok(next());
                }
                existing
            }
            Err(source) => {
                // A namespace being deleted refuses every create; an Event would only be noise.
                if !is_namespace_terminating(&source) {
                    let note = format!("Error creating job: {source}");
                    self.event(EventType::Warning, "FailedCreate", note);
                }
                return Err(Error::Api {
                    action: "create job",
                    name,
                    source,
                });
            }
        };
        self.status
            .active
            .get_or_insert_with(Vec::new)
            .push(reference(&created));
        self.status.last_schedule_time = Some(Time(scheduled));
        self.changed = true;
        Ok(next())
    }

    /// Brings `status.active` and `lastSuccessfulTime` in line with the Jobs the CronJob controls.
    async fn reconcile_active(&mut self, jobs: &[Job]) -> Result<(), Error> {
        for job in jobs {
            let uid = job.uid();
            let found = self.is_active(uid.as_deref());
            let how = finished(job);
            match (found, how) {
                (false, None) => {
                    // A running Job we do not list: our status write may have been lost, or the
                    // cache is behind a write; a live read settles which.
                    let fresh = self.get_cronjob().await?;
                    let listed = fresh
                        .status
                        .as_ref()
                        .and_then(|s| s.active.as_ref())
                        .and_then(|a| a.iter().find(|r| r.uid.is_some() && r.uid == uid).cloned());
                    match listed {
                        Some(reference) => {
                            self.status
                                .active
                                .get_or_insert_with(Vec::new)
                                .push(reference);
                        }
                        None => {
                            let note = format!(
                                "Saw a job that the controller did not create or forgot: {}",
                                job.name_any()
                            );
                            self.event(EventType::Warning, "UnexpectedJob", note);
                        }
                    }
                }
                (true, Some(how)) => {
                    self.forget(uid.as_deref());
                    let note = format!(
                        "Saw completed job: {}, condition: {}",
                        job.name_any(),
                        how.as_str()
                    );
                    self.event(EventType::Normal, "SawCompletedJob", note);
                }
                _ => {}
            }
            if how == Some(super::jobs::Finished::Complete)
                && let Some(done) = job.status.as_ref().and_then(|s| s.completion_time.clone())
                && self
                    .status
                    .last_successful_time
                    .as_ref()
                    .is_none_or(|t| t.0 < done.0)
            {
                self.status.last_successful_time = Some(done);
                self.changed = true;
            }
        }
        // Listed Jobs that the cache no longer has: a live read tells gone from not yet seen.
        let listed: Vec<_> = self.status.active.iter().flatten().cloned().collect();
        for reference in listed {
            if jobs
                .iter()
                .any(|j| j.uid().is_some() && j.uid() == reference.uid)
            {
                continue;
            }
            let name = reference.name.clone().unwrap_or_default();
            match self.jobs.get_opt(&name).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    let note = format!("Active job went missing: {name}");
                    self.event(EventType::Normal, "MissingJob", note);
                    self.forget(reference.uid.as_deref());
                }
                Err(source) => {
                    return Err(Error::Api {
                        action: "get job",
                        name,
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// `Replace`: each active Job, read live, is deleted before the new one starts.
    async fn replace_active(&mut self) -> Result<(), Error> {
        let listed: Vec<_> = self.status.active.iter().flatten().cloned().collect();
        for reference in listed {
            let name = reference.name.clone().unwrap_or_default();
            let job = match self.get_job(&name).await {
                Ok(job) => job,
                Err(err) => {
                    self.event(EventType::Warning, "FailedGet", format!("Get job: {err}"));
                    return Err(err);
                }
            };
            if !self.delete(&job).await {
                return Err(Error::Replace(name));
            }
            // The listed reference goes too, even if the Job read live is a namesake.
            self.forget(reference.uid.as_deref());
        }
        Ok(())
    }

    async fn get_job(&self, name: &str) -> Result<Job, Error> {
        self.jobs.get(name).await.map_err(|source| Error::Api {
            action: "get job",
            name: name.to_owned(),
            source,
        })
    }

    async fn get_cronjob(&self) -> Result<CronJob, Error> {
        let name = self.cronjob.name_any();
        let namespace = self.cronjob.namespace().unwrap_or_default();
        let api: Api<CronJob> = Api::namespaced(self.ctx.client(), &namespace);
        api.get(&name).await.map_err(|source| Error::Api {
            action: "get cronjob",
            name,
            source,
        })
    }
}

/// Whether the API refused a create because the namespace is being deleted.
fn is_namespace_terminating(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status)
        if status.code == 403 && status.message.contains("being terminated"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use flotilla_sdk::kube::client::Body;
    use http::{Method, Request as HttpRequest, Response};
    use serde_json::{Value, json};

    use super::*;

    /// (method, path, body) of each request the mock API answered, Events left out.
    type Seen = Arc<Mutex<Vec<(Method, String, Value)>>>;

    /// The fixture's instant: half a second after the 10:06 start time.
    fn just_after_10_06() -> Timestamp {
        "2026-11-26T10:06:00.5Z".parse().unwrap()
    }

    /// A mock API that echoes what it is sent, giving created objects a uid, and answers a GET of
    /// a Job with that Job.
    fn api(seen: Seen) -> kube::Client {
        let service = tower::service_fn(move |request: HttpRequest<Body>| {
            let seen = seen.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await?;
                let mut body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let path = parts.uri.path().to_owned();
                if !path.contains("/events") {
                    seen.lock()
                        .unwrap()
                        .push((parts.method.clone(), path.clone(), body.clone()));
                }
                let answer = match parts.method {
                    Method::POST => {
                        body["metadata"]["uid"] = json!("new-uid");
                        body["metadata"]["resourceVersion"] = json!("9");
                        body
                    }
                    Method::GET | Method::DELETE => {
                        let name = path.rsplit('/').next().unwrap_or_default();
                        json!({"apiVersion": "batch/v1", "kind": "Job",
                               "metadata": {"name": name, "namespace": "cronjob", "uid": "old-uid"}})
                    }
                    _ => body,
                };
                let response = Response::new(Body::from(serde_json::to_vec(&answer)?));
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        kube::Client::new(service, "cronjob")
    }

    /// The fixture's CronJob, with `policy`, `status` and a successful-history limit of 1.
    fn cronjob(policy: &str, status: Value) -> CronJob {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "every-minute", "namespace": "cronjob", "uid": "cj-uid",
                         "resourceVersion": "641", "creationTimestamp": "2026-11-26T10:05:33Z"},
            "spec": {"schedule": "*/1 * * * *", "concurrencyPolicy": policy, "suspend": false,
                     "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1,
                     "jobTemplate": {"metadata": {"labels": {"app": "tick"}},
                                     "spec": {"template": {"spec": {"containers": []}}}}},
            "status": status,
        }))
        .unwrap()
    }

    /// A Job of the CronJob started at minute `minute` past 10:00, finished at `done` if given.
    fn job(minute: u32, uid: &str, done: Option<&str>) -> Job {
        let conditions = done.map(|at| {
            json!([{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": at},
                   {"type": "Complete", "status": "True", "lastTransitionTime": at}])
        });
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("every-minute-{}", 29_928_120 + minute),
                         "namespace": "cronjob", "uid": uid,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                             "name": "every-minute", "uid": "cj-uid", "controller": true}]},
            "status": {"startTime": format!("2026-11-26T10:0{minute}:00Z"),
                       "completionTime": done, "conditions": conditions},
        }))
        .unwrap()
    }

    fn active(minute: u32, uid: &str) -> Value {
        json!({"kind": "Job", "apiVersion": "batch/v1", "namespace": "cronjob",
               "name": format!("every-minute-{}", 29_928_120 + minute), "uid": uid})
    }

    async fn run(cj: CronJob, jobs: &[Job]) -> (Action, Vec<(Method, String, Value)>) {
        let seen: Seen = Arc::default();
        let mut ctx = Context::for_test().client(api(seen.clone()));
        for job in jobs {
            ctx = ctx.prefetched(job);
        }
        let clock = ScheduleClock::default().reading(just_after_10_06);
        let request = Request::new(Some("cronjob"), "every-minute").with_object(cj);
        let action = reconcile(request, ctx.build(), Arc::new(clock))
            .await
            .unwrap();
        let seen = seen.lock().unwrap().clone();
        (action, seen)
    }

    const JOBS: &str = "/apis/batch/v1/namespaces/cronjob/jobs";
    const STATUS: &str = "/apis/batch/v1/namespaces/cronjob/cronjobs/every-minute/status";

    #[tokio::test]
    async fn a_due_start_time_creates_kcms_job_lists_it_active_and_requeues_for_the_next_minute() {
        let (action, seen) = run(cronjob("Forbid", json!({})), &[]).await;
        assert_eq!(seen.len(), 2, "{seen:#?}");
        let (method, path, created) = &seen[0];
        assert_eq!((method, path.as_str()), (&Method::POST, JOBS));
        assert_eq!(created["metadata"]["name"], "every-minute-29928126");
        assert_eq!(
            created["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"],
            "2026-11-26T10:06:00Z"
        );
        assert_eq!(created["metadata"]["labels"], json!({"app": "tick"}));
        assert_eq!(
            created["metadata"]["ownerReferences"],
            json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": "every-minute",
                    "uid": "cj-uid", "controller": true, "blockOwnerDeletion": true}])
        );
        let (method, path, written) = &seen[1];
        assert_eq!((method, path.as_str()), (&Method::PUT, STATUS));
        assert_eq!(written["metadata"]["resourceVersion"], "641");
        assert_eq!(
            written["status"],
            json!({"active": [{"apiVersion": "batch/v1", "kind": "Job", "namespace": "cronjob",
                               "name": "every-minute-29928126", "uid": "new-uid",
                               "resourceVersion": "9"}],
                   "lastScheduleTime": "2026-11-26T10:06:00Z"})
        );
        assert_eq!(action, Action::requeue(Duration::from_millis(59_600)));
    }

    #[tokio::test]
    async fn forbid_with_a_job_active_writes_nothing_and_requeues_for_the_next_minute() {
        let status =
            json!({"active": [active(5, "u5")], "lastScheduleTime": "2026-11-26T10:05:00Z"});
        let (action, seen) = run(cronjob("Forbid", status), &[job(5, "u5", None)]).await;
        assert!(seen.is_empty(), "{seen:#?}");
        assert_eq!(action, Action::requeue(Duration::from_millis(59_600)));
    }

    #[tokio::test]
    async fn a_completion_and_the_run_forbid_held_back_are_written_in_one_status_update() {
        // KCM's fixture 11: the Job completed after the next start time passed.
        let status =
            json!({"active": [active(5, "u5")], "lastScheduleTime": "2026-11-26T10:05:00Z"});
        let done = "2026-11-26T10:06:00Z";
        let (_, seen) = run(cronjob("Forbid", status), &[job(5, "u5", Some(done))]).await;
        let methods: Vec<_> = seen
            .iter()
            .map(|(m, p, _)| (m.clone(), p.as_str()))
            .collect();
        assert_eq!(methods, [(Method::POST, JOBS), (Method::PUT, STATUS)]);
        let written = &seen[1].2["status"];
        assert_eq!(written["lastSuccessfulTime"], done);
        assert_eq!(written["lastScheduleTime"], "2026-11-26T10:06:00Z");
        assert_eq!(written["active"][0]["name"], "every-minute-29928126");
        assert_eq!(written["active"].as_array().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_completed_job_leaves_active_and_no_job_active_is_written_as_no_list() {
        let status =
            json!({"active": [active(6, "u6")], "lastScheduleTime": "2026-11-26T10:06:00Z"});
        let done = "2026-11-26T10:06:00Z";
        let (action, seen) = run(cronjob("Forbid", status), &[job(6, "u6", Some(done))]).await;
        let methods: Vec<_> = seen
            .iter()
            .map(|(m, p, _)| (m.clone(), p.as_str()))
            .collect();
        assert_eq!(
            methods,
            [(Method::PUT, STATUS)],
            "the start time was already taken"
        );
        assert_eq!(
            seen[0].2["status"],
            json!({"lastScheduleTime": "2026-11-26T10:06:00Z", "lastSuccessfulTime": done})
        );
        assert_eq!(action, Action::requeue(Duration::from_millis(59_600)));
    }

    #[tokio::test]
    async fn replace_deletes_the_active_job_in_the_background_before_starting_the_next() {
        let status =
            json!({"active": [active(5, "u5")], "lastScheduleTime": "2026-11-26T10:05:00Z"});
        let (_, seen) = run(cronjob("Replace", status), &[job(5, "u5", None)]).await;
        let methods: Vec<_> = seen.iter().map(|(m, _, _)| m.clone()).collect();
        assert_eq!(
            methods,
            [Method::GET, Method::DELETE, Method::POST, Method::PUT]
        );
        assert_eq!(seen[1].1, format!("{JOBS}/every-minute-29928125"));
        assert_eq!(seen[1].2["propagationPolicy"], "Background");
        let written = &seen[3].2["status"]["active"];
        assert_eq!(written.as_array().unwrap().len(), 1);
        assert_eq!(written[0]["name"], "every-minute-29928126");
    }

    #[tokio::test]
    async fn finished_jobs_beyond_the_history_limit_are_deleted_oldest_first_in_the_background() {
        let status = json!({"lastScheduleTime": "2026-11-26T10:06:00Z"});
        let jobs = [
            job(4, "u4", Some("2026-11-26T10:04:30Z")),
            job(3, "u3", Some("2026-11-26T10:03:30Z")),
            job(5, "u5", Some("2026-11-26T10:05:30Z")),
        ];
        let (_, seen) = run(cronjob("Allow", status), &jobs).await;
        let deletes: Vec<&str> = seen
            .iter()
            .filter(|(m, _, _)| m == Method::DELETE)
            .map(|(_, p, b)| {
                assert_eq!(b["propagationPolicy"], "Background");
                p.rsplit('/').next().unwrap()
            })
            .collect();
        assert_eq!(deletes, ["every-minute-29928123", "every-minute-29928124"]);
        let (method, path, written) = seen.last().unwrap();
        assert_eq!((method, path.as_str()), (&Method::PUT, STATUS));
        assert_eq!(
            written["status"]["lastSuccessfulTime"],
            "2026-11-26T10:05:30Z"
        );
    }

    #[tokio::test]
    async fn a_suspended_cronjob_starts_nothing_and_waits_for_a_change() {
        let mut cj = cronjob("Allow", json!({}));
        cj.spec.as_mut().unwrap().suspend = Some(true);
        let (action, seen) = run(cj, &[]).await;
        assert!(seen.is_empty(), "{seen:#?}");
        assert_eq!(action, Action::await_change());
    }
}
