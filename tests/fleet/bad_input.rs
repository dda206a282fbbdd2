//! Bad input on the Dispatch stream — garbage bytes, an oversized message, no Hello, a stale term, an
//! unregistered worker, an unknown controller, a Done for an item it does not hold — gets a clear error
//! or is dropped, is counted, and the coordinator keeps serving the real workers.

use std::time::Duration;

use bytes::Bytes;
use flotilla_common::{FleetKeys, connect_etcd};
use flotilla_proto as proto;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use super::common::{JOURNAL_LABEL, JournalFleet, create_configmaps, journal_fleet};
use super::journal::{intervals, now_ns, read};
use super::peer::{hello, open, welcomed};
use crate::support::cluster::TestCluster;
use crate::support::fleet::metric;
use crate::support::namespace::unique_namespace;
use crate::support::wait::{wait_for, within};

/// Sends one raw gRPC frame to Dispatch.Work and returns the grpc-status it ends with.
async fn raw_frame(addr: &str, frame: Vec<u8>) -> String {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let request = http::Request::post(format!("http://{addr}/flotilla.v1.Dispatch/Work"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(frame)))
        .unwrap();
    let response = client.request(request).await.unwrap();
    if let Some(status) = response.headers().get("grpc-status") {
        return status.to_str().unwrap().to_owned();
    }
    let collected = response.into_body().collect().await.unwrap();
    collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

fn framed(payload: &[u8], declared_len: u32) -> Vec<u8> {
    let mut frame = vec![0u8];
    frame.extend(declared_len.to_be_bytes());
    frame.extend(payload);
    frame
}

#[tokio::test(flavor = "multi_thread")]
async fn garbled_stale_unknown_and_silent_peers_are_refused_and_counted_while_real_workers_carry_on()
 {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "badinput").await;
    let JournalFleet {
        fleet,
        journal,
        coordinator,
        worker: _w,
        addr,
    } = journal_fleet(&cluster, &["--worker-hello-timeout", "1s"]).await;

    // Garbage bytes where a WorkerMessage should be: 0xff is an invalid protobuf wire type.
    assert_eq!(
        raw_frame(&addr, framed(&[0xff; 16], 16)).await,
        (Code::InvalidArgument as i32).to_string()
    );
    // A frame announcing more than the 16 MiB limit.
    let status = raw_frame(&addr, framed(&[0; 8], 17 * 1024 * 1024)).await;
    assert_ne!(status, "0", "an oversized message must fail the stream");
    assert!(!status.is_empty());

    // Nothing at all: dropped after the Hello timeout.
    let mut dispatch = proto::dispatch_client::DispatchClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let (_silent_tx, silent_rx) = mpsc::channel::<proto::WorkerMessage>(1);
    let silent = within(
        Duration::from_secs(10),
        "the silent stream to be dropped",
        dispatch.work(ReceiverStream::new(silent_rx)),
    )
    .await;
    assert_eq!(silent.unwrap_err().code(), Code::DeadlineExceeded);

    // A first message that is not Hello.
    let credit = proto::WorkerMessage {
        msg: Some(proto::worker_message::Msg::Credit(proto::Credit {
            controller: "journal".into(),
            n: 1,
        })),
    };
    assert_eq!(
        open(&addr, credit).await.1.unwrap_err().code(),
        Code::InvalidArgument
    );

    // A worker that is not registered on the lease it names.
    assert_eq!(
        open(&addr, hello("ghost", 42, 0, "rogue"))
            .await
            .1
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );

    // A registered worker (lease and key made by hand) that has seen a newer term than the leader's.
    let mut etcd = connect_etcd(&fleet.etcd_endpoints).await.unwrap();
    let lease = etcd.lease_grant(30, None).await.unwrap().id();
    let keys = FleetKeys::new(&fleet.name);
    etcd.put(
        keys.worker("rogue"),
        r#"{"id":"rogue","capacity":1}"#,
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .unwrap();
    assert_eq!(
        open(&addr, hello("rogue", lease, u64::MAX, "rogue"))
            .await
            .1
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );

    // The same worker, properly: welcomed; then a credit for a controller it never registered and a Done
    // for an item it does not hold are counted and ignored, and the stream stays up.
    let (tx, _stream) = welcomed(&addr, hello("rogue", lease, 0, "rogue")).await;
    tx.send(proto::WorkerMessage {
        msg: Some(proto::worker_message::Msg::Credit(proto::Credit {
            controller: "nope".into(),
            n: 5,
        })),
    })
    .await
    .unwrap();
    let done = proto::Done {
        item_id: 999_999,
        term: 1,
        outcome: proto::Outcome::Success as i32,
        ..Default::default()
    };
    tx.send(proto::WorkerMessage {
        msg: Some(proto::worker_message::Msg::Done(proto::DoneBatch {
            items: vec![done],
        })),
    })
    .await
    .unwrap();
    let counted = wait_for(
        Duration::from_secs(10),
        "bad input to be counted",
        || async {
            let text = coordinator.metrics_text().await;
            let ok = metric(
                &text,
                r#"flotilla_bad_input_total{reason="done_for_unknown_item"}"#,
            ) >= 1.0
                && metric(
                    &text,
                    r#"flotilla_bad_input_total{reason="credit_for_unknown_controller"}"#,
                ) >= 1.0
                && metric(
                    &text,
                    r#"flotilla_bad_input_total{reason="garbled_message"}"#,
                ) >= 1.0
                && metric(&text, r#"flotilla_bad_input_total{reason="no_hello"}"#) >= 2.0
                && metric(
                    &text,
                    r#"flotilla_bad_input_total{reason="unregistered_worker"}"#,
                ) >= 1.0
                && metric(&text, r#"flotilla_bad_input_total{reason="stale_term"}"#) >= 1.0
                // "rogue" runs another controller than the real worker: both lack one.
                && metric(
                    &text,
                    r#"flotilla_bad_input_total{reason="worker_lacks_controllers"}"#,
                ) >= 1.0;
            ok.then_some(text)
        },
    )
    .await;
    assert!(counted.contains("flotilla_bad_input_total"));
    drop(tx);

    // Through all of it, the real worker keeps reconciling.
    create_configmaps(&client, &ns, "after", 1, JOURNAL_LABEL).await;
    let key = format!("{ns}/after-0");
    wait_for(
        Duration::from_secs(15),
        "the real worker to reconcile a new key",
        || async {
            intervals(&read(&journal), &Default::default(), now_ns())
                .iter()
                .any(|i| i.key == key && !i.open)
                .then_some(())
        },
    )
    .await;
    let log = coordinator.log_text();
    assert!(log.contains("refusing"), "refusals are logged");
    assert!(
        log.contains("lacks controllers"),
        "a worker lacking the fleet's controllers is logged"
    );
}
