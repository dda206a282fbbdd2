//! Traces across processes: an OTLP receiver inside the test (the collector's TraceService, served with
//! tonic) receives what a coordinator and a worker process export, and the test follows one object
//! change from the leader's watch event to the worker's API call, checks that coalesced events become
//! links of one reconcile, that a failed reconcile's retries stay in its trace, and that a sample ratio
//! of 0 exports nothing.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota};
use kube::api::{Api, PostParams};
use serde_json::json;

use super::common::{JOURNAL_LABEL, create_configmaps, touch};
use super::journal::read;
use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::unique_namespace;
use crate::support::otlp::{Received, Receiver, ancestry, hex, print_tree};
use crate::support::wait::wait_for;

/// Whether `s` is the root span of a watch event: its exported name says what happened
/// (`configmaps <ns>/<name> added`), so it is recognised by its attributes.
fn is_watch_event(s: &Received) -> bool {
    s.is_root() && s.attr("event").is_some() && s.attr("k8s.resource").is_some()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A coordinator and a fleet-probe worker running `controllers`, both exporting to `receiver`.
async fn traced_fleet(
    cluster: &TestCluster,
    receiver: &Receiver,
    ratio: &str,
    worker: impl FnOnce(&Fleet, &[&str]) -> Proc,
) -> (Fleet, Proc, Proc) {
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let flags = receiver.flags(ratio);
    let coordinator = fleet.coordinator("c0", &strs(&flags));
    let worker = worker(&fleet, &strs(&flags));
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    // An object created before the controller's caches synced arrives as its initial list, which
    // starts no trace: the tests' objects must be changes the fleet sees after it.
    wait_for(
        Duration::from_secs(60),
        "every informer of the fleet synced",
        || async {
            let s = fleet.status().await?;
            (!s.queues.is_empty()
                && !s.informers.is_empty()
                && s.informers.iter().all(|i| i.synced))
            .then_some(())
        },
    )
    .await;
    (fleet, coordinator, worker)
}

/// Waits for a successful API call `call` (a client span is named after its call: `create pods`) into
/// namespace `ns` whose parents reach up to a watch event; returns every span received by then and the
/// call's chain: the call, `reconcile`, `dispatch`, `enqueue`, `watch_event`.
async fn call_trace(
    receiver: &Receiver,
    call: &str,
    ns: &str,
    what: &str,
) -> (Vec<Received>, Vec<Received>) {
    wait_for(Duration::from_secs(60), what, || async {
        let spans = receiver.spans();
        let found = spans.iter().find(|s| {
            s.span.name == call
                && s.attr("code").is_some_and(|c| c.starts_with('2'))
                && s.attr("url.path")
                    .is_some_and(|p| p.contains(&format!("/namespaces/{ns}/")))
        })?;
        let chain: Vec<Received> = ancestry(&spans, found).into_iter().cloned().collect();
        let names: Vec<&str> = chain.iter().map(|s| s.span.name.as_str()).collect();
        (names.len() == 5
            && names[1..4] == ["reconcile", "dispatch", "enqueue"]
            && is_watch_event(&chain[4]))
        .then_some((spans.clone(), chain))
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn one_object_change_is_one_trace_from_the_leaders_watch_event_to_the_workers_api_call() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "tracing").await;
    let receiver = Receiver::start().await;
    let (_fleet, _coordinator, _worker) = traced_fleet(&cluster, &receiver, "1", |fleet, flags| {
        let mut args = vec!["--controllers", "one-child"];
        args.extend_from_slice(flags);
        fleet.worker("fleet-probe", "w0", &args)
    })
    .await;

    let parent: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "traced", "labels": {"flotilla.dev/probe": "parent"}},
    }))
    .expect("configmap");
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &parent)
        .await
        .expect("create the parent");
    let key = format!("{ns}/traced");

    // The worker's create of the child, and every span up to the root of its trace.
    let (spans, chain) = call_trace(
        &receiver,
        "create configmaps",
        &ns,
        "the trace of the reconcile that created the child, with its leader's spans",
    )
    .await;
    let [api, reconcile, dispatch, enqueue, event] = &chain[..] else {
        unreachable!("matched above")
    };
    let trace = event.trace_id();
    for s in &chain {
        assert_eq!(s.trace_id(), trace, "{} is in another trace", s.span.name);
    }
    assert!(
        event.span.parent_span_id.is_empty(),
        "the watch event is the root"
    );
    print_tree(&spans, &trace);

    // Which process sent what.
    assert_eq!(event.service, "flotilla-coordinator");
    assert_eq!(enqueue.service, "flotilla-coordinator");
    assert_eq!(dispatch.service, "flotilla-coordinator");
    assert_eq!(reconcile.service, "flotilla-worker");
    assert_eq!(api.service, "flotilla-worker");

    // Fields.
    assert_eq!(event.attr("kind").as_deref(), Some("v1/configmaps"));
    assert_eq!(event.attr("key").as_deref(), Some(key.as_str()));
    assert_eq!(event.attr("event").as_deref(), Some("added"));
    assert_eq!(enqueue.attr("controller").as_deref(), Some("one-child"));
    assert_eq!(enqueue.attr("coalesced").as_deref(), Some("false"));
    for s in [dispatch, reconcile] {
        assert_eq!(
            s.attr("controller").as_deref(),
            Some("one-child"),
            "{}",
            s.span.name
        );
        assert_eq!(
            s.attr("key").as_deref(),
            Some(key.as_str()),
            "{}",
            s.span.name
        );
        assert_eq!(s.attr("worker").as_deref(), Some("w0"), "{}", s.span.name);
        assert_eq!(s.attr("attempt").as_deref(), Some("0"), "{}", s.span.name);
        assert!(s.attr("shard").is_some(), "{} has a shard", s.span.name);
        assert!(
            s.attr("term").is_some_and(|t| t != "0"),
            "{} has the term",
            s.span.name
        );
    }
    assert_eq!(dispatch.attr("reason").as_deref(), Some("object_changed"));
    // The same short label as the dispatch's; the object it names is `cause.kind` / `cause.key`.
    assert_eq!(reconcile.attr("reason").as_deref(), Some("object_changed"));
    assert_eq!(
        reconcile.attr("cause.kind").as_deref(),
        Some("v1/configmaps")
    );
    assert_eq!(reconcile.attr("cause.key").as_deref(), Some(key.as_str()));
    assert_eq!(reconcile.attr("outcome").as_deref(), Some("success"));
    assert_eq!(
        reconcile.span.links.len(),
        1,
        "the reconcile links to the one event merged into it"
    );
    assert_eq!(hex(&reconcile.span.links[0].trace_id), trace);
    assert_eq!(api.attr("resource").as_deref(), Some("configmaps"));
    assert_eq!(api.attr("code").as_deref(), Some("201"));
}

#[tokio::test(flavor = "multi_thread")]
async fn changes_coalesced_into_one_queued_key_become_links_of_its_reconcile() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "coalesce").await;
    let receiver = Receiver::start().await;
    let fleet_dir = tempfile::tempdir().expect("temp dir");
    let journal = fleet_dir.path().join("journal.jsonl");
    // Reconciles of 3 s: changes made while one runs coalesce into the key's next run.
    let (_fleet, _coordinator, _worker) = traced_fleet(&cluster, &receiver, "1", |fleet, flags| {
        let mut worker = journal_worker_args(&journal);
        worker.extend(flags.iter().map(|s| s.to_string()));
        fleet.worker("fleet-probe", "w0", &strs(&worker))
    })
    .await;

    create_configmaps(&client, &ns, "hot", 1, JOURNAL_LABEL).await;
    let key = format!("{ns}/hot-0");
    wait_for(
        Duration::from_secs(30),
        "the first reconcile to start",
        || async {
            read(&journal)
                .into_iter()
                .any(|e| e.key == key)
                .then_some(())
        },
    )
    .await;
    // Two changes while it runs: the first makes the key dirty again, the second coalesces into it.
    touch(&client, std::slice::from_ref(&key), 1).await;
    touch(&client, std::slice::from_ref(&key), 2).await;

    let (events, reconcile) = wait_for(
        Duration::from_secs(60),
        "a reconcile linked to both change events",
        || async {
            let spans = receiver.spans();
            let changes: Vec<&Received> = spans
                .iter()
                .filter(|s| {
                    is_watch_event(s)
                        && s.attr("key").as_deref() == Some(key.as_str())
                        && s.attr("event").as_deref() == Some("modified")
                })
                .collect();
            if changes.len() < 2 {
                return None;
            }
            let reconcile = spans.iter().find(|s| {
                s.span.name == "reconcile"
                    && s.attr("key").as_deref() == Some(key.as_str())
                    && s.span.links.len() >= 2
            })?;
            let events: Vec<String> = changes.iter().map(|s| s.trace_id()).collect();
            Some((events, reconcile.clone()))
        },
    )
    .await;
    let linked: Vec<String> = reconcile
        .span
        .links
        .iter()
        .map(|l| hex(&l.trace_id))
        .collect();
    for event in &events {
        assert!(
            linked.contains(event),
            "the reconcile links to the trace of every change merged into it: {event} not in {linked:?}"
        );
    }
    assert_eq!(
        reconcile.trace_id(),
        linked[0],
        "the reconcile joins the first merged event's trace"
    );
    let coalesced = receiver
        .spans()
        .into_iter()
        .filter(|s| {
            s.span.name == "enqueue"
                && s.attr("key").as_deref() == Some(key.as_str())
                && s.attr("coalesced").as_deref() == Some("true")
        })
        .count();
    assert!(
        coalesced >= 1,
        "the second change's enqueue says it coalesced"
    );
}

fn journal_worker_args(journal: &std::path::Path) -> Vec<String> {
    [
        "--controllers",
        "journal",
        "--journal",
        &journal.display().to_string(),
        "--reconcile-ms",
        "3000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A reconcile that fails is retried in the trace of the change that caused it: a quota refuses the
/// ReplicaSet's pod, the key is retried with backoff, and once the quota allows, the retry that creates
/// the pod sits under the same `enqueue` span as the failed attempt, in the watch event's trace.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_reconciles_retries_stay_in_the_trace_of_the_change_that_caused_them() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "retried").await;
    let receiver = Receiver::start().await;
    let (_fleet, _coordinator, _worker) = traced_fleet(&cluster, &receiver, "1", |fleet, flags| {
        let mut args = vec!["worker", "--controllers", "replicaset"];
        args.extend_from_slice(flags);
        fleet.worker("flotilla", "w0", &args)
    })
    .await;

    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let quota = |pods: &str| -> ResourceQuota {
        serde_json::from_value(
            json!({"metadata": {"name": "pods"}, "spec": {"hard": {"pods": pods}}}),
        )
        .expect("quota")
    };
    quotas
        .create(&PostParams::default(), &quota("0"))
        .await
        .expect("create the quota");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}
            }
        }
    }))
    .expect("replicaset");
    Api::<ReplicaSet>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &rs)
        .await
        .expect("create the ReplicaSet");
    let key = format!("{ns}/web");

    wait_for(
        Duration::from_secs(60),
        "a reconcile refused by the quota",
        || {
            let spans = receiver.spans();
            let key = key.clone();
            async move {
                spans
                    .iter()
                    .any(|s| {
                        s.span.name == "reconcile"
                            && s.attr("key").as_deref() == Some(key.as_str())
                            && s.attr("outcome").as_deref() == Some("error")
                    })
                    .then_some(())
            }
        },
    )
    .await;
    let mut raised = quotas.get("pods").await.expect("the quota");
    raised.spec = quota("5").spec;
    quotas
        .replace("pods", &PostParams::default(), &raised)
        .await
        .expect("raise the quota");

    let (spans, chain) = call_trace(
        &receiver,
        "create pods",
        &ns,
        "the retry that created the pod, in the trace of the ReplicaSet's watch event",
    )
    .await;
    let [_, retry, dispatch, enqueue, event] = &chain[..] else {
        unreachable!("matched above")
    };
    print_tree(&spans, &event.trace_id());
    assert_eq!(event.attr("kind").as_deref(), Some("apps/v1/replicasets"));
    assert_eq!(dispatch.attr("reason").as_deref(), Some("retry"));
    assert!(
        retry.attr("attempt").is_some_and(|a| a != "0"),
        "the successful run is a retry: {:?}",
        retry.attr("attempt")
    );
    assert_eq!(retry.attr("outcome").as_deref(), Some("success"));
    // The attempt whose failure the retry answers hangs under the same enqueue, in the same trace.
    let failed = spans
        .iter()
        .find(|s| {
            s.span.name == "reconcile"
                && s.attr("outcome").as_deref() == Some("error")
                && ancestry(&spans, s)
                    .get(2)
                    .is_some_and(|e| e.span.span_id == enqueue.span.span_id)
        })
        .expect("a failed reconcile under the retry's enqueue");
    assert_eq!(failed.trace_id(), event.trace_id());
    let failed_chain = ancestry(&spans, failed);
    let failed_names: Vec<&str> = failed_chain.iter().map(|s| s.span.name.as_str()).collect();
    assert_eq!(failed_names[..3], ["reconcile", "dispatch", "enqueue"]);
    assert!(
        failed_chain.len() == 4 && is_watch_event(failed_chain[3]),
        "{failed_names:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sample_ratio_of_zero_exports_nothing() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "untraced").await;
    let receiver = Receiver::start().await;
    let fleet_dir = tempfile::tempdir().expect("temp dir");
    let journal = fleet_dir.path().join("journal.jsonl");
    let (_fleet, mut coordinator, mut worker) =
        traced_fleet(&cluster, &receiver, "0", |fleet, flags| {
            let mut args = vec![
                "--controllers".to_owned(),
                "journal".to_owned(),
                "--journal".to_owned(),
                journal.display().to_string(),
            ];
            args.extend(flags.iter().map(|s| s.to_string()));
            fleet.worker("fleet-probe", "w0", &strs(&args))
        })
        .await;
    create_configmaps(&client, &ns, "quiet", 3, JOURNAL_LABEL).await;
    for i in 0..3 {
        let key = format!("{ns}/quiet-{i}");
        super::common::reconciled(&journal, &key, Duration::from_secs(30)).await;
    }
    // A graceful stop flushes what each process still buffers: had anything been sampled, it arrives
    // before the processes exit.
    worker.sigterm(Duration::from_secs(15)).await;
    coordinator.sigterm(Duration::from_secs(15)).await;
    let spans = receiver.spans();
    assert!(
        spans.is_empty(),
        "nothing is exported at ratio 0, yet {} spans arrived: {:?}",
        spans.len(),
        spans.iter().map(|s| &s.span.name).collect::<Vec<_>>()
    );
}
