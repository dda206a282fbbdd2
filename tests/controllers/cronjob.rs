//! The `cronjob` controller, against what kube-controller-manager v1.32 writes
//! (`kube-fixtures/kcm-v1.32/cronjob/`): a `*/1 * * * *` CronJob starts a Job each schedule minute,
//! named `<cronjob>-<scheduled time in minutes since the epoch>`, annotated with the scheduled time,
//! labelled from the jobTemplate and controlled by the CronJob, while `lastScheduleTime` advances; a
//! Forbid CronJob starts nothing while its Job is active and starts the skipped run once the Job
//! completes; and the history limit deletes the oldest completed Job.
//!
//! Schedules are minute-grained, so the workers run with the hidden test flag `--cronjob-minute 2s`:
//! each schedule minute lasts two seconds, and every time the controller writes is in that sped-up
//! schedule time. The jobTemplate is suspended, so no job controller (on a real cluster,
//! `FLOTILLA_TEST_KUBECONFIG`) runs or finishes the Jobs: they stay active until the test patches
//! their status to Complete, as a job controller would.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(60);
const SCHEDULED: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// A fleet running only the cronjob controller, with two-second schedule minutes.
async fn fleet(cluster: &TestCluster) -> (Fleet, Vec<Proc>) {
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let mut procs = vec![fleet.coordinator("c0", &[])];
    procs.push(fleet.worker(
        "flotilla",
        "w0",
        &[
            "worker",
            "--controllers",
            "cronjob",
            "--cronjob-minute",
            "2s",
        ],
    ));
    fleet.wait_for_workers(1, CONVERGE).await;
    (fleet, procs)
}

/// A CronJob `name` firing every minute under `policy`, its Jobs suspended and labelled `app=tick`.
fn cronjob(name: &str, policy: &str, successful_history: i32) -> CronJob {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": "*/1 * * * *",
            "concurrencyPolicy": policy,
            "successfulJobsHistoryLimit": successful_history,
            "jobTemplate": {
                "metadata": {"labels": {"app": "tick"}},
                "spec": {
                    "suspend": true,
                    "template": {"spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "tick", "image": "registry.k8s.io/busybox:1.36", "command": ["date"]}],
                    }},
                },
            },
        },
    }))
    .unwrap()
}

/// The status a job controller writes when a Job completes at `at`.
fn complete(at: &Time) -> Value {
    json!({"status": {
        "startTime": at, "completionTime": at, "succeeded": 1,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": at,
             "lastProbeTime": at, "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"},
            {"type": "Complete", "status": "True", "lastTransitionTime": at,
             "lastProbeTime": at, "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"},
        ],
    }})
}

/// The Jobs of the namespace, by name (which sorts them by scheduled time).
async fn jobs_of(jobs: &Api<Job>) -> Vec<Job> {
    let mut list = jobs.list(&ListParams::default()).await.unwrap().items;
    list.sort_by_key(|j| j.name_any());
    list
}

/// The Events the controller recorded on CronJob `name` with `reason`.
async fn events(events: &Api<Event>, name: &str, reason: &str) -> Vec<Event> {
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

/// Checks that `job` is the Job KCM makes for `cj` at the time its annotation names.
fn assert_made_by(job: &Job, cj: &CronJob) {
    let name = job.name_any();
    let annotation = job
        .annotations()
        .get(SCHEDULED)
        .unwrap_or_else(|| panic!("{name} lacks {SCHEDULED}"));
    let scheduled: Timestamp = annotation.parse().unwrap();
    assert!(annotation.ends_with('Z'), "RFC 3339 in UTC: {annotation}");
    assert_eq!(
        scheduled.as_second() % 60,
        0,
        "a whole minute: {annotation}"
    );
    assert_eq!(
        name,
        format!("{}-{}", cj.name_any(), scheduled.as_second() / 60),
        "named by the scheduled minute"
    );
    assert_eq!(job.labels().get("app").map(String::as_str), Some("tick"));
    let owner = &job.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.api_version.as_str()),
        ("CronJob", "batch/v1")
    );
    assert_eq!(Some(&owner.uid), cj.uid().as_ref());
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
}

#[tokio::test(flavor = "multi_thread")]
async fn every_schedule_minute_starts_a_job_named_annotated_and_owned_as_kcm_does() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster).await;
    let ns = unique_namespace(&client, "cronjob").await;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let cj = cronjobs
        .create(&PostParams::default(), &cronjob("every-minute", "Allow", 3))
        .await
        .unwrap();

    let last_schedule = |cj: &CronJob| {
        cj.status
            .as_ref()
            .and_then(|s| s.last_schedule_time.as_ref())
            .map(|t| t.0)
    };
    let first = wait_for(CONVERGE, "the first lastScheduleTime", || async {
        last_schedule(&cronjobs.get("every-minute").await.unwrap())
    })
    .await;
    let later = wait_for(CONVERGE, "lastScheduleTime to advance", || async {
        last_schedule(&cronjobs.get("every-minute").await.unwrap()).filter(|t| *t > first)
    })
    .await;
    cronjobs
        .patch(
            "every-minute",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();

    let made = jobs_of(&jobs).await;
    assert!(made.len() >= 2, "{made:?}");
    for job in &made {
        assert_made_by(job, &cj);
    }
    // The latest schedule's Job is listed active, by a KCM-style reference.
    let status = cronjobs.get("every-minute").await.unwrap().status.unwrap();
    let latest = format!("every-minute-{}", later.as_second() / 60);
    assert!(
        made.iter().any(|j| j.name_any() == latest),
        "{latest} missing"
    );
    let active = status.active.unwrap_or_default();
    let reference = active
        .iter()
        .find(|r| r.name.as_deref() == Some(latest.as_str()))
        .unwrap_or_else(|| panic!("{latest} not active: {active:?}"));
    assert_eq!(reference.kind.as_deref(), Some("Job"));
    assert_eq!(reference.api_version.as_deref(), Some("batch/v1"));
    assert_eq!(reference.namespace.as_deref(), Some(ns.as_str()));
    assert!(reference.uid.is_some() && reference.resource_version.is_some());

    let recorded: Api<Event> = Api::namespaced(client.clone(), &ns);
    let created = events(&recorded, "every-minute", "SuccessfulCreate").await;
    let event = created
        .iter()
        .find(|e| e.message.as_deref() == Some(&format!("Created job {latest}")))
        .unwrap_or_else(|| panic!("no SuccessfulCreate for {latest}: {created:?}"));
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(
        event.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("cronjob-controller")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forbid_starts_nothing_while_a_job_is_active_and_the_history_limit_trims_completed_jobs() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster).await;
    let ns = unique_namespace(&client, "cronjob").await;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let recorded: Api<Event> = Api::namespaced(client.clone(), &ns);
    cronjobs
        .create(&PostParams::default(), &cronjob("forbid", "Forbid", 1))
        .await
        .unwrap();

    let first = wait_for(CONVERGE, "the first Job", || async {
        jobs_of(&jobs).await.into_iter().next()
    })
    .await;
    // Two later schedule minutes held back by the active Job (one Event, counted twice).
    wait_for(CONVERGE, "JobAlreadyActive twice", || async {
        events(&recorded, "forbid", "JobAlreadyActive")
            .await
            .into_iter()
            .find(|e| e.count.unwrap_or(1) >= 2)
    })
    .await;
    let names: Vec<String> = jobs_of(&jobs).await.iter().map(|j| j.name_any()).collect();
    assert_eq!(names, [first.name_any()], "Forbid started a second Job");

    // Completing the Job lets the skipped run start late, in the same sync that saw the completion.
    let done_at = Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap());
    jobs.patch_status(
        &first.name_any(),
        &PatchParams::default(),
        &Patch::Merge(complete(&done_at)),
    )
    .await
    .unwrap();
    let second = wait_for(CONVERGE, "the second Job", || async {
        jobs_of(&jobs)
            .await
            .into_iter()
            .find(|j| j.name_any() != first.name_any())
    })
    .await;
    let status = wait_for(CONVERGE, "the status to see the completion", || async {
        let status = cronjobs.get("forbid").await.unwrap().status?;
        let active: Vec<String> = status
            .active
            .iter()
            .flatten()
            .filter_map(|r| r.name.clone())
            .collect();
        (active == [second.name_any()]).then_some(status)
    })
    .await;
    assert_eq!(status.last_successful_time, Some(done_at.clone()));
    let saw = events(&recorded, "forbid", "SawCompletedJob").await;
    assert_eq!(
        saw.first().and_then(|e| e.message.clone()),
        Some(format!(
            "Saw completed job: {}, condition: Complete",
            first.name_any()
        ))
    );

    // A second completed Job exceeds successfulJobsHistoryLimit 1: the older one goes.
    let later = Time(Timestamp::from_second(done_at.0.as_second() + 1).unwrap());
    jobs.patch_status(
        &second.name_any(),
        &PatchParams::default(),
        &Patch::Merge(complete(&later)),
    )
    .await
    .unwrap();
    wait_for(
        CONVERGE,
        "the oldest completed Job to be deleted",
        || async {
            let names: Vec<String> = jobs_of(&jobs).await.iter().map(|j| j.name_any()).collect();
            (!names.contains(&first.name_any())).then_some(())
        },
    )
    .await;
    let names: Vec<String> = jobs_of(&jobs).await.iter().map(|j| j.name_any()).collect();
    assert!(
        names.contains(&second.name_any()),
        "the newest completed Job is kept: {names:?}"
    );
    let deleted = events(&recorded, "forbid", "SuccessfulDelete").await;
    assert_eq!(
        deleted.first().and_then(|e| e.message.clone()),
        Some(format!("Deleted job {}", first.name_any()))
    );
}
