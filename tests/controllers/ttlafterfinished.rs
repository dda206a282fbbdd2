//! The `ttl-after-finished` controller: a Job that finished (Complete or Failed) is deleted, with
//! foreground propagation, once `ttlSecondsAfterFinished` has passed since it finished — not before —
//! while an unfinished Job and a finished Job without a TTL are kept. The Jobs are finished by
//! patching their status, as a job controller would; the garbage collector runs beside so the
//! foreground deletion completes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::watch::{RawWatch, event_name, event_type};

const CONVERGE: Duration = Duration::from_secs(60);

/// A suspended Job (so no job controller runs pods for it) with `ttl` seconds after finished.
fn job(name: &str, ttl: Option<i32>) -> Job {
    let mut spec = json!({
        "suspend": true,
        "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        }},
    });
    if let Some(ttl) = ttl {
        spec["ttlSecondsAfterFinished"] = json!(ttl);
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// The status a job controller writes when the Job finished at `at`: Complete (with
/// SuccessCriteriaMet, as kube-apiserver requires since v1.31) or Failed (with FailureTarget).
fn finished(at: &Time, complete: bool) -> Value {
    if complete {
        json!({"status": {
            "startTime": at, "completionTime": at, "succeeded": 1,
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": at,
                 "lastProbeTime": at, "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"},
                {"type": "Complete", "status": "True", "lastTransitionTime": at,
                 "lastProbeTime": at, "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"},
            ],
        }})
    } else {
        json!({"status": {
            "startTime": at, "failed": 1,
            "conditions": [
                {"type": "FailureTarget", "status": "True", "lastTransitionTime": at,
                 "lastProbeTime": at, "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"},
                {"type": "Failed", "status": "True", "lastTransitionTime": at,
                 "lastProbeTime": at, "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"},
            ],
        }})
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn finished_jobs_are_deleted_once_their_ttl_has_passed_and_others_are_kept() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let (_fleet, _procs) =
        Fleet::of_controllers(&cluster, "ttl-after-finished,garbagecollector", 2).await;
    let ns = unique_namespace(&client, "ttl").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let mut watch = RawWatch::open(
        &client,
        &format!("/apis/batch/v1/namespaces/{ns}/jobs?watch=true"),
    )
    .await;

    // (name, TTL, finished as Complete / Failed / not at all)
    let cases = [
        ("complete", Some(2), Some(true)),
        ("failed", Some(1), Some(false)),
        ("running", Some(1), None),
        ("no-ttl", None, Some(true)),
    ];
    for (name, ttl, _) in cases {
        jobs.create(&PostParams::default(), &job(name, ttl))
            .await
            .unwrap();
    }
    // Whole seconds, as the API stores them, so the expiry is exact.
    let at = Time(Timestamp::now());
    let at_secs = Timestamp::from_second(at.0.as_second()).unwrap();
    for (name, _, finish) in cases {
        if let Some(complete) = finish {
            jobs.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(finished(&at, complete)),
            )
            .await
            .unwrap();
        }
    }

    // Each expiring Job: when its deletion started (deletionTimestamp) and with which finalizers.
    let mut deletions: BTreeMap<String, Value> = BTreeMap::new();
    let mut gone = 0;
    while gone < 2 {
        let event = watch
            .next_matching(CONVERGE, "the finished Jobs' deletion", |e| {
                matches!(event_type(e), "MODIFIED" | "DELETED")
            })
            .await;
        let name = event_name(&event).to_owned();
        if !event["object"]["metadata"]["deletionTimestamp"].is_null() {
            deletions
                .entry(name.clone())
                .or_insert_with(|| event["object"]["metadata"].clone());
        }
        if event_type(&event) == "DELETED" {
            assert!(
                name == "complete" || name == "failed",
                "{name} was deleted but should be kept"
            );
            gone += 1;
        }
    }
    for (name, ttl) in [("complete", 2), ("failed", 1)] {
        let meta = deletions
            .get(name)
            .unwrap_or_else(|| panic!("{name} was deleted without a deletionTimestamp first"));
        let started: Timestamp = meta["deletionTimestamp"].as_str().unwrap().parse().unwrap();
        assert!(
            started.as_second() >= at_secs.as_second() + ttl,
            "{name} finished at {at_secs} with a TTL of {ttl} s but its deletion started at {started}"
        );
        assert!(
            meta["finalizers"]
                .as_array()
                .is_some_and(|f| f.contains(&json!("foregroundDeletion"))),
            "{name} deleted with foreground propagation: {meta}"
        );
    }
    // The others outlived the longest TTL, and the controller looked at them when they changed.
    for name in ["running", "no-ttl"] {
        let kept = jobs.get(name).await.unwrap();
        assert!(
            kept.metadata.deletion_timestamp.is_none(),
            "{name} is being deleted but should be kept"
        );
    }
}
