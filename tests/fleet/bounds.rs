//! The fleet at its documented bounds (README, "Bounds"; RELIABILITY.md, "Bounds"), asserting behaviour
//! only — what is accepted, what is refused and how, exactly-once and progress — never time or memory:
//! `flotilla bench bounds` measures those. The coordinator's resident memory and CPU are printed at
//! each step for the record.
//!
//! - the largest object: what kube-apiserver accepts (etcd's 1.5 MiB value) is cached, dispatched and
//!   reconciled (a ConfigMap's 1 MiB; a Pod of 1.5 MB is stored); a body etcd refuses is a 500 naming
//!   etcd's error, and a body over 3 MiB a 413;
//! - a flood of 2,000 updates of one object is coalesced: far fewer reconciles, never two at once, and
//!   the last one saw the last version;
//! - a thousand workers saying Hello at once are all welcomed, the shards spread over them, and keys
//!   keep being dispatched and done;
//! - a Cache List of every pod, meanwhile, comes in pages, each object once.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flotilla_common::FleetKeys;
use flotilla_proto as proto;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prost::Message;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::common::{JOURNAL_LABEL, create_configmaps, journal_worker, reconciled};
use super::journal::{intervals, now_ns, overlaps, read};
use super::peer::{cache_client, kind};
use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::unique_namespace;
use crate::support::raw;
use crate::support::wait::{wait_for, within};

/// Just under a ConfigMap's own limit (its data may hold 1 MiB = 1,048,576 bytes in all): the
/// largest ConfigMap the API stores.
const LARGEST_CONFIGMAP: usize = 1_048_000;
/// A value just under etcd's default `--max-request-bytes` (1.5 MiB = 1,572,864 bytes) with room for
/// the key and the object's other fields: the largest object of a kind with no size limit of its own
/// (a Pod's args) the API stores.
const LARGEST_ACCEPTED: usize = 1_500_000;
/// Under the API's 3 MiB body limit, over etcd's value limit.
const OVER_ETCD: usize = 2_000_000;
/// Over kube-apiserver's 3 MiB (3,145,728 bytes) request body limit.
const OVER_BODY: usize = 3_200_000;
/// Updates of one object in the flood.
const FLOOD: usize = 2_000;
/// Workers saying Hello at once.
const CROWD: usize = 1_000;
/// Pods a Cache List reads while the crowd works, each with a 5,000-byte annotation: 5 MB in all,
/// more than one 4 MiB page.
const PODS: usize = 1_000;

/// The coordinator's resident memory (MiB) and CPU seconds so far, from `/proc`.
fn usage(proc: &Proc) -> (f64, f64) {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", proc.pid())).unwrap_or_default();
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", proc.pid())).unwrap_or_default();
    let ticks: f64 = stat
        .rfind(')')
        .map(|i| {
            stat[i + 1..]
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|f| f.parse::<f64>().ok())
                .sum()
        })
        .unwrap_or(0.0);
    (rss_kib / 1024.0, ticks / 100.0)
}

fn report(step: &str, coordinator: &Proc, before: (f64, f64)) -> (f64, f64) {
    let now = usage(coordinator);
    eprintln!(
        "{step}: coordinator rss {:.0} MiB ({:+.0}), cpu {:.2} s",
        now.0,
        now.0 - before.0,
        now.1 - before.1
    );
    now
}

/// A ConfigMap `name` with the journal label and a `blob` of `bytes` bytes.
fn blob(name: &str, bytes: usize) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {JOURNAL_LABEL.0: JOURNAL_LABEL.1}},
        "data": {"blob": "x".repeat(bytes)},
    })
}

/// A Pod `name` whose container args hold `bytes` bytes (kube-apiserver limits neither).
fn fat_pod(name: &str, bytes: usize) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "registry.example/app:1", "args": ["x".repeat(bytes)]}]},
    })
}

/// A coordinator and one journal worker (`reconcile_ms` per reconcile, 10 at once).
async fn fleet_of_one(cluster: &TestCluster, reconcile_ms: u64) -> (Fleet, Proc, Proc) {
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journal = fleet.dir().join("journal.jsonl");
    let coordinator = fleet.coordinator("c0", &[]);
    let worker = journal_worker(&fleet, "w0", &journal, reconcile_ms, 10);
    fleet.wait_for_workers(1, Duration::from_secs(60)).await;
    (fleet, coordinator, worker)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_largest_object_is_reconciled_larger_ones_are_refused_and_a_flood_on_one_key_coalesces()
{
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "bounds").await;
    let (fleet, coordinator, _worker) = fleet_of_one(&cluster, 200).await;
    let journal = fleet.dir().join("journal.jsonl");
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let mut before = usage(&coordinator);

    // The largest object: stored, cached, dispatched (its Assign is well under the 4 MiB batch) and
    // reconciled at the version written.
    let created = raw::post(&client, &path, &blob("largest", LARGEST_CONFIGMAP))
        .await
        .expect_ok(201);
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let key = format!("{ns}/largest");
    wait_for(
        Duration::from_secs(30),
        "the largest object reconciled at its version",
        || async {
            intervals(&read(&journal), &Default::default(), now_ns())
                .into_iter()
                .any(|i| i.key == key && !i.open && i.rv == rv)
                .then_some(())
        },
    )
    .await;
    before = report("largest object reconciled", &coordinator, before);

    // Larger: a ConfigMap past its 1 MiB is invalid; a Pod just under etcd's value limit is stored;
    // etcd refuses a larger value (kube-apiserver passes its error on as a 500); a body past the 3 MiB
    // request limit is refused before it is read.
    raw::post(&client, &path, &blob("over-configmap", 1_048_577))
        .await
        .expect_status(422, "Invalid");
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    raw::post(&client, &pods, &fat_pod("largest", LARGEST_ACCEPTED))
        .await
        .expect_ok(201);
    let refused = raw::post(&client, &pods, &fat_pod("over-etcd", OVER_ETCD)).await;
    let head = &refused.text[..refused.text.len().min(400)];
    assert_eq!(refused.status, 500, "{head}");
    assert!(refused.text.contains("request is too large"), "{head}");
    raw::post(&client, &pods, &fat_pod("over-body", OVER_BODY))
        .await
        .expect_status(413, "RequestEntityTooLarge");
    let pod_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    for name in ["over-etcd", "over-body"] {
        assert!(
            pod_api.get_opt(name).await.unwrap().is_none(),
            "{name} was stored"
        );
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // The flood: 2,000 updates of one ConfigMap, back to back from one writer (writes of one key in
    // flight together mostly conflict: 8 writers made 76 updates a second).
    create_configmaps(&client, &ns, "flood", 1, JOURNAL_LABEL).await;
    let key = format!("{ns}/flood-0");
    reconciled(&journal, &key, Duration::from_secs(30)).await;
    let started = Instant::now();
    let last = stream::iter(0..FLOOD)
        .map(|i| {
            let api = api.clone();
            async move {
                // Writes to one key in flight together conflict; kube-apiserver gives up after a
                // few tries with a 409, and the writer tries again, as clients do.
                loop {
                    match api
                        .patch(
                            "flood-0",
                            &PatchParams::default(),
                            &Patch::Merge(json!({"data": {"round": i.to_string()}})),
                        )
                        .await
                    {
                        Ok(patched) => {
                            break patched
                                .metadata
                                .resource_version
                                .and_then(|v| v.parse::<u64>().ok())
                                .expect("resourceVersion");
                        }
                        Err(kube::Error::Api(status)) if status.code == 409 => {}
                        Err(err) => panic!("patch: {err}"),
                    }
                }
            }
        })
        .buffer_unordered(1)
        .fold(0, |max, rv| async move { max.max(rv) })
        .await;
    eprintln!("{FLOOD} updates of {key} in {:?}", started.elapsed());
    let runs = wait_for(
        Duration::from_secs(30),
        "the flooded key reconciled at its last version",
        || async {
            let runs: Vec<_> = intervals(&read(&journal), &Default::default(), now_ns())
                .into_iter()
                .filter(|i| i.key == key)
                .collect();
            runs.iter()
                .any(|i| !i.open && i.rv.parse::<u64>().ok() == Some(last))
                .then_some(runs)
        },
    )
    .await;
    report("flood coalesced", &coordinator, before);
    let found = overlaps(&runs);
    assert!(found.is_empty(), "overlapping reconciles: {found:?}");
    let newest = runs.iter().max_by_key(|i| i.start_ns).unwrap();
    assert_eq!(
        newest.rv.parse::<u64>().ok(),
        Some(last),
        "the last reconcile saw the last version"
    );
    eprintln!("{FLOOD} updates → {} reconciles", runs.len());
    assert!(
        runs.len() * 5 <= FLOOD,
        "{} reconciles for {FLOOD} updates: not coalesced",
        runs.len()
    );
}

/// One of the crowd: a hand-driven worker that answers every Assign with a successful Done at once
/// and gives its credit back.
struct Peer {
    id: String,
    lease: i64,
    /// Holds the stream open.
    _tx: mpsc::Sender<proto::WorkerMessage>,
}

/// Opens `id`'s stream with `hello`; returns the peer once welcomed (or the refusal), and spawns the
/// loop that answers its Assigns, counting them in `done`.
async fn join(
    addr: String,
    id: String,
    lease: i64,
    controllers: Vec<proto::ControllerCapacity>,
    done: Arc<AtomicUsize>,
) -> Result<Peer, tonic::Status> {
    let names: Vec<String> = controllers
        .iter()
        .filter_map(|c| Some(c.spec.as_ref()?.name.clone()))
        .collect();
    let mut client = proto::dispatch_client::DispatchClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?
        .max_decoding_message_size(proto::MAX_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel(64);
    tx.send(proto::WorkerMessage {
        msg: Some(proto::worker_message::Msg::Hello(proto::Hello {
            worker_id: id.clone(),
            lease_id: lease,
            controllers,
            known_term: 0,
            held: vec![],
        })),
    })
    .await
    .unwrap();
    let mut stream = client.work(ReceiverStream::new(rx)).await?.into_inner();
    match stream.message().await? {
        Some(proto::CoordinatorMessage {
            msg: Some(proto::coordinator_message::Msg::Welcome(_)),
        }) => {}
        other => return Err(tonic::Status::internal(format!("not a Welcome: {other:?}"))),
    }
    for name in &names {
        let credit = proto::Credit {
            controller: name.clone(),
            n: 1,
        };
        tx.send(proto::WorkerMessage {
            msg: Some(proto::worker_message::Msg::Credit(credit)),
        })
        .await
        .unwrap();
    }
    let answer = tx.clone();
    tokio::spawn(async move {
        while let Ok(Some(message)) = stream.message().await {
            let Some(proto::coordinator_message::Msg::Assign(batch)) = message.msg else {
                continue;
            };
            let items = batch
                .items
                .iter()
                .map(|a| proto::Done {
                    item_id: a.item_id,
                    term: a.term,
                    outcome: proto::Outcome::Success as i32,
                    ..Default::default()
                })
                .collect::<Vec<_>>();
            done.fetch_add(items.len(), Ordering::Relaxed);
            let credits: Vec<_> = batch
                .items
                .iter()
                .map(|a| proto::Credit {
                    controller: a.controller.clone(),
                    n: 1,
                })
                .collect();
            let done_msg = proto::WorkerMessage {
                msg: Some(proto::worker_message::Msg::Done(proto::DoneBatch { items })),
            };
            if answer.send(done_msg).await.is_err() {
                return;
            }
            for credit in credits {
                let msg = proto::WorkerMessage {
                    msg: Some(proto::worker_message::Msg::Credit(credit)),
                };
                if answer.send(msg).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(Peer { id, lease, _tx: tx })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_workers_saying_hello_at_once_are_welcomed_and_a_list_of_every_pod_comes_in_pages()
 {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "crowd").await;
    let (fleet, coordinator, _worker) = fleet_of_one(&cluster, 5).await;
    let addr = fleet.leader().await.expect("a leader").info.address;
    let mut before = usage(&coordinator);

    // The crowd runs the journal controller as w0 registered it, read back from etcd, and `lister`,
    // which declares pods, so it may List them (its keys, every pod, are dispatched to the crowd too).
    let keys = FleetKeys::new(&fleet.name);
    let mut etcd = flotilla_common::connect_etcd(&fleet.etcd_endpoints)
        .await
        .unwrap();
    let stored = etcd.get(keys.controller("journal"), None).await.unwrap();
    let journal_spec =
        proto::ControllerSpec::decode(stored.kvs()[0].value()).expect("the stored journal spec");
    let pods = kind("", "v1", "Pod", "pods");
    let lister = proto::ControllerSpec {
        name: "lister".into(),
        primary: Some(pods.clone()),
        ..Default::default()
    };

    // Each registered in etcd as a worker registers itself: its own lease, its key on it.
    let started = Instant::now();
    let leases: Vec<(String, i64)> = stream::iter(0..CROWD)
        .map(|i| {
            let mut etcd = etcd.clone();
            let key = keys.worker(&format!("crowd-{i}"));
            async move {
                let id = format!("crowd-{i}");
                let lease = etcd.lease_grant(600, None).await.unwrap().id();
                etcd.put(
                    key,
                    format!(r#"{{"id":"{id}","capacity":1}}"#),
                    Some(etcd_client::PutOptions::new().with_lease(lease)),
                )
                .await
                .unwrap();
                (id, lease)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    eprintln!("{CROWD} workers registered in {:?}", started.elapsed());

    // All say Hello at once.
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let joins = leases.into_iter().map(|(id, lease)| {
        let controllers = vec![
            proto::ControllerCapacity {
                spec: Some(journal_spec.clone()),
                concurrency: 1,
            },
            proto::ControllerCapacity {
                spec: Some(lister.clone()),
                concurrency: 1,
            },
        ];
        let (addr, done) = (addr.clone(), done.clone());
        // Like a real worker, one whose connection broke before any answer (a reset while the
        // listen queue overflows), or that was told the leader is stepping down or not yet leading
        // (UNAVAILABLE: under a loaded machine the test's 3 s election lease can lapse in the burst),
        // tries again; any other refusal is final.
        tokio::spawn(async move {
            let mut retries = 0;
            loop {
                match join(
                    addr.clone(),
                    id.clone(),
                    lease,
                    controllers.clone(),
                    done.clone(),
                )
                .await
                {
                    Err(status)
                        if matches!(
                            status.code(),
                            tonic::Code::Unknown | tonic::Code::Unavailable
                        ) && retries < 5 =>
                    {
                        retries += 1;
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    outcome => return (outcome, retries),
                }
            }
        })
    });
    let outcomes = within(
        Duration::from_secs(60),
        "a thousand Hellos answered",
        futures::future::join_all(joins),
    )
    .await;
    eprintln!("{CROWD} Hellos answered in {:?}", started.elapsed());
    let mut crowd = Vec::new();
    let mut reconnects = 0;
    for outcome in outcomes {
        let (outcome, retries) = outcome.unwrap();
        reconnects += retries;
        match outcome {
            Ok(peer) => crowd.push(peer),
            Err(status) => panic!("a Hello was refused: {status}"),
        }
    }
    eprintln!("{reconnects} Hellos tried again after a reset or UNAVAILABLE");
    before = report("a thousand workers welcomed", &coordinator, before);

    // The shards spread over every worker, none holding more than its share of the weight (w0
    // advertises 10, each of the crowd 1; no worker weighs more than 4× the median).
    let started = Instant::now();
    let spread =
        wait_for(
            Duration::from_secs(30),
            "every shard owned and spread over the crowd",
            || async {
                let s = fleet.status().await?;
                let connected = s.workers.iter().filter(|w| w.connected).count();
                let owned: u32 = s.workers.iter().map(|w| w.shards).sum();
                let most = s.workers.iter().map(|w| w.shards).max().unwrap_or(0);
                let holders = s.workers.iter().filter(|w| w.shards > 0).count();
                let fair = s.shard_count.div_ceil(u32::try_from(CROWD + 1).unwrap());
                (connected == CROWD + 1 && owned == s.shard_count && most <= 4 * fair + 1)
                    .then_some((holders, most, s.shard_count))
            },
        )
        .await;
    eprintln!(
        "shards spread in {:?}: {} workers hold some, at most {} of {}",
        started.elapsed(),
        spread.0,
        spread.1,
        spread.2
    );

    // Dispatch goes on: new keys are handed out and done, by the crowd and w0.
    create_configmaps(&client, &ns, "during", 200, JOURNAL_LABEL).await;
    wait_for(
        Duration::from_secs(30),
        "the journal queue to drain with the crowd",
        || async {
            let s = fleet.status().await?;
            let q = s.queues.iter().find(|q| q.controller == "journal")?;
            (q.depth == 0 && q.processing == 0 && done.load(Ordering::Relaxed) > 0).then_some(())
        },
    )
    .await;

    // A Cache List of every pod, while keys keep moving: pages within the byte budget, each pod once.
    let pod_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    stream::iter(0..PODS)
        .map(|i| {
            let api = pod_api.clone();
            async move {
                let pod = serde_json::from_value(json!({
                    "metadata": {
                        "name": format!("p-{i}"),
                        "labels": {"app": "bounds"},
                        "annotations": {"bounds.flotilla.dev/padding": "x".repeat(5_000)},
                    },
                    "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]},
                }))
                .unwrap();
                api.create(&PostParams::default(), &pod).await.expect("pod")
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    eprintln!("{PODS} pods created");
    let lister_peer = &crowd[0];
    let mut cache = cache_client(&addr, Some((&lister_peer.id, lister_peer.lease)))
        .await
        .max_decoding_message_size(proto::MAX_MESSAGE_BYTES);
    wait_for(
        Duration::from_secs(30),
        "the pods informer to hold every pod",
        || async {
            let s = fleet.status().await?;
            s.informers
                .iter()
                .any(|i| {
                    i.kind.to_lowercase().contains("pod") && i.synced && i.objects >= PODS as u64
                })
                .then_some(())
        },
    )
    .await;
    let touching = tokio::spawn({
        let client = client.clone();
        let ns = ns.clone();
        async move { create_configmaps(&client, &ns, "listing", 100, JOURNAL_LABEL).await }
    });
    let mut seen = HashSet::new();
    let mut pages = 0;
    let mut continue_token = String::new();
    loop {
        let page = cache
            .list(proto::ListRequest {
                kind: Some(pods.clone()),
                namespace: ns.clone(),
                r#continue: continue_token.clone(),
                ..Default::default()
            })
            .await
            .expect("a page")
            .into_inner();
        pages += 1;
        for object in &page.objects {
            let v: serde_json::Value = serde_json::from_slice(object).unwrap();
            let name = v["metadata"]["name"].as_str().unwrap().to_owned();
            assert!(seen.insert(name.clone()), "{name} came twice");
        }
        if page.r#continue.is_empty() {
            break;
        }
        continue_token = page.r#continue;
    }
    eprintln!("{PODS} pods listed in {pages} pages");
    assert_eq!(seen.len(), PODS, "every pod listed");
    assert!(pages > 1, "{PODS} pods came in one page");
    touching.await.unwrap();
    wait_for(
        Duration::from_secs(30),
        "keys created during the List to be done",
        || async {
            let s = fleet.status().await?;
            let q = s.queues.iter().find(|q| q.controller == "journal")?;
            (q.depth == 0 && q.processing == 0).then_some(())
        },
    )
    .await;
    report("pods listed", &coordinator, before);

    // The lister goes with the crowd's streams and leases when the test ends.
    let _ = etcd.delete(keys.controller("lister"), None).await;
}
