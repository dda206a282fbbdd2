//! The Jobs a CronJob makes and keeps (upstream `getJobFromTemplate2`, `getJobName`, `getRef`,
//! `getFinishedStatus`, `byJobStartTime`): their names, their metadata, how they finished and which
//! finished ones the history limits let go. Pure functions.

use std::cmp::Ordering;

use chrono::{DateTime, SecondsFormat};
use chrono_tz::Tz;
use flotilla_sdk::k8s_openapi::api::batch::v1::{CronJob, Job};
use flotilla_sdk::k8s_openapi::api::core::v1::ObjectReference;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube::ResourceExt;

use super::super::controller_ref::controller_ref;

/// The annotation a CronJob's Job carries with its scheduled time, RFC 3339 in the CronJob's zone.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// How a Job finished: its `Complete` or `Failed` condition with status True.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Complete.
    Complete,
    /// Failed.
    Failed,
}

impl Finished {
    /// The condition's type, as upstream's Events print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "Complete",
            Self::Failed => "Failed",
        }
    }
}

/// How `job` finished, if it has (the first finished condition, as upstream).
pub fn finished(job: &Job) -> Option<Finished> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .filter(|c| c.status == "True")
        .find_map(|c| match c.type_.as_str() {
            "Complete" => Some(Finished::Complete),
            "Failed" => Some(Finished::Failed),
            _ => None,
        })
}

/// The name of `cronjob`'s Job for the start time `scheduled`: `<cronjob>-<minutes since the
/// epoch>`, the same for every attempt at that time, so a Job is never created twice.
pub fn job_name(cronjob: &str, scheduled: Timestamp) -> String {
    format!("{cronjob}-{}", scheduled.as_second().div_euclid(60))
}

/// `scheduled` as the annotation writes it: RFC 3339, whole seconds, in `zone` (`Z` at UTC).
pub fn scheduled_timestamp(scheduled: Timestamp, zone: Tz) -> String {
    DateTime::from_timestamp(scheduled.as_second(), 0)
        .map(|utc| {
            utc.with_timezone(&zone)
                .to_rfc3339_opts(SecondsFormat::Secs, true)
        })
        .unwrap_or_else(|| scheduled.to_string())
}

/// The Job `cronjob` starts for `scheduled`: the template's labels and annotations plus the
/// scheduled-timestamp annotation, a blocking controller reference, the template's spec. `None`
/// when the CronJob lacks a name or uid.
pub fn new_job(cronjob: &CronJob, scheduled: Timestamp, zone: Tz) -> Option<Job> {
    let template = cronjob.spec.as_ref().map(|s| &s.job_template);
    let meta = template
        .and_then(|t| t.metadata.clone())
        .unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP.to_owned(),
        scheduled_timestamp(scheduled, zone),
    );
    Some(Job {
        metadata: ObjectMeta {
            name: Some(job_name(&cronjob.name_any(), scheduled)),
            namespace: cronjob.namespace(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref(cronjob)?]),
            ..ObjectMeta::default()
        },
        spec: template.and_then(|t| t.spec.clone()),
        status: None,
    })
}

/// The reference `status.active` holds for `job` (upstream's `getRef`).
pub fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".to_owned()),
        kind: Some("Job".to_owned()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// The finished Jobs the history limits let go, oldest first: of `jobs`, the successful ones beyond
/// the newest `successful_limit` and the failed ones beyond the newest `failed_limit` (a limit
/// `None` keeps all). Oldest by `status.startTime`, those without one last, names breaking ties.
pub fn beyond_history(
    jobs: &[Job],
    successful_limit: Option<i32>,
    failed_limit: Option<i32>,
) -> Vec<&Job> {
    let mut doomed = Vec::new();
    for (kind, limit) in [
        (Finished::Complete, successful_limit),
        (Finished::Failed, failed_limit),
    ] {
        let Some(limit) = limit else { continue };
        let mut finished_jobs: Vec<&Job> =
            jobs.iter().filter(|j| finished(j) == Some(kind)).collect();
        let keep = usize::try_from(limit).unwrap_or(0);
        if finished_jobs.len() <= keep {
            continue;
        }
        finished_jobs.sort_by(|a, b| by_start_time(a, b));
        let surplus = finished_jobs.len() - keep;
        doomed.extend(finished_jobs.into_iter().take(surplus));
    }
    doomed
}

/// Upstream's `byJobStartTime`: started earlier first, not started last, then by name.
fn by_start_time(a: &Job, b: &Job) -> Ordering {
    let start = |j: &Job| {
        j.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0)
    };
    match (start(a), start(b)) {
        (Some(x), Some(y)) if x != y => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        _ => a.metadata.name.cmp(&b.metadata.name),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn t(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

    fn job(name: &str, started: Option<&str>, finished_as: Option<&str>) -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "status": {
                "startTime": started,
                "conditions": finished_as.map(|c| vec![
                    json!({"type": "SuccessCriteriaMet", "status": "True"}),
                    json!({"type": c, "status": "True"}),
                ]),
            },
        }))
        .unwrap()
    }

    #[test]
    fn jobs_are_named_by_the_minutes_since_the_epoch_of_their_start_time() {
        // KCM's name for the fixture's 10:06:00 run.
        assert_eq!(
            job_name("every-minute", t("2026-11-26T10:06:00Z")),
            "every-minute-29928126"
        );
        assert_eq!(
            job_name("every-minute", t("2026-11-26T10:06:59Z")),
            "every-minute-29928126"
        );
    }

    #[test]
    fn the_scheduled_timestamp_is_rfc3339_in_the_cronjobs_zone() {
        let at = t("2026-11-26T10:06:00Z");
        assert_eq!(scheduled_timestamp(at, Tz::UTC), "2026-11-26T10:06:00Z");
        assert_eq!(
            scheduled_timestamp(at, Tz::Europe__Berlin),
            "2026-11-26T11:06:00+01:00"
        );
    }

    #[test]
    fn a_new_job_carries_the_template_metadata_the_annotation_and_a_blocking_owner() {
        let cronjob: CronJob = serde_json::from_value(json!({
            "metadata": {"name": "every-minute", "namespace": "cronjob", "uid": "u-1"},
            "spec": {"schedule": "*/1 * * * *", "jobTemplate": {
                "metadata": {"labels": {"app": "tick"}, "annotations": {"note": "x"}},
                "spec": {"template": {"spec": {"containers": []}}},
            }},
        }))
        .unwrap();
        let job = new_job(&cronjob, t("2026-11-26T10:06:00Z"), Tz::UTC).unwrap();
        let meta = &job.metadata;
        assert_eq!(meta.name.as_deref(), Some("every-minute-29928126"));
        assert_eq!(meta.namespace.as_deref(), Some("cronjob"));
        assert_eq!(meta.labels.as_ref().unwrap()["app"], "tick");
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(annotations["note"], "x");
        assert_eq!(annotations[SCHEDULED_TIMESTAMP], "2026-11-26T10:06:00Z");
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("CronJob", "every-minute")
        );
        assert_eq!(owner.api_version, "batch/v1");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert!(job.spec.is_some());
    }

    #[test]
    fn a_job_is_finished_only_by_a_true_complete_or_failed_condition() {
        assert_eq!(
            finished(&job("a", None, Some("Complete"))),
            Some(Finished::Complete)
        );
        assert_eq!(
            finished(&job("a", None, Some("Failed"))),
            Some(Finished::Failed)
        );
        assert_eq!(finished(&job("a", None, Some("Suspended"))), None);
        assert_eq!(finished(&job("a", None, None)), None);
    }

    #[test]
    fn history_trimming_deletes_the_oldest_finished_jobs_beyond_each_limit() {
        let jobs = vec![
            job("c-4", Some("2026-11-26T10:04:00Z"), Some("Complete")),
            job("c-1", Some("2026-11-26T10:01:00Z"), Some("Complete")),
            job("c-3", Some("2026-11-26T10:03:00Z"), Some("Complete")),
            job("c-2", Some("2026-11-26T10:02:00Z"), Some("Complete")),
            job("c-5", None, Some("Complete")),
            job("f-1", Some("2026-11-26T10:01:30Z"), Some("Failed")),
            job("f-2", Some("2026-11-26T10:02:30Z"), Some("Failed")),
            job("r-1", Some("2026-11-26T10:00:00Z"), None),
        ];
        let names =
            |doomed: Vec<&Job>| -> Vec<String> { doomed.iter().map(|j| j.name_any()).collect() };
        assert_eq!(
            names(beyond_history(&jobs, Some(3), Some(1))),
            ["c-1", "c-2", "f-1"],
            "not started sorts last; running jobs are never trimmed"
        );
        assert_eq!(
            names(beyond_history(&jobs, None, None)),
            Vec::<String>::new()
        );
        assert_eq!(
            names(beyond_history(&jobs, Some(0), None)),
            ["c-1", "c-2", "c-3", "c-4", "c-5"]
        );
    }

    #[test]
    fn jobs_that_never_started_are_ordered_by_name() {
        let jobs = vec![
            job("x-29928128", None, Some("Complete")),
            job("x-29928126", None, Some("Complete")),
            job("x-29928127", None, Some("Complete")),
        ];
        let doomed = beyond_history(&jobs, Some(1), Some(1));
        let names: Vec<String> = doomed.iter().map(|j| j.name_any()).collect();
        assert_eq!(names, ["x-29928126", "x-29928127"]);
    }

    #[test]
    fn the_active_reference_names_the_job_with_its_uid_and_version() {
        let mut j = job("a", None, None);
        j.metadata.uid = Some("u".into());
        j.metadata.resource_version = Some("7".into());
        let r = reference(&j);
        assert_eq!(r.kind.as_deref(), Some("Job"));
        assert_eq!(r.api_version.as_deref(), Some("batch/v1"));
        assert_eq!(r.uid.as_deref(), Some("u"));
        assert_eq!(r.resource_version.as_deref(), Some("7"));
    }
}
