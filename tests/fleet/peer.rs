//! A hand-driven peer of the coordinator's gRPC services, for the bad-input tests: registers itself in
//! etcd like a worker, opens Dispatch streams with whatever Hello the test writes, and reads the Cache
//! with whatever identity it claims.

use flotilla_common::{FleetKeys, connect_etcd};
use flotilla_proto as proto;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::support::fleet::Fleet;

/// The `v1/configmaps` kind.
pub fn configmaps() -> proto::ResourceKind {
    kind("", "v1", "ConfigMap", "configmaps")
}

/// A kind.
pub fn kind(group: &str, version: &str, kind: &str, plural: &str) -> proto::ResourceKind {
    proto::ResourceKind {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced: true,
    }
}

/// A spec named `name` reconciling `primary`.
pub fn spec(name: &str, primary: proto::ResourceKind) -> proto::ControllerSpec {
    proto::ControllerSpec {
        name: name.into(),
        primary: Some(primary),
        ..Default::default()
    }
}

/// A Hello of `worker_id` on `lease_id` running `controllers` (spec, concurrency).
pub fn hello_with(
    worker_id: &str,
    lease_id: i64,
    controllers: Vec<(proto::ControllerSpec, u32)>,
) -> proto::WorkerMessage {
    proto::WorkerMessage {
        msg: Some(proto::worker_message::Msg::Hello(proto::Hello {
            worker_id: worker_id.into(),
            lease_id,
            controllers: controllers
                .into_iter()
                .map(|(spec, concurrency)| proto::ControllerCapacity {
                    spec: Some(spec),
                    concurrency,
                })
                .collect(),
            known_term: 0,
            held: vec![],
        })),
    }
}

/// A Hello of `worker_id` on `lease_id`, having seen `known_term`, running one `controller` of
/// ConfigMaps with concurrency 1.
pub fn hello(
    worker_id: &str,
    lease_id: i64,
    known_term: u64,
    controller: &str,
) -> proto::WorkerMessage {
    let mut message = hello_with(
        worker_id,
        lease_id,
        vec![(spec(controller, configmaps()), 1)],
    );
    if let Some(proto::worker_message::Msg::Hello(h)) = &mut message.msg {
        h.known_term = known_term;
    }
    message
}

/// Opens a Dispatch stream whose messages the test sends by hand.
pub async fn open(
    addr: &str,
    first: proto::WorkerMessage,
) -> (
    mpsc::Sender<proto::WorkerMessage>,
    Result<tonic::Streaming<proto::CoordinatorMessage>, tonic::Status>,
) {
    let mut client = proto::dispatch_client::DispatchClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .max_encoding_message_size(proto::MAX_MESSAGE_BYTES)
        .max_decoding_message_size(proto::MAX_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel(16);
    tx.send(first).await.unwrap();
    let response = client
        .work(ReceiverStream::new(rx))
        .await
        .map(tonic::Response::into_inner);
    (tx, response)
}

/// Opens a Dispatch stream with `hello` and waits for the leader's Welcome; panics if it refuses.
pub async fn welcomed(
    addr: &str,
    hello: proto::WorkerMessage,
) -> (
    mpsc::Sender<proto::WorkerMessage>,
    tonic::Streaming<proto::CoordinatorMessage>,
) {
    let (tx, stream) = open(addr, hello).await;
    let mut stream = stream.unwrap_or_else(|status| panic!("Hello refused: {status}"));
    let first = crate::support::wait::within(
        std::time::Duration::from_secs(5),
        "Welcome",
        stream.message(),
    )
    .await;
    assert!(
        matches!(
            first,
            Ok(Some(proto::CoordinatorMessage {
                msg: Some(proto::coordinator_message::Msg::Welcome(_))
            }))
        ),
        "expected a Welcome, got {first:?}"
    );
    (tx, stream)
}

/// Registers worker `id` in `fleet`'s etcd on a new lease of `ttl_secs`, advertising `capacity`;
/// returns the etcd client and the lease.
pub async fn register(
    fleet: &Fleet,
    id: &str,
    ttl_secs: i64,
    capacity: u32,
) -> (etcd_client::Client, i64) {
    let mut etcd = connect_etcd(&fleet.etcd_endpoints).await.unwrap();
    let lease = etcd.lease_grant(ttl_secs, None).await.unwrap().id();
    etcd.put(
        FleetKeys::new(&fleet.name).worker(id),
        format!(r#"{{"id":"{id}","capacity":{capacity}}}"#),
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .unwrap();
    (etcd, lease)
}

/// A Cache client claiming to be `worker` on `lease` (no metadata when `worker` is `None`).
pub async fn cache_client(
    addr: &str,
    identity: Option<(&str, i64)>,
) -> proto::cache_client::CacheClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        impl tonic::service::Interceptor + use<>,
    >,
> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let identity = identity.map(|(w, l)| (w.to_owned(), l));
    proto::cache_client::CacheClient::with_interceptor(
        channel,
        move |mut request: tonic::Request<()>| {
            if let Some((worker, lease)) = &identity {
                let metadata = request.metadata_mut();
                metadata.insert(proto::WORKER_ID_METADATA, worker.parse().unwrap());
                metadata.insert(proto::LEASE_ID_METADATA, lease.to_string().parse().unwrap());
            }
            Ok(request)
        },
    )
}
