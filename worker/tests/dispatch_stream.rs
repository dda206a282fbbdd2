//! The worker against a scripted coordinator on a real etcd: Hello, credits, Done batches, term
//! refusal, per-key serialization, bad objects, writes reported in Done, self-fencing on a lost lease
//! and graceful shutdown.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use flotilla_common::{Election, FleetKeys, LeaderInfo, Session, SessionConfig, connect_etcd};
use flotilla_devcluster::{DevCluster, DevClusterConfig, EtcdServer};
use flotilla_proto as proto;
use flotilla_sdk::{Action, Context, Controller, DynController, Request};
use flotilla_worker::{Worker, WorkerConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use proto::coordinator_message::Msg as Out;
use proto::worker_message::Msg as In;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Status, Streaming};

type Outgoing = mpsc::Sender<Result<proto::CoordinatorMessage, Status>>;

/// A Dispatch service that hands every accepted stream to the test.
struct Scripted {
    streams: mpsc::UnboundedSender<(Streaming<proto::WorkerMessage>, Outgoing)>,
}

#[tonic::async_trait]
impl proto::dispatch_server::Dispatch for Scripted {
    type WorkStream = ReceiverStream<Result<proto::CoordinatorMessage, Status>>;

    async fn work(
        &self,
        request: tonic::Request<Streaming<proto::WorkerMessage>>,
    ) -> Result<tonic::Response<Self::WorkStream>, Status> {
        let (tx, rx) = mpsc::channel(64);
        self.streams
            .send((request.into_inner(), tx))
            .map_err(|_| Status::unavailable("test over"))?;
        Ok(tonic::Response::new(ReceiverStream::new(rx)))
    }
}

/// A Cache service with one ConfigMap `ns/present` and a List that echoes the query in its answer.
struct ScriptedCache;

#[tonic::async_trait]
impl proto::cache_server::Cache for ScriptedCache {
    async fn get(
        &self,
        request: tonic::Request<proto::GetRequest>,
    ) -> Result<tonic::Response<proto::GetResponse>, Status> {
        let request = request.into_inner();
        let object = (request.name == "present").then(|| configmap("present").into_bytes().into());
        Ok(tonic::Response::new(proto::GetResponse { object }))
    }

    async fn list(
        &self,
        request: tonic::Request<proto::ListRequest>,
    ) -> Result<tonic::Response<proto::ListResponse>, Status> {
        let r = request.into_inner();
        let echo = format!(
            "{}|{}|{}={}|{}",
            r.namespace,
            r.label_selector,
            r.index,
            r.index_value,
            r.kind.unwrap().plural
        );
        let objects = vec![
            configmap(&echo.replace(['|', '='], "-"))
                .into_bytes()
                .into(),
        ];
        Ok(tonic::Response::new(proto::ListResponse {
            objects,
            resource_version: "9".into(),
            ..Default::default()
        }))
    }
}

struct Fleet {
    _etcd_server: EtcdServer,
    etcd: etcd_client::Client,
    endpoints: Vec<String>,
    streams: mpsc::UnboundedReceiver<(Streaming<proto::WorkerMessage>, Outgoing)>,
    term: u64,
    _leader_session: Session,
}

const WAIT: Duration = Duration::from_secs(10);

async fn fleet(name: &str) -> Fleet {
    let etcd_server = EtcdServer::start().await.unwrap();
    let endpoints = etcd_server.endpoints();
    let etcd = connect_etcd(&endpoints).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (streams_tx, streams) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(proto::dispatch_server::DispatchServer::new(Scripted {
                streams: streams_tx,
            }))
            .add_service(proto::cache_server::CacheServer::new(ScriptedCache))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let session = Session::start(etcd.clone(), SessionConfig::default())
        .await
        .unwrap();
    let election = Election::new(etcd.clone(), FleetKeys::new(name).election());
    let elected = election
        .campaign(
            &session,
            &LeaderInfo {
                id: "scripted".into(),
                address,
            },
        )
        .await
        .unwrap();
    Fleet {
        _etcd_server: etcd_server,
        etcd,
        endpoints,
        streams,
        term: elected.term(),
        _leader_session: session,
    }
}

fn config(fleet: &Fleet, name: &str) -> WorkerConfig {
    let kube = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let mut config = WorkerConfig::new("w-1", name, fleet.endpoints.clone(), kube);
    config.session = SessionConfig {
        ttl: Duration::from_secs(3),
        renew_interval: Duration::from_millis(500),
        renew_deadline: Duration::from_secs(2),
    };
    config.shutdown_grace_period = Duration::from_secs(5);
    config
}

/// A devcluster on the fleet's etcd and a worker configuration whose reconciles reach it.
async fn on_devcluster(fleet: &Fleet, name: &str) -> (DevCluster, WorkerConfig) {
    let cluster = DevCluster::start(DevClusterConfig {
        etcd_endpoints: fleet.endpoints.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut config = config(fleet, name);
    config.kube = kube::Config::from_custom_kubeconfig(cluster.kubeconfig(), &Default::default())
        .await
        .unwrap();
    (cluster, config)
}

/// What the probe controller saw.
#[derive(Default)]
struct Probe {
    started: AtomicUsize,
    running_a: AtomicUsize,
    overlap: AtomicBool,
    cancelled: AtomicBool,
}

struct CancelGuard(Arc<Probe>, bool);

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.cancelled.store(true, Ordering::SeqCst);
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("probe failure")]
struct ProbeError;

fn probe_controller(probe: Arc<Probe>) -> DynController {
    Controller::<ConfigMap>::new("probe")
        .concurrency(2)
        .reconcile(move |request: Request<ConfigMap>, _ctx: Context| {
            let probe = probe.clone();
            async move {
                probe.started.fetch_add(1, Ordering::SeqCst);
                match request.name() {
                    "a" => {
                        if probe.running_a.fetch_add(1, Ordering::SeqCst) > 0 {
                            probe.overlap.store(true, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        probe.running_a.fetch_sub(1, Ordering::SeqCst);
                        Ok(Action::requeue(Duration::from_millis(250)))
                    }
                    "fail" => Err(ProbeError),
                    "forever" => {
                        let mut guard = CancelGuard(probe.clone(), false);
                        std::future::pending::<()>().await;
                        guard.1 = true;
                        Ok(Action::await_change())
                    }
                    "slow" => {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        Ok(Action::await_change())
                    }
                    _ => Ok(Action::await_change()),
                }
            }
        })
        .into()
}

async fn next_stream(fleet: &mut Fleet) -> (Streaming<proto::WorkerMessage>, Outgoing) {
    tokio::time::timeout(WAIT, fleet.streams.recv())
        .await
        .expect("no stream from the worker in time")
        .unwrap()
}

async fn next_message(stream: &mut Streaming<proto::WorkerMessage>) -> In {
    let message = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("no message from the worker in time");
    message.unwrap().expect("stream ended").msg.unwrap()
}

async fn hello(stream: &mut Streaming<proto::WorkerMessage>) -> proto::Hello {
    match next_message(stream).await {
        In::Hello(hello) => hello,
        other => panic!("expected Hello, got {other:?}"),
    }
}

async fn initial_credit(stream: &mut Streaming<proto::WorkerMessage>) -> u32 {
    match next_message(stream).await {
        In::Credit(credit) if credit.controller == "probe" => credit.n,
        other => panic!("expected the initial credit, got {other:?}"),
    }
}

async fn welcome(out: &Outgoing, term: u64) {
    let welcome = proto::Welcome {
        term,
        leader_id: "scripted".into(),
        ..Default::default()
    };
    out.send(Ok(proto::CoordinatorMessage {
        msg: Some(Out::Welcome(welcome)),
    }))
    .await
    .unwrap();
}

async fn assign(out: &Outgoing, items: Vec<proto::Assign>) {
    out.send(Ok(proto::CoordinatorMessage {
        msg: Some(Out::Assign(proto::AssignBatch { items })),
    }))
    .await
    .unwrap();
}

fn item(id: u64, term: u64, controller: &str, key: &str, object: &str) -> proto::Assign {
    proto::Assign {
        item_id: id,
        term,
        controller: controller.into(),
        key: key.into(),
        object: object.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

fn configmap(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"1"}}}}"#
    )
}

/// Reads messages until `n` Dones and `credits` credits arrived; returns the Dones by item id and the
/// credits granted.
async fn dones(
    stream: &mut Streaming<proto::WorkerMessage>,
    n: usize,
    min_credits: u32,
) -> (HashMap<u64, proto::Done>, u32) {
    let mut dones = HashMap::new();
    let mut credits = 0;
    while dones.len() < n || credits < min_credits {
        match next_message(stream).await {
            In::Done(batch) => dones.extend(batch.items.into_iter().map(|d| (d.item_id, d))),
            In::Credit(credit) => credits += credit.n,
            In::Hello(_) => panic!("unexpected Hello"),
            // Untraced: none are sent.
            In::Intents(_) => {}
        }
    }
    (dones, credits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_says_hello_takes_items_reports_them_and_refuses_what_it_must() {
    let mut fleet = fleet("stream").await;
    let probe = Arc::new(Probe::default());
    let worker = Worker::start(
        config(&fleet, "stream"),
        vec![probe_controller(probe.clone())],
    )
    .await
    .unwrap();
    let (mut stream, out) = next_stream(&mut fleet).await;
    let hello = hello(&mut stream).await;
    assert_eq!(hello.worker_id, "w-1");
    assert_eq!(hello.known_term, fleet.term);
    assert!(hello.held.is_empty());
    assert_eq!(hello.controllers.len(), 1);
    let spec = hello.controllers[0].spec.clone().unwrap();
    assert_eq!(
        (spec.name.as_str(), hello.controllers[0].concurrency),
        ("probe", 2)
    );
    assert_eq!(spec.primary.unwrap().plural, "configmaps");
    let registered = fleet
        .etcd
        .clone()
        .get(FleetKeys::new("stream").worker("w-1"), None)
        .await
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(registered.kvs()[0].value()).unwrap();
    assert_eq!(value["capacity"], 2);
    assert_eq!(
        registered.kvs()[0].lease(),
        hello.lease_id,
        "the registration must live on the worker's lease"
    );

    welcome(&out, fleet.term).await;
    assert_eq!(initial_credit(&mut stream).await, 2);
    assert!(
        tokio::time::timeout(Duration::from_secs(5), async {
            while !worker.is_ready() {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
        })
        .await
        .is_ok(),
        "a welcomed worker must be ready"
    );

    let term = fleet.term;
    assign(
        &out,
        vec![
            item(1, term, "probe", "ns/a", &configmap("a")),
            item(2, term - 1, "probe", "ns/old", &configmap("old")),
            item(3, term, "replicaset", "ns/rs", "{}"),
            item(4, term, "probe", "ns/a", &configmap("a")),
            item(5, term, "probe", "ns/fail", &configmap("fail")),
            item(6, term, "probe", "ns/garbled", "{not json"),
            item(7, term, "probe", "ns/gone", ""),
        ],
    )
    .await;
    let (dones, credits) = dones(&mut stream, 5, 5).await;
    assert_eq!(credits, 5, "one credit per finished item");
    let mut ids: Vec<_> = dones.keys().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 4, 5, 6, 7], "refused items get no Done");
    assert_eq!(dones[&1].outcome(), proto::Outcome::RequeueAfter);
    assert_eq!(dones[&1].requeue_after_ms, 250);
    assert_eq!(dones[&1].term, term);
    assert_eq!(dones[&5].outcome(), proto::Outcome::Error);
    assert_eq!(dones[&5].error, "probe failure");
    assert_eq!(dones[&6].outcome(), proto::Outcome::Error);
    assert!(
        dones[&6].error.contains("not a valid ConfigMap"),
        "{}",
        dones[&6].error
    );
    assert_eq!(
        dones[&7].outcome(),
        proto::Outcome::Success,
        "a gone object is reconciled with None"
    );
    assert!(
        !probe.overlap.load(Ordering::SeqCst),
        "two items of one key ran at once"
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_its_lease_cancels_its_reconciles_and_comes_back_on_a_new_lease() {
    let mut fleet = fleet("fence").await;
    let probe = Arc::new(Probe::default());
    let _worker = Worker::start(
        config(&fleet, "fence"),
        vec![probe_controller(probe.clone())],
    )
    .await
    .unwrap();
    let (mut stream, out) = next_stream(&mut fleet).await;
    let first = hello(&mut stream).await;
    welcome(&out, fleet.term).await;
    assign(
        &out,
        vec![item(
            1,
            fleet.term,
            "probe",
            "ns/forever",
            &configmap("forever"),
        )],
    )
    .await;
    tokio::time::timeout(WAIT, async {
        while probe.started.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await
        }
    })
    .await
    .expect("the item never started");

    fleet
        .etcd
        .clone()
        .lease_revoke(first.lease_id)
        .await
        .unwrap();

    let (mut stream, _out) = next_stream(&mut fleet).await;
    let second = hello(&mut stream).await;
    assert!(
        probe.cancelled.load(Ordering::SeqCst),
        "the running reconcile must be cancelled when the lease is lost"
    );
    assert_ne!(
        second.lease_id, first.lease_id,
        "a new session needs a new lease"
    );
    assert!(
        second.held.is_empty(),
        "items of the lost lease are not held any more"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_finishes_running_items_reports_them_and_revokes_the_lease() {
    let mut fleet = fleet("drain").await;
    let probe = Arc::new(Probe::default());
    let worker = Worker::start(
        config(&fleet, "drain"),
        vec![probe_controller(probe.clone())],
    )
    .await
    .unwrap();
    let (mut stream, out) = next_stream(&mut fleet).await;
    hello(&mut stream).await;
    welcome(&out, fleet.term).await;
    initial_credit(&mut stream).await;
    assign(
        &out,
        vec![item(1, fleet.term, "probe", "ns/slow", &configmap("slow"))],
    )
    .await;
    tokio::time::timeout(WAIT, async {
        while probe.started.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await
        }
    })
    .await
    .expect("the item never started");

    let shutdown = tokio::spawn(worker.shutdown());
    let (dones, credits) = dones(&mut stream, 1, 0).await;
    assert_eq!(credits, 0, "a draining worker grants no credit");
    assert_eq!(dones[&1].outcome(), proto::Outcome::Success);
    tokio::time::timeout(WAIT, shutdown)
        .await
        .expect("shutdown took too long")
        .unwrap();
    let registered = fleet
        .etcd
        .clone()
        .get(FleetKeys::new("drain").worker("w-1"), None)
        .await
        .unwrap();
    assert!(
        registered.kvs().is_empty(),
        "the registration must go with the revoked lease"
    );
}

#[derive(Debug, thiserror::Error)]
#[error("kubernetes call failed")]
struct WriteError(#[from] kube::Error);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_objects_a_reconcile_writes_through_its_client_are_reported_in_done() {
    let mut fleet = fleet("writes").await;
    let (cluster, config) = on_devcluster(&fleet, "writes").await;
    let writer = Controller::<ConfigMap>::new("writer").reconcile(
        |request: Request<ConfigMap>, ctx: Context| async move {
            use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
            let api: Api<ConfigMap> = Api::namespaced(ctx.client(), "default");
            let mut made = ConfigMap::default();
            made.metadata.name = Some(format!("{}-made", request.name()));
            api.create(&PostParams::default(), &made).await?;
            let patch = serde_json::json!({ "data": { "k": "v" } });
            api.patch(
                &format!("{}-made", request.name()),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            api.get(&format!("{}-made", request.name())).await?;
            api.delete(
                &format!("{}-made", request.name()),
                &DeleteParams::default(),
            )
            .await?;
            Ok::<_, WriteError>(Action::await_change())
        },
    );
    let worker = Worker::start(config, vec![writer.into()]).await.unwrap();
    let (mut stream, out) = next_stream(&mut fleet).await;
    hello(&mut stream).await;
    welcome(&out, fleet.term).await;
    let term = fleet.term;
    assign(
        &out,
        vec![proto::Assign {
            item_id: 1,
            term,
            controller: "writer".into(),
            key: "default/x".into(),
            ..Default::default()
        }],
    )
    .await;
    let (dones, _) = dones(&mut stream, 1, 0).await;
    let done = &dones[&1];
    assert_eq!(done.outcome(), proto::Outcome::Success, "{}", done.error);
    let writes: Vec<_> = done
        .writes
        .iter()
        .map(|w| (w.op(), w.key.as_str(), w.kind.clone().unwrap().kind))
        .collect();
    assert_eq!(
        writes,
        [
            (
                proto::WriteOp::Create,
                "default/x-made",
                "ConfigMap".to_owned()
            ),
            (
                proto::WriteOp::Update,
                "default/x-made",
                "ConfigMap".to_owned()
            ),
            (
                proto::WriteOp::Delete,
                "default/x-made",
                "ConfigMap".to_owned()
            ),
        ],
        "reads must not be reported"
    );
    let create_rv: u64 = done.writes[0].resource_version.parse().unwrap();
    let update_rv: u64 = done.writes[1].resource_version.parse().unwrap();
    assert!(
        update_rv > create_rv,
        "each write reports the resourceVersion the server returned"
    );
    worker.shutdown().await;
    cluster.shutdown().await;
}

#[derive(Debug, thiserror::Error)]
#[error("cache read failed")]
struct ReadError(#[from] flotilla_sdk::CacheError);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_reads_typed_objects_from_the_leaders_cache() {
    use flotilla_sdk::CacheQuery;
    let mut fleet = fleet("cache").await;
    let seen = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let record = seen.clone();
    let reader = Controller::<ConfigMap>::new("reader").reconcile(
        move |_request: Request<ConfigMap>, ctx: Context| {
            let record = record.clone();
            async move {
                let present: Option<ConfigMap> = ctx.cache().get(Some("ns"), "present").await?;
                let absent: Option<ConfigMap> = ctx.cache().get(Some("ns"), "absent").await?;
                let query = CacheQuery::all()
                    .namespace("ns")
                    .labels("app=x")
                    .owned_by("u-1");
                let listed: Vec<ConfigMap> = ctx.cache().list(&query).await?;
                let mut record = record.lock();
                record.push(present.and_then(|c| c.metadata.name).unwrap_or_default());
                record.push(format!("{}", absent.is_none()));
                record.extend(listed.into_iter().filter_map(|c| c.metadata.name));
                Ok::<_, ReadError>(Action::await_change())
            }
        },
    );
    let worker = Worker::start(config(&fleet, "cache"), vec![reader.into()])
        .await
        .unwrap();
    let (mut stream, out) = next_stream(&mut fleet).await;
    hello(&mut stream).await;
    welcome(&out, fleet.term).await;
    assign(
        &out,
        vec![item(1, fleet.term, "reader", "ns/x", &configmap("x"))],
    )
    .await;
    let (dones, _) = dones(&mut stream, 1, 0).await;
    assert_eq!(
        dones[&1].outcome(),
        proto::Outcome::Success,
        "{}",
        dones[&1].error
    );
    assert_eq!(
        *seen.lock(),
        ["present", "true", "ns-app-x-owner-uid-u-1-configmaps"]
    );
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_controller_has_its_own_api_budget_as_in_kube_controller_manager() {
    let mut fleet = fleet("budgets").await;
    let (cluster, mut config) = on_devcluster(&fleet, "budgets").await;
    // One token every 2 s, none saved up beyond one.
    config.kube_api_qps = 0.5;
    config.kube_api_burst = 1;
    // `hungry` queues 20 reads at once (each takes its token when first polled), then says so: on a
    // shared budget any later read would wait ~40 s behind them.
    let queued = Arc::new(tokio::sync::Notify::new());
    let hungry = Controller::<ConfigMap>::new("hungry").reconcile({
        let queued = queued.clone();
        move |_request: Request<ConfigMap>, ctx: Context| {
            let queued = queued.clone();
            async move {
                let api: kube::Api<ConfigMap> = kube::Api::namespaced(ctx.client(), "default");
                let params = kube::api::ListParams::default();
                let mut reads = std::pin::pin!(futures::future::try_join_all(
                    (0..20).map(|_| api.list(&params))
                ));
                if let std::task::Poll::Ready(result) = futures::poll!(reads.as_mut()) {
                    result?;
                }
                queued.notify_one();
                reads.await?;
                Ok::<_, kube::Error>(Action::await_change())
            }
        }
    });
    let light = Controller::<ConfigMap>::new("light").reconcile(
        |_request: Request<ConfigMap>, ctx: Context| async move {
            let api: kube::Api<ConfigMap> = kube::Api::namespaced(ctx.client(), "default");
            api.list(&kube::api::ListParams::default()).await?;
            Ok::<_, kube::Error>(Action::await_change())
        },
    );
    let worker = Worker::start(config, vec![hungry.into(), light.into()])
        .await
        .unwrap();
    let (mut stream, out) = next_stream(&mut fleet).await;
    hello(&mut stream).await;
    welcome(&out, fleet.term).await;
    let term = fleet.term;
    assign(&out, vec![item(1, term, "hungry", "default/h", "")]).await;
    tokio::time::timeout(WAIT, queued.notified())
        .await
        .expect("`hungry` never queued its reads");
    assign(&out, vec![item(2, term, "light", "default/l", "")]).await;
    let light_done = async {
        loop {
            if let In::Done(batch) = next_message(&mut stream).await
                && batch.items.iter().any(|d| d.item_id == 2)
            {
                return batch.items.into_iter().find(|d| d.item_id == 2).unwrap();
            }
        }
    };
    let done = tokio::time::timeout(Duration::from_secs(10), light_done)
        .await
        .expect(
            "`light` waited behind `hungry`'s requests: the budget is shared, not per controller",
        );
    assert_eq!(done.outcome(), proto::Outcome::Success, "{}", done.error);
    worker.shutdown().await;
    cluster.shutdown().await;
}
