//! How many no-op items one in-process worker turns around per second against a coordinator that
//! assigns as fast as credits allow. A measurement, not a timed test: run it with
//! `cargo test -p flotilla-worker --release --test throughput -- --ignored --nocapture`.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use flotilla_common::{Election, FleetKeys, LeaderInfo, Session, SessionConfig, connect_etcd};
use flotilla_devcluster::EtcdServer;
use flotilla_proto as proto;
use flotilla_sdk::{Action, Context, Controller, Request};
use flotilla_worker::{Worker, WorkerConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use proto::coordinator_message::Msg as Out;
use proto::worker_message::Msg as In;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Status, Streaming};

type Outgoing = mpsc::Sender<Result<proto::CoordinatorMessage, Status>>;

struct Greedy {
    streams: mpsc::UnboundedSender<(Streaming<proto::WorkerMessage>, Outgoing)>,
}

#[tonic::async_trait]
impl proto::dispatch_server::Dispatch for Greedy {
    type WorkStream = ReceiverStream<Result<proto::CoordinatorMessage, Status>>;

    async fn work(
        &self,
        request: tonic::Request<Streaming<proto::WorkerMessage>>,
    ) -> Result<tonic::Response<Self::WorkStream>, Status> {
        let (tx, rx) = mpsc::channel(1024);
        self.streams
            .send((request.into_inner(), tx))
            .map_err(|_| Status::unavailable("over"))?;
        Ok(tonic::Response::new(ReceiverStream::new(rx)))
    }
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run by hand"]
async fn one_worker_turns_around_no_op_items() {
    let etcd_server = EtcdServer::start().await.unwrap();
    let etcd = connect_etcd(&etcd_server.endpoints()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (streams_tx, mut streams) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(proto::dispatch_server::DispatchServer::new(Greedy {
                streams: streams_tx,
            }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let session = Session::start(etcd.clone(), SessionConfig::default())
        .await
        .unwrap();
    let election = Election::new(etcd.clone(), FleetKeys::new("bench").election());
    let term = election
        .campaign(
            &session,
            &LeaderInfo {
                id: "greedy".into(),
                address,
            },
        )
        .await
        .unwrap()
        .term();

    let controller = Controller::<ConfigMap>::new("noop")
        .concurrency(512)
        .reconcile(|_req: Request<ConfigMap>, _ctx: Context| async {
            Ok::<_, Never>(Action::await_change())
        });
    let kube = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let config = WorkerConfig::new("bench-1", "bench", etcd_server.endpoints(), kube);
    let worker = Worker::start(config, vec![controller.into()])
        .await
        .unwrap();

    let (mut incoming, out) = streams.recv().await.unwrap();
    let _hello = incoming.message().await.unwrap().unwrap();
    let welcome = proto::Welcome {
        term,
        ..Default::default()
    };
    out.send(Ok(proto::CoordinatorMessage {
        msg: Some(Out::Welcome(welcome)),
    }))
    .await
    .unwrap();
    let mut next_id = 0u64;
    let mut done = 0u64;
    let run_for = Duration::from_secs(3);
    let started = Instant::now();
    while started.elapsed() < run_for {
        let Some(message) = incoming.message().await.unwrap() else {
            break;
        };
        match message.msg.unwrap() {
            In::Credit(credit) => {
                let items = (0..credit.n)
                    .map(|_| {
                        next_id += 1;
                        proto::Assign {
                            item_id: next_id,
                            term,
                            controller: "noop".into(),
                            key: format!("ns/k{}", next_id % 100_000),
                            ..Default::default()
                        }
                    })
                    .collect();
                let batch = proto::AssignBatch { items };
                out.send(Ok(proto::CoordinatorMessage {
                    msg: Some(Out::Assign(batch)),
                }))
                .await
                .unwrap();
            }
            In::Done(batch) => done += batch.items.len() as u64,
            In::Hello(_) => panic!("unexpected Hello"),
            // Untraced: none are sent.
            In::Intents(_) => {}
        }
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    println!("{done} items in {:?}: {rate:.0} items/s", started.elapsed());
    assert!(done > 0);
    drop(worker);
}
