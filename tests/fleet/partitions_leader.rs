//! Partitions of the leader, and of the whole control plane: the leader cut from etcd, the leader cut
//! from the Kubernetes API, and etcd and the API server restarted mid-rollout. Each checks the journal
//! (no key reconciled by two workers at once, none left behind) and that nothing was created twice.
//!
//! The coordinator whose link is cut is started with `support::links` (a `FaultProxy` of its own in
//! front of etcd, the API and its gRPC listener); the other processes reach etcd and the API directly.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::common::{JOURNAL_LABEL, create_configmaps, leader_id, touch};
use super::journal::{intervals, now_ns, overlaps, read, stale_keys};
use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, LEASE, Proc, metric};
use crate::support::links::{self, Clients, Direction, Fault, LinkedCoordinator};
use crate::support::wait::wait_for;

/// The label value of the one-child probe's parents.
const PARENT: (&str, &str) = ("flotilla.dev/probe", "parent");

/// A fleet-probe worker running the journal and one-child probes.
fn probe_worker(fleet: &Fleet, id: &str, journal: &std::path::Path) -> Proc {
    fleet.worker(
        "fleet-probe",
        id,
        &[
            "--controllers",
            "journal,one-child",
            "--journal",
            &journal.display().to_string(),
            "--reconcile-ms",
            "20",
            "--concurrent-journal-syncs",
            "10",
            "--concurrent-one-child-syncs",
            "10",
        ],
    )
}

/// Whether `proc` answers `/metrics` and says it leads (`None` while it does not answer).
async fn leads(proc: &Proc) -> Option<bool> {
    let text = proc.metrics_text().await;
    (!text.is_empty()).then(|| metric(&text, "flotilla_is_leader ") == 1.0)
}

/// Items this coordinator has assigned, over every controller.
async fn assigned(proc: &Proc) -> f64 {
    proc.metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with("flotilla_dispatch_assigned_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Parent name → its children (ConfigMaps it controls), for every parent in `ns`.
async fn children(client: &kube::Client, ns: &str) -> HashMap<String, usize> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default()).await.unwrap().items;
    let mut counts: HashMap<String, usize> = list
        .iter()
        .filter(|cm| {
            cm.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(PARENT.0))
                .is_some_and(|v| v == PARENT.1)
        })
        .filter_map(|cm| Some((cm.metadata.name.clone()?, 0)))
        .collect();
    for cm in &list {
        for owner in cm.metadata.owner_references.iter().flatten() {
            if owner.controller == Some(true)
                && let Some(n) = counts.get_mut(&owner.name)
            {
                *n += 1;
            }
        }
    }
    counts
}

/// Waits until every parent in `ns` has a child and the fleet's queues are drained; then asserts
/// every parent has exactly one.
async fn exactly_one_child_each(fleet: &Fleet, client: &kube::Client, ns: &str, parents: usize) {
    wait_for(
        Duration::from_secs(30),
        &format!("a child for each of {parents} parents, and the queues drained"),
        || async {
            let counts = children(client, ns).await;
            let all = counts.len() == parents && counts.values().all(|n| *n >= 1);
            let s = fleet.status().await?;
            let drained = s.queues.iter().all(|q| q.depth == 0 && q.processing == 0);
            (all && drained).then_some(())
        },
    )
    .await;
    let counts = children(client, ns).await;
    let mut twice: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
    twice.sort();
    assert!(
        twice.is_empty(),
        "parents without exactly one child: {twice:?}"
    );
}

/// Creates a parent `{prefix}-{i}` every `every` until `stop`; the returned count says how many.
fn keep_creating_parents(
    client: &kube::Client,
    ns: &str,
    prefix: &str,
    every: Duration,
    stop: CancellationToken,
) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let created = Arc::new(AtomicUsize::new(0));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let (count, prefix) = (created.clone(), prefix.to_owned());
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        while !stop.is_cancelled() {
            tick.tick().await;
            let i = count.load(Ordering::SeqCst);
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("{prefix}-{i}"), "labels": {PARENT.0: PARENT.1}},
            }))
            .unwrap();
            api.create(&Default::default(), &cm).await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    (created, task)
}

/// Checks the journal: no two reconciles of a key overlapped (`deaths` ends the intervals a worker
/// left open), and each key of `want` was reconciled at its resourceVersion or later.
fn journal_is_clean(
    journal: &std::path::Path,
    want: &HashMap<String, u64>,
    deaths: &HashMap<String, u64>,
) {
    let all = intervals(&read(journal), deaths, now_ns());
    let overlapping = overlaps(&all);
    assert!(
        overlapping.is_empty(),
        "overlapping reconciles: {overlapping:#?}"
    );
    let stale = stale_keys(&all, want);
    assert!(
        stale.is_empty(),
        "keys not reconciled at their last change: {stale:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_cut_from_etcd_stops_dispatching_before_its_lease_can_expire_and_workers_follow_the_new_term()
 {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = cluster.namespace("etcdcut").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");
    let LinkedCoordinator {
        proc: c0,
        links,
        grpc: _grpc0, // kept: dropping the proxy closes the workers' streams
    } = links::coordinator(&fleet, "c0", &[]).await;
    let etcd0 = &links.etcd;
    wait_for(Duration::from_secs(30), "c0 to lead", || async {
        (leader_id(&fleet).await == "c0").then_some(())
    })
    .await;
    let c1 = fleet.coordinator("c1", &[]);
    let workers: Vec<Proc> = (0..2)
        .map(|i| probe_worker(&fleet, &format!("w{i}"), &journal))
        .collect();
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;
    let term0 = fleet.leader().await.expect("a leader").term;
    let mut want = create_configmaps(&client, &ns, "k", 40, JOURNAL_LABEL).await;
    let keys: Vec<String> = want.keys().cloned().collect();
    create_configmaps(&client, &ns, "p", 10, PARENT).await;

    // Keys keep changing across the cut, so c0 has work to dispatch until it stops.
    let stop_touching = CancellationToken::new();
    let toucher = {
        let (client, keys, stop) = (client.clone(), keys.clone(), stop_touching.clone());
        tokio::spawn(async move {
            let mut round = 1;
            let mut last = HashMap::new();
            while !stop.is_cancelled() {
                last.extend(touch(&client, &keys, round).await);
                round += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            last
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cut = Instant::now();
    etcd0.set(Fault::Cut);
    // c0 must stop before its lease can have expired: the lease was last renewed at most one retry
    // period (500 ms) before the cut, so it lives at least until cut + LEASE - 500 ms.
    let safe = LEASE - Duration::from_millis(500);
    wait_for(
        safe,
        "c0 to stop leading after its etcd link was cut",
        || async { (leads(&c0).await == Some(false)).then_some(()) },
    )
    .await;
    let stopped = cut.elapsed();
    let assigned_at_stop = assigned(&c0).await;
    let new = wait_for(LEASE + Duration::from_secs(3), "c1 to lead", || async {
        let leader = fleet.leader().await?;
        (leader.info.id == "c1").then_some(leader)
    })
    .await;
    let took_over = cut.elapsed();
    eprintln!(
        "c0 stopped {stopped:?} after the cut; c1 leads (term {}) {took_over:?} after it",
        new.term
    );
    assert!(new.term > term0);
    assert!(
        stopped < took_over,
        "c0 stopped dispatching only after c1 led"
    );
    stop_touching.cancel();
    want.extend(toucher.await.unwrap());

    // The workers follow the new term: each is welcomed by c1's, and refuses items of c0's.
    for w in &workers {
        wait_for(
            Duration::from_secs(10),
            &format!("{} to be welcomed in term {}", w.name, new.term),
            || async {
                w.log_text()
                    .lines()
                    .any(|l| l.contains("welcomed") && l.contains(&format!("term={}", new.term)))
                    .then_some(())
            },
        )
        .await;
    }
    exactly_one_child_each(&fleet, &client, &ns, 10).await;
    wait_for(
        Duration::from_secs(30),
        "every key reconciled at its last change",
        || async {
            let all = intervals(&read(&journal), &HashMap::new(), now_ns());
            stale_keys(&all, &want).is_empty().then_some(())
        },
    )
    .await;
    journal_is_clean(&journal, &want, &HashMap::new());
    assert_eq!(
        assigned(&c0).await,
        assigned_at_stop,
        "c0 assigned items after it stopped leading"
    );
    let mut refused = 0.0;
    for w in &workers {
        let text = w.metrics_text().await;
        refused += metric(
            &text,
            r#"flotilla_worker_refused_items_total{reason="stale_term"}"#,
        );
    }
    eprintln!("items of the old term refused by the workers: {refused}");

    // Healed, c0 follows: it does not take the lease back.
    etcd0.heal();
    wait_for(
        Duration::from_secs(10),
        "c0 to follow once healed",
        || async {
            let (code, body) = c0.http_get("/readyz").await;
            (code == 200 && body.starts_with("following")).then_some(())
        },
    )
    .await;
    assert_eq!(leader_id(&fleet).await, "c1");
    drop(c1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_cut_from_the_api_resigns_within_the_bound_and_nothing_is_created_twice() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = cluster.namespace("apicut").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");
    // c0 sees the API 300 ms late, so its read-your-writes holds last that long and some are open
    // when the link is cut; with a 1 s expectations timeout their deadlines pass while c0 is cut off,
    // and they must not be released onto its stale cache.
    let bound = Duration::from_secs(3);
    let flags = [
        "--kube-api-unreachable-timeout",
        "3s",
        "--expectations-timeout",
        "1s",
    ];
    let LinkedCoordinator {
        proc: c0,
        links,
        grpc: _grpc0, // kept: dropping the proxy closes the workers' streams
    } = links::coordinator(&fleet, "c0", &flags).await;
    let api0 = &links.api;
    api0.set_for(
        Clients::All,
        Direction::ToClient,
        Fault::Delay(Duration::from_millis(300)),
    );
    wait_for(Duration::from_secs(30), "c0 to lead", || async {
        (leader_id(&fleet).await == "c0").then_some(())
    })
    .await;
    let _c1 = fleet.coordinator("c1", &flags);
    let _workers: Vec<Proc> = (0..2)
        .map(|i| probe_worker(&fleet, &format!("w{i}"), &journal))
        .collect();
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;
    let mut want = create_configmaps(&client, &ns, "k", 30, JOURNAL_LABEL).await;
    let keys: Vec<String> = want.keys().cloned().collect();
    create_configmaps(&client, &ns, "p", 10, PARENT).await;
    exactly_one_child_each(&fleet, &client, &ns, 10).await;

    // New parents every 20 ms from before the cut until after the takeover.
    let stop_creating = CancellationToken::new();
    let (created, creator) = keep_creating_parents(
        &client,
        &ns,
        "live",
        Duration::from_millis(20),
        stop_creating.clone(),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let assigned_before = assigned(&c0).await;
    let cut = Instant::now();
    api0.set(Fault::Cut);
    wait_for(
        bound + Duration::from_secs(3),
        "c0 to stop leading after its API link was cut",
        || async { (leads(&c0).await == Some(false)).then_some(()) },
    )
    .await;
    let stopped = cut.elapsed();
    let assigned_at_stop = assigned(&c0).await;
    wait_for(Duration::from_secs(5), "c1 to lead", || async {
        (leader_id(&fleet).await == "c1").then_some(())
    })
    .await;
    let took_over = cut.elapsed();
    eprintln!(
        "c0 stopped {stopped:?} after its API link was cut (bound {bound:?}); c1 leads {took_over:?} after it; c0 assigned {} items before the cut, {} in all",
        assigned_before, assigned_at_stop
    );
    // The bound, one probe period (750 ms) to notice, and scheduling on a loaded machine.
    assert!(
        stopped <= bound + Duration::from_millis(1500),
        "c0 kept leading {stopped:?} on a stale cache (bound {bound:?})"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_creating.cancel();
    creator.await.unwrap();
    want.extend(touch(&client, &keys, 1).await);

    // c0 stays out of the election while its API is unreachable, and says why.
    let (code, body) = c0.http_get("/readyz").await;
    assert_ne!(code, 200, "c0 says ready while cut from the API: {body}");
    assert!(body.contains("Kubernetes API"), "{body}");
    let live = created.load(Ordering::SeqCst);
    exactly_one_child_each(&fleet, &client, &ns, 10 + live).await;
    wait_for(
        Duration::from_secs(30),
        "every key reconciled at its last change",
        || async {
            let all = intervals(&read(&journal), &HashMap::new(), now_ns());
            stale_keys(&all, &want).is_empty().then_some(())
        },
    )
    .await;
    journal_is_clean(&journal, &want, &HashMap::new());
    assert_eq!(
        leader_id(&fleet).await,
        "c1",
        "c0 led again while cut from the API"
    );
    assert_eq!(
        assigned(&c0).await,
        assigned_at_stop,
        "c0 assigned items after it stopped leading"
    );
    assert!(
        c0.log_text().contains("not campaigning"),
        "c0 campaigned while cut from the API"
    );
    let text = c0.metrics_text().await;
    eprintln!(
        "c0: {} read-your-writes holds expired; {} parents created across the cut",
        metric(&text, "flotilla_read_your_writes_expired_total"),
        live
    );

    // Healed, c0 campaigns again and follows.
    api0.heal();
    wait_for(
        Duration::from_secs(10),
        "c0 to follow once its API answers",
        || async {
            let (code, body) = c0.http_get("/readyz").await;
            (code == 200 && body.starts_with("following")).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_etcd_and_the_api_server_restart_mid_rollout_the_fleet_recovers_and_the_rollout_completes()
 {
    let mut cluster = TestCluster::start().await;
    crate::skip_unless_devcluster!(cluster, "restarts the devcluster and its etcd");
    let client = cluster.client();
    let ns = cluster.namespace("restart").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");
    let _c0 = fleet.coordinator("c0", &[]);
    let _c1 = fleet.coordinator("c1", &[]);
    let workers: Vec<Proc> = (0..2)
        .map(|i| {
            fleet.worker(
                "fleet-probe",
                &format!("w{i}"),
                &[
                    "--controllers",
                    "journal,one-child",
                    "--journal",
                    &journal.display().to_string(),
                    // Slow enough that the rollout is mid-way when the control plane goes.
                    "--reconcile-ms",
                    "200",
                    "--concurrent-journal-syncs",
                    "4",
                ],
            )
        })
        .collect();
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;
    let mut want = create_configmaps(&client, &ns, "k", 60, JOURNAL_LABEL).await;
    let keys: Vec<String> = want.keys().cloned().collect();
    create_configmaps(&client, &ns, "p", 10, PARENT).await;
    exactly_one_child_each(&fleet, &client, &ns, 10).await;

    // Round 1 of the rollout: 60 keys × 200 ms over 8 slots take 1.5 s; the control plane goes
    // half-way, for 2 s (longer than the workers' renew deadline: their leases are in doubt).
    want.extend(touch(&client, &keys, 1).await);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let down = Instant::now();
    cluster
        .restart_etcd_and_api(Duration::from_secs(2))
        .await
        .expect("a devcluster");
    let back = now_ns();
    eprintln!("etcd and the API server were down {:?}", down.elapsed());

    // The fleet recovers: a leader with every worker and every shard, the informers resumed or
    // relisted (new changes reach the workers), and the rollout completes.
    fleet
        .wait_for_workers(2, LEASE + Duration::from_secs(15))
        .await;
    eprintln!(
        "leader and workers back {:?} after the restart began",
        down.elapsed()
    );
    let round2 = wait_for(
        Duration::from_secs(10),
        "the API to take writes again",
        || async {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
            api.patch(
                "k-0",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"probe": "1"}})),
            )
            .await
            .ok()
        },
    )
    .await;
    drop(round2);
    want.extend(touch(&client, &keys, 2).await);
    create_configmaps(&client, &ns, "q", 10, PARENT).await;
    exactly_one_child_each(&fleet, &client, &ns, 20).await;
    wait_for(
        Duration::from_secs(30),
        "every key reconciled at its last change",
        || async {
            let all = intervals(&read(&journal), &HashMap::new(), now_ns());
            stale_keys(&all, &want).is_empty().then_some(())
        },
    )
    .await;
    eprintln!(
        "the rollout completed {:?} after the restart began",
        down.elapsed()
    );
    // A reconcile the outage cut short (its worker fenced itself) has a start and no end: it ran at
    // most until the control plane came back, before any other worker could hold its key.
    let deaths: HashMap<String, u64> = workers.iter().map(|w| (w.name.clone(), back)).collect();
    journal_is_clean(&journal, &want, &deaths);
}
