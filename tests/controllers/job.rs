//! The `job` controller on simulated nodes, against what kube-controller-manager v1.32 writes
//! (`kube-fixtures/kcm-v1.32/job/`): a NonIndexed Job of 3 completions, 2 at a time, completes with
//! KCM's status, conditions and Events; an Indexed Job's pods carry their completion index
//! (annotation, label, hostname, variable); a Job whose pods keep failing waits out the pod-failure
//! backoff and ends Failed past its backoffLimit; suspend, activeDeadlineSeconds, podFailurePolicy,
//! backoffLimitPerIndex, successPolicy and adoption do what upstream's do; and a Job whose workers are killed with SIGKILL, one
//! after the other, while its pods finish counts every finished pod exactly once.
//!
//! On devcluster a pod of restartPolicy Never succeeds about a second after it runs and a pod whose
//! image ends in `:fail` fails (the node simulator); on a real cluster (`FLOTILLA_TEST_KUBECONFIG`)
//! the pods run busybox commands that succeed, and the tests that need failing pods skip.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(90);
const FINALIZER: &str = "batch.kubernetes.io/job-tracking";
const INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// A Job `name` of `completions` pods, `parallelism` at a time, restartPolicy Never; its pods fail
/// when `fail`.
fn job(cluster: &TestCluster, name: &str, completions: i32, parallelism: i32, fail: bool) -> Value {
    // Failing pods need the node simulator (tests that use them skip elsewhere): it fails a pod whose
    // image ends in `:fail`.
    let (image, command) = match (cluster.is_devcluster(), fail) {
        (_, true) => ("registry.k8s.io/busybox:fail", "exit 1"),
        (true, false) => ("registry.k8s.io/busybox:1.36", "sleep 1"),
        (false, false) => ("registry.k8s.io/busybox:1.36", "sleep 2"),
    };
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "work", "image": image, "command": ["sh", "-c", command]}],
            }},
        },
    })
}

async fn create(jobs: &Api<Job>, job: Value) -> Job {
    jobs.create(
        &PostParams::default(),
        &serde_json::from_value(job).unwrap(),
    )
    .await
    .unwrap()
}

fn condition<'a>(
    status: &'a JobStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// Waits for the Job's terminal condition `type_` and returns its status.
async fn finished(jobs: &Api<Job>, name: &str, type_: &str) -> JobStatus {
    wait_for(CONVERGE, &format!("Job {name} to be {type_}"), || async {
        let status = jobs.get(name).await.ok()?.status?;
        condition(&status, type_)?;
        Some(status)
    })
    .await
}

/// The pods the Job `uid` controls.
async fn pods_of(pods: &Api<Pod>, uid: &str) -> Vec<Pod> {
    let list = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")))
        .await
        .unwrap();
    list.items
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Every status the Job `name` is seen with, from a watch started now.
fn record_statuses(
    jobs: Api<Job>,
    name: &str,
) -> (Arc<Mutex<Vec<JobStatus>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let task = tokio::spawn(async move {
        let Ok(stream) = jobs.watch(&params, "0").await else {
            return;
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(event)) = stream.next().await {
            if let WatchEvent::Added(job) | WatchEvent::Modified(job) = event {
                sink.lock().extend(job.status);
            }
        }
    });
    (seen, task)
}

/// The Events about `object`, as (type, reason, message).
async fn events_of(events: &Api<Event>, object: &str) -> Vec<(String, String, String)> {
    let list = events.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(object))
        .map(|e| {
            assert_eq!(
                e.source.as_ref().and_then(|s| s.component.as_deref()),
                Some("job-controller")
            );
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until `job` has the Warning Event `reason` with `message`.
async fn wait_for_warning(events: &Api<Event>, job: &str, reason: &str, message: &str) {
    let wanted = ("Warning".to_owned(), reason.to_owned(), message.to_owned());
    wait_for(CONVERGE, &format!("{job}'s {reason} Event"), || async {
        events_of(events, job).await.contains(&wanted).then_some(())
    })
    .await;
}

async fn fleet(cluster: &TestCluster, workers: usize) -> (Fleet, Vec<Proc>) {
    Fleet::of_controllers(cluster, "job", workers).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_indexed_job_runs_its_completions_two_at_a_time_and_completes_as_kcm_does() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, 2).await;
    let ns = unique_namespace(&client, "job").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let (seen, watcher) = record_statuses(jobs.clone(), "nonindexed");

    let created = create(&jobs, job(&cluster, "nonindexed", 3, 2, false)).await;
    let uid = created.uid().unwrap();
    let status = finished(&jobs, "nonindexed", "Complete").await;

    // KCM's final status (15-nonindexed-job-complete.json).
    assert_eq!(status.succeeded, Some(3));
    assert_eq!((status.active, status.failed), (None, None));
    assert_eq!((status.ready, status.terminating), (Some(0), Some(0)));
    let uncounted = status.uncounted_terminated_pods.clone().unwrap();
    assert_eq!((uncounted.succeeded, uncounted.failed), (None, None));
    assert!(status.start_time.is_some());
    let types: Vec<&str> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
    for c in status.conditions.iter().flatten() {
        assert_eq!(c.reason.as_deref(), Some("CompletionsReached"));
        assert_eq!(
            c.message.as_deref(),
            Some("Reached expected number of succeeded pods")
        );
        assert_eq!(c.last_probe_time, c.last_transition_time);
    }
    let complete = condition(&status, "Complete").unwrap();
    assert_eq!(status.completion_time, complete.last_transition_time);

    // Never more than parallelism active, each success recorded uncounted before it is counted.
    let history = seen.lock().clone();
    assert!(
        history.iter().all(|s| s.active.unwrap_or(0) <= 2),
        "{history:#?}"
    );
    assert!(
        history.iter().all(|s| s.succeeded.unwrap_or(0) <= 3),
        "{history:#?}"
    );
    assert!(
        history.iter().any(|s| s
            .uncounted_terminated_pods
            .as_ref()
            .is_some_and(|u| u.succeeded.as_ref().is_some_and(|l| !l.is_empty()))),
        "no success went through uncountedTerminatedPods: {history:#?}"
    );
    watcher.abort();

    // The pods (16-nonindexed-pods-final.json): generateName, labels, owner, finalizer gone.
    let pods = pods_of(&pods, &uid).await;
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("nonindexed-"));
        let labels = pod.labels();
        assert_eq!(labels["batch.kubernetes.io/controller-uid"], uid);
        assert_eq!(labels["controller-uid"], uid);
        assert_eq!(labels["batch.kubernetes.io/job-name"], "nonindexed");
        assert_eq!(labels["job-name"], "nonindexed");
        let owner = &pod.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Job", uid.as_str())
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert!(!pod.finalizers().iter().any(|f| f == FINALIZER));
        assert_eq!(phase(pod), Some("Succeeded"));
        assert!(pod.annotations().get(INDEX).is_none());
    }

    // The Events (17-events-nonindexed.json).
    let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    let expected: Vec<(String, String, String)> = names
        .iter()
        .map(|n| {
            (
                "Normal".into(),
                "SuccessfulCreate".into(),
                format!("Created pod: {n}"),
            )
        })
        .chain([("Normal".into(), "Completed".into(), "Job completed".into())])
        .collect();
    let got = wait_for(CONVERGE, "the Job's four Events", || async {
        let mut got = events_of(&events, "nonindexed").await;
        got.sort();
        (got.len() >= expected.len()).then_some(got)
    })
    .await;
    let mut expected = expected;
    expected.sort();
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_indexed_job_gives_each_pod_its_completion_index() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, 2).await;
    let ns = unique_namespace(&client, "job-indexed").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let mut spec = job(&cluster, "indexed", 3, 3, false);
    spec["spec"]["completionMode"] = json!("Indexed");
    let uid = create(&jobs, spec).await.uid().unwrap();
    let status = finished(&jobs, "indexed", "Complete").await;
    assert_eq!(status.succeeded, Some(3));
    assert_eq!(status.completed_indexes.as_deref(), Some("0-2"));
    assert_eq!(status.failed, None);

    let pods = pods_of(&pods, &uid).await;
    let mut indexes: Vec<String> = Vec::new();
    for pod in &pods {
        let ix = pod.annotations()[INDEX].clone();
        assert_eq!(
            pod.labels()[INDEX],
            ix,
            "the index label matches the annotation"
        );
        assert_eq!(
            pod.metadata.generate_name.as_deref(),
            Some(format!("indexed-{ix}-").as_str())
        );
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.hostname.as_deref(),
            Some(format!("indexed-{ix}").as_str())
        );
        let env = spec.containers[0].env.as_ref().unwrap();
        let var = env
            .iter()
            .find(|e| e.name == "JOB_COMPLETION_INDEX")
            .unwrap();
        let field = var.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
        assert_eq!(field.field_path, format!("metadata.labels['{INDEX}']"));
        assert!(!pod.finalizers().iter().any(|f| f == FINALIZER));
        indexes.push(ix);
    }
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2"], "one pod per index, none twice");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_whose_pods_keep_failing_backs_off_and_fails_past_its_backoff_limit() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    crate::skip_unless_devcluster!(
        cluster,
        "failing pods come from the node simulator, and a real scheduler may place them on real nodes"
    );
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, 2).await;
    let ns = unique_namespace(&client, "job-fail").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    let mut spec = job(&cluster, "failing", 1, 1, true);
    spec["spec"]["backoffLimit"] = json!(1);
    let uid = create(&jobs, spec).await.uid().unwrap();
    let status = finished(&jobs, "failing", "Failed").await;
    assert_eq!(
        status.failed,
        Some(2),
        "backoffLimit 1: the second failure fails the Job"
    );
    assert_eq!((status.active, status.succeeded), (None, None));
    assert_eq!(status.completion_time, None);
    for type_ in ["FailureTarget", "Failed"] {
        let c = condition(&status, type_).unwrap();
        assert_eq!(c.reason.as_deref(), Some("BackoffLimitExceeded"));
        assert_eq!(
            c.message.as_deref(),
            Some("Job has reached the specified backoff limit")
        );
    }

    // The replacement waited out the 10 s backoff after the first failure (timestamps have
    // second precision, hence the 1 s of slack).
    let mut pods = pods_of(&pods, &uid).await;
    assert_eq!(pods.len(), 2);
    pods.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
    assert!(pods.iter().all(|p| phase(p) == Some("Failed")));
    let first_failed = pods[0]
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| {
            cs[0]
                .state
                .as_ref()?
                .terminated
                .as_ref()?
                .finished_at
                .clone()
        })
        .map(|t| t.0)
        .or(pods[0].metadata.creation_timestamp.clone().map(|t| t.0))
        .unwrap();
    let replaced = pods[1].metadata.creation_timestamp.clone().unwrap().0;
    let waited = replaced.duration_since(first_failed).as_secs();
    assert!(
        waited >= 9,
        "the replacement came {waited} s after the failure"
    );

    let got = wait_for(CONVERGE, "the BackoffLimitExceeded Event", || async {
        let got = events_of(&events, "failing").await;
        got.iter()
            .any(|(_, reason, _)| reason == "BackoffLimitExceeded")
            .then_some(got)
    })
    .await;
    assert!(got.contains(&(
        "Warning".into(),
        "BackoffLimitExceeded".into(),
        "Job has reached the specified backoff limit".into()
    )));
}

#[tokio::test(flavor = "multi_thread")]
async fn every_finished_pod_is_counted_once_when_the_worker_dies_while_pods_finish() {
    let cluster = TestCluster::builder().with_nodes(3).start().await;
    let client = cluster.client();
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let mut procs = vec![fleet.coordinator("c0", &[])];
    procs.push(fleet.worker("flotilla", "w0", &["worker", "--controllers", "job"]));
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    let ns = unique_namespace(&client, "job-kill").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let (seen, watcher) = record_statuses(jobs.clone(), "survivor");

    const COMPLETIONS: i32 = 12;
    let uid = create(&jobs, job(&cluster, "survivor", COMPLETIONS, 4, false))
        .await
        .uid()
        .unwrap();
    // The first success is being accounted for: the only worker dies with whatever it holds, while
    // the other pods go on finishing.
    wait_for(CONVERGE, "the first success to be recorded", || async {
        let status = jobs.get("survivor").await.ok()?.status?;
        let uncounted = status.uncounted_terminated_pods.unwrap_or_default();
        let recorded = status.succeeded.unwrap_or(0)
            + i32::try_from(uncounted.succeeded.unwrap_or_default().len()).ok()?;
        (recorded > 0).then_some(())
    })
    .await;
    procs[1].kill9().await;
    // Let pods finish while no worker runs: their finalizers keep them uncounted, not lost.
    wait_for(CONVERGE, "more pods to finish with no worker", || async {
        let done = pods_of(&pods, &uid)
            .await
            .iter()
            .filter(|p| phase(p) == Some("Succeeded"))
            .count();
        (done >= 4).then_some(())
    })
    .await;
    procs.push(fleet.worker("flotilla", "w1", &["worker", "--controllers", "job"]));

    // Its successor dies too, the moment it starts accounting again: whatever it held mid-sync is
    // taken over by a third worker.
    wait_for(
        CONVERGE,
        "the survivor's successor to record a success",
        || async {
            let status = jobs.get("survivor").await.ok()?.status?;
            (status.succeeded.unwrap_or(0) > 1
                || status
                    .uncounted_terminated_pods
                    .is_some_and(|u| u.succeeded.is_some_and(|l| !l.is_empty())))
            .then_some(())
        },
    )
    .await;
    procs[2].kill9().await;
    procs.push(fleet.worker("flotilla", "w2", &["worker", "--controllers", "job"]));

    let status = finished(&jobs, "survivor", "Complete").await;
    assert_eq!(status.succeeded, Some(COMPLETIONS), "{status:#?}");
    assert_eq!(status.failed, None);
    let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
    assert_eq!((uncounted.succeeded, uncounted.failed), (None, None));

    let history = seen.lock().clone();
    watcher.abort();
    for s in &history {
        let uncounted = s.uncounted_terminated_pods.clone().unwrap_or_default();
        let recorded = s.succeeded.unwrap_or(0)
            + i32::try_from(uncounted.succeeded.unwrap_or_default().len()).unwrap();
        assert!(recorded <= COMPLETIONS, "a pod was counted twice: {s:#?}");
    }
    let pods = pods_of(&pods, &uid).await;
    let succeeded = pods
        .iter()
        .filter(|p| phase(p) == Some("Succeeded"))
        .count();
    assert_eq!(
        succeeded,
        usize::try_from(COMPLETIONS).unwrap(),
        "one pod per completion"
    );
    assert!(
        pods.iter()
            .all(|p| !p.finalizers().iter().any(|f| f == FINALIZER)),
        "every finished pod was released"
    );
    drop(fleet);
}

/// A cluster whose simulated Job pods run for ten minutes (long enough to be suspended or to outlive a
/// deadline); on a real cluster the pods sleep as long.
async fn slow_cluster() -> TestCluster {
    let sim = flotilla_devcluster::SimConfig {
        nodes: 2,
        job_pod_duration: Duration::from_secs(600),
        ..flotilla_devcluster::SimConfig::default()
    };
    TestCluster::builder().with_sim_config(sim).start().await
}

fn slow_job(name: &str, completions: i32, parallelism: i32) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "work", "image": "registry.k8s.io/busybox:1.36",
                    "command": ["sh", "-c", "sleep 600"]}],
            }},
        },
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_suspended_job_runs_nothing_until_resumed_and_suspending_it_deletes_its_pods() {
    let cluster = slow_cluster().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, 2).await;
    let ns = unique_namespace(&client, "job-suspend").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    // Created suspended (57-suspended-job-created-suspended.json): no pods, no startTime.
    let mut spec = slow_job("paused", 2, 2);
    spec["spec"]["suspend"] = json!(true);
    let uid = create(&jobs, spec).await.uid().unwrap();
    let status = wait_for(CONVERGE, "Job paused to say Suspended", || async {
        let status = jobs.get("paused").await.ok()?.status?;
        condition(&status, "Suspended")?;
        Some(status)
    })
    .await;
    let suspended = condition(&status, "Suspended").unwrap();
    assert_eq!(suspended.reason.as_deref(), Some("JobSuspended"));
    assert_eq!(suspended.message.as_deref(), Some("Job suspended"));
    assert_eq!(status.start_time, None);
    assert_eq!(
        (status.active, status.ready, status.terminating),
        (None, Some(0), Some(0))
    );
    assert!(pods_of(&pods, &uid).await.is_empty());

    // Resumed (60-suspended-job-resumed.json): the condition flips in place, startTime is set.
    let resume = json!({"spec": {"suspend": false}});
    jobs.patch(
        "paused",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&resume),
    )
    .await
    .unwrap();
    let status = wait_for(CONVERGE, "Job paused to run 2 pods", || async {
        let status = jobs.get("paused").await.ok()?.status?;
        (status.active == Some(2)).then_some(status)
    })
    .await;
    let conditions = status.conditions.clone().unwrap();
    assert_eq!(conditions.len(), 1);
    assert_eq!(
        (
            conditions[0].status.as_str(),
            conditions[0].reason.as_deref()
        ),
        ("False", Some("JobResumed"))
    );
    assert!(status.start_time.is_some());

    // Suspended again (71-resuspend-job-suspending.json): the active pods are deleted, not counted
    // as failures.
    let suspend = json!({"spec": {"suspend": true}});
    jobs.patch(
        "paused",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&suspend),
    )
    .await
    .unwrap();
    let status = wait_for(
        CONVERGE,
        "Job paused to be suspended with no pod left",
        || async {
            let status = jobs.get("paused").await.ok()?.status?;
            let left = pods_of(&pods, &uid)
                .await
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            (condition(&status, "Suspended").is_some()
                && status.active.is_none()
                && status.terminating == Some(0)
                && left == 0)
                .then_some(status)
        },
    )
    .await;
    assert_eq!((status.failed, status.succeeded), (None, None));
    // The second "Job suspended" repeats the first: one Event, its count raised.
    let got = wait_for(CONVERGE, "the suspension Events", || async {
        let got = events_of(&events, "paused").await;
        let reasons: Vec<&str> = got.iter().map(|(_, r, _)| r.as_str()).collect();
        (reasons.contains(&"Suspended")
            && reasons.contains(&"Resumed")
            && reasons.iter().filter(|r| **r == "SuccessfulDelete").count() == 2)
            .then_some(got)
    })
    .await;
    assert!(got.contains(&("Normal".into(), "Resumed".into(), "Job resumed".into())));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_running_past_its_active_deadline_fails_and_its_pods_are_deleted() {
    let cluster = slow_cluster().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, 2).await;
    let ns = unique_namespace(&client, "job-deadline").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    let mut spec = slow_job("late", 2, 2);
    spec["spec"]["activeDeadlineSeconds"] = json!(3);
    let uid = create(&jobs, spec).await.uid().unwrap();
    // Nothing changes when the deadline passes: only the requeue the controller asked for wakes it.
    let status = finished(&jobs, "late", "Failed").await;
    for type_ in ["FailureTarget", "Failed"] {
        let c = condition(&status, type_).unwrap();
        assert_eq!(c.reason.as_deref(), Some("DeadlineExceeded"));
        assert_eq!(
            c.message.as_deref(),
            Some("Job was active longer than specified deadline")
        );
    }
    assert_eq!(
        status.failed,
        Some(2),
        "the pods it stopped count as failed, as upstream"
    );
    assert_eq!((status.active, status.terminating), (None, Some(0)));
    let started = status.start_time.clone().unwrap().0;
    let failed_at = condition(&status, "FailureTarget")
        .unwrap()
        .last_transition_time
        .clone()
        .unwrap()
        .0;
    let after = failed_at.duration_since(started).as_secs();
    assert!(
        (3..=10).contains(&after),
        "failed {after} s after it started"
    );
    wait_for(CONVERGE, "the Job's pods to be gone", || async {
        pods_of(&pods, &uid)
            .await
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    wait_for_warning(
        &events,
        "late",
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_failure_policy_fails_the_job_on_a_fail_job_rule_and_ignores_what_it_ignores() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    crate::skip_unless_devcluster!(
        cluster,
        "failing pods come from the node simulator, and a real scheduler may place them on real nodes"
    );
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, 2).await;
    let ns = unique_namespace(&client, "job-pfp").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // FailJob on exit code 1: the first failure fails the Job, whatever its backoffLimit.
    let mut spec = job(&cluster, "doomed", 1, 1, true);
    spec["spec"]["podFailurePolicy"] = json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "work", "operator": "In", "values": [1]}},
    ]});
    let doomed = create(&jobs, spec).await.uid().unwrap();
    let status = finished(&jobs, "doomed", "Failed").await;
    let pod = pods_of(&pods, &doomed).await.remove(0);
    let message = format!(
        "Container work for pod {ns}/{} failed with exit code 1 matching FailJob rule at index 0",
        pod.name_any()
    );
    for type_ in ["FailureTarget", "Failed"] {
        let c = condition(&status, type_).unwrap();
        assert_eq!(c.reason.as_deref(), Some("PodFailurePolicy"));
        assert_eq!(c.message.as_deref(), Some(message.as_str()));
    }
    assert_eq!(status.failed, Some(1));

    // Ignore on exit code 1 (47-pfp-job-after-ignored-failure.json): the failure is not counted,
    // even with backoffLimit 0, and the pod is replaced after the backoff.
    let mut spec = job(&cluster, "tolerant", 1, 1, true);
    spec["spec"]["backoffLimit"] = json!(0);
    spec["spec"]["podFailurePolicy"] = json!({"rules": [
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}},
    ]});
    let tolerant = create(&jobs, spec).await.uid().unwrap();
    wait_for(
        CONVERGE,
        "the ignored failure's pod to be replaced",
        || async { (pods_of(&pods, &tolerant).await.len() >= 2).then_some(()) },
    )
    .await;
    let status = jobs.get("tolerant").await.unwrap().status.unwrap();
    assert_eq!(status.failed, None, "{status:#?}");
    assert!(
        condition(&status, "Failed").is_none() && condition(&status, "FailureTarget").is_none()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_indexed_job_with_a_backoff_limit_per_index_fails_its_indexes_then_itself() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    crate::skip_unless_devcluster!(
        cluster,
        "failing pods come from the node simulator, and a real scheduler may place them on real nodes"
    );
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, 2).await;
    let ns = unique_namespace(&client, "job-per-index").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    // Every pod fails: each index is retried once (backoffLimitPerIndex 1), then fails.
    let mut spec = job(&cluster, "retried", 3, 3, true);
    spec["spec"]["completionMode"] = json!("Indexed");
    spec["spec"]["backoffLimitPerIndex"] = json!(1);
    let uid = create(&jobs, spec).await.uid().unwrap();
    let status = finished(&jobs, "retried", "Failed").await;
    // 32/36-indexed-job-*.json: failedIndexes, the failures counted, FailureTarget then Failed.
    assert_eq!(status.failed_indexes.as_deref(), Some("0-2"));
    assert_eq!(status.failed, Some(6));
    assert_eq!(
        (status.succeeded, status.completed_indexes.as_deref()),
        (None, None)
    );
    for type_ in ["FailureTarget", "Failed"] {
        let c = condition(&status, type_).unwrap();
        assert_eq!(c.reason.as_deref(), Some("FailedIndexes"));
        assert_eq!(c.message.as_deref(), Some("Job has failed indexes"));
    }

    let pods = pods_of(&pods, &uid).await;
    assert_eq!(pods.len(), 6, "two pods per index");
    for ix in ["0", "1", "2"] {
        let mut counts: Vec<String> = pods
            .iter()
            .filter(|p| p.annotations()[INDEX] == ix)
            .map(|p| p.annotations()["batch.kubernetes.io/job-index-failure-count"].clone())
            .collect();
        counts.sort();
        assert_eq!(
            counts,
            ["0", "1"],
            "index {ix}: the retry carries the failure count"
        );
    }
    assert!(
        pods.iter()
            .all(|p| !p.finalizers().iter().any(|f| f == FINALIZER))
    );
    wait_for_warning(
        &events,
        "retried",
        "FailedIndexes",
        "Job has failed indexes",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orphan_pod_matching_a_jobs_selector_is_adopted_tracked_and_counted() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, 2).await;
    let ns = unique_namespace(&client, "job-adopt").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // A pod that already did the work, labelled as a hand-written selector selects.
    let stray: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stray", "labels": {"work": "adopted"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "work",
            "image": "registry.k8s.io/busybox:1.36", "command": ["sh", "-c", "sleep 1"]}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &stray).await.unwrap();
    wait_for(CONVERGE, "the stray pod to succeed", || async {
        (phase(&pods.get("stray").await.ok()?) == Some("Succeeded")).then_some(())
    })
    .await;

    let mut spec = job(&cluster, "adopter", 1, 1, false);
    spec["spec"]["manualSelector"] = json!(true);
    spec["spec"]["selector"] = json!({"matchLabels": {"work": "adopted"}});
    spec["spec"]["template"]["metadata"] = json!({"labels": {"work": "adopted"}});
    let uid = create(&jobs, spec).await.uid().unwrap();
    let status = finished(&jobs, "adopter", "Complete").await;
    assert_eq!(
        status.succeeded,
        Some(1),
        "the adopted success counts: {status:#?}"
    );

    let adopted = pods.get("stray").await.unwrap();
    let owner = &adopted.owner_references()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (uid.as_str(), Some(true))
    );
    assert!(
        !adopted.finalizers().iter().any(|f| f == FINALIZER),
        "tracked on adoption, released once counted"
    );
    let all = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(
        all.len(),
        1,
        "no pod was created: the adopted one did the work"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_indexed_job_whose_success_policy_is_met_completes_early() {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = fleet(&cluster, 2).await;
    let ns = unique_namespace(&client, "job-success-policy").await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // One index at a time; index 0 alone is enough.
    let mut spec = job(&cluster, "leader", 3, 1, false);
    spec["spec"]["completionMode"] = json!("Indexed");
    spec["spec"]["successPolicy"] = json!({"rules": [{"succeededIndexes": "0"}]});
    let uid = create(&jobs, spec).await.uid().unwrap();
    let status = finished(&jobs, "leader", "Complete").await;
    for type_ in ["SuccessCriteriaMet", "Complete"] {
        let c = condition(&status, type_).unwrap();
        assert_eq!(c.reason.as_deref(), Some("SuccessPolicy"));
        assert_eq!(c.message.as_deref(), Some("Matched rules at index 0"));
    }
    assert_eq!(status.completed_indexes.as_deref(), Some("0"));
    assert_eq!(status.succeeded, Some(1));
    assert_eq!(
        pods_of(&pods, &uid).await.len(),
        1,
        "indexes 1 and 2 never ran"
    );
}
