//! batch/v1 validation (upstream `pkg/apis/batch/validation`): what a Job or CronJob must hold on
//! create, and which Job fields may not change. Jobs are created suspended so that a real cluster's
//! job controller starts no pods while the test edits them.

use serde_json::{Value, json};

use super::common::{create, get_ok, setup};
use crate::support::raw;

const MERGE: &str = "application/merge-patch+json";

fn jobs(ns: &str) -> String {
    format!("/apis/batch/v1/namespaces/{ns}/jobs")
}

fn cronjobs(ns: &str) -> String {
    format!("/apis/batch/v1/namespaces/{ns}/cronjobs")
}

/// A suspended Job whose pods run `restart_policy` (none when `None`), with `spec` merged in.
fn job(name: &str, restart_policy: Option<&str>, spec: Value) -> Value {
    let mut pod_spec = json!({"containers": [{"name": "c", "image": "busybox:1.36"}]});
    if let Some(policy) = restart_policy {
        pod_spec["restartPolicy"] = json!(policy);
    }
    let mut job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"suspend": true, "template": {"spec": pod_spec}},
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        job["spec"][k] = v.clone();
    }
    job
}

fn cronjob(name: &str, spec: Value) -> Value {
    let mut cronjob = json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": "*/5 * * * *",
            "suspend": true,
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": "c", "image": "busybox:1.36"}],
            }}}},
        },
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        cronjob["spec"][k] = v.clone();
    }
    cronjob
}

/// The causes of a 422 Status.
fn causes(status: &Value) -> Vec<Value> {
    status["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Asserts that a cause names `field` with a message ending in `ending`.
#[track_caller]
fn assert_cause(status: &Value, field: &str, ending: &str) {
    let found = causes(status)
        .into_iter()
        .any(|c| c["field"] == field && c["message"].as_str().is_some_and(|m| m.ends_with(ending)));
    assert!(found, "no cause {field}: …{ending} in {status}");
}

#[tokio::test]
async fn jobs_need_a_terminating_restart_policy_and_keep_selector_and_completions() {
    let (_cluster, client, ns) = setup("batch-job").await;

    // A pod template that would restart forever is refused with upstream's cause.
    let status = raw::post(&client, &jobs(&ns), &job("forever", None, json!({})))
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        status["message"],
        "Job.batch \"forever\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
    );
    assert_eq!(
        causes(&status),
        vec![json!({
            "reason": "FieldValueRequired",
            "message": "Required value: valid values: \"OnFailure\", \"Never\"",
            "field": "spec.template.spec.restartPolicy",
        })]
    );
    let status = raw::post(
        &client,
        &jobs(&ns),
        &job("always", Some("Always"), json!({})),
    )
    .await
    .expect_status(422, "Invalid");
    assert_cause(
        &status,
        "spec.template.spec.restartPolicy",
        "Required value: valid values: \"OnFailure\", \"Never\"",
    );

    // The selector and (for a NonIndexed Job) completions may not change.
    create(&client, &jobs(&ns), &job("once", Some("Never"), json!({}))).await;
    let path = format!("{}/once", jobs(&ns));
    let selector = json!({"spec": {"selector": {"matchLabels": {"extra": "x"}}}});
    let status = raw::patch(&client, &path, MERGE, &selector)
        .await
        .expect_status(422, "Invalid");
    assert_cause(&status, "spec.selector", ": field is immutable");
    let status = raw::patch(&client, &path, MERGE, &json!({"spec": {"completions": 2}}))
        .await
        .expect_status(422, "Invalid");
    assert_cause(
        &status,
        "spec.completions",
        "Invalid value: 2: field is immutable",
    );
    // Parallelism is not one of them.
    let scaled = raw::patch(&client, &path, MERGE, &json!({"spec": {"parallelism": 3}}))
        .await
        .expect_ok(200);
    assert_eq!(scaled["spec"]["parallelism"], 3);
}

#[tokio::test]
async fn an_indexed_job_changes_completions_only_together_with_parallelism() {
    let (_cluster, client, ns) = setup("batch-elastic").await;
    let indexed = json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3});
    create(&client, &jobs(&ns), &job("shards", Some("Never"), indexed)).await;
    let path = format!("{}/shards", jobs(&ns));

    let both = json!({"spec": {"completions": 5, "parallelism": 5}});
    raw::patch(&client, &path, MERGE, &both)
        .await
        .expect_ok(200);
    let stored = get_ok(&client, &path).await;
    assert_eq!(stored["spec"]["completions"], 5);
    assert_eq!(stored["spec"]["parallelism"], 5);

    let alone = json!({"spec": {"completions": 4}});
    let status = raw::patch(&client, &path, MERGE, &alone)
        .await
        .expect_status(422, "Invalid");
    assert_cause(
        &status,
        "spec.completions",
        "Invalid value: 4: can only be modified in tandem with spec.parallelism",
    );
}

#[tokio::test]
async fn a_cronjob_needs_a_parseable_schedule_and_a_known_time_zone() {
    let (_cluster, client, ns) = setup("batch-cron").await;

    let bad_schedule = cronjob("minute61", json!({"schedule": "61 * * * *"}));
    let status = raw::post(&client, &cronjobs(&ns), &bad_schedule)
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        causes(&status),
        vec![json!({
            "reason": "FieldValueInvalid",
            "message": "Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61",
            "field": "spec.schedule",
        })]
    );
    let few_fields = cronjob("three", json!({"schedule": "* * *"}));
    let status = raw::post(&client, &cronjobs(&ns), &few_fields)
        .await
        .expect_status(422, "Invalid");
    assert_cause(
        &status,
        "spec.schedule",
        "expected exactly 5 fields, found 3: [* * *]",
    );

    let bad_zone = cronjob("mars", json!({"timeZone": "Mars/Olympus_Mons"}));
    let status = raw::post(&client, &cronjobs(&ns), &bad_zone)
        .await
        .expect_status(422, "Invalid");
    assert_cause(
        &status,
        "spec.timeZone",
        "Invalid value: \"Mars/Olympus_Mons\": unknown time zone Mars/Olympus_Mons",
    );

    let in_schedule = cronjob("tz", json!({"schedule": "TZ=UTC 0 * * * *"}));
    let status = raw::post(&client, &cronjobs(&ns), &in_schedule)
        .await
        .expect_status(422, "Invalid");
    assert_cause(
        &status,
        "spec.schedule",
        "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
    );

    let berlin = cronjob(
        "berlin",
        json!({"schedule": "@daily", "timeZone": "Europe/Berlin"}),
    );
    let created = create(&client, &cronjobs(&ns), &berlin).await;
    assert_eq!(created["spec"]["timeZone"], "Europe/Berlin");
}
