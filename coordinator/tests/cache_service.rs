//! The Cache gRPC service over real informers, etcd and the devcluster API server, through a real tonic
//! client: unsynced kinds are Unavailable, Get/List answer from the cache to a registered worker, bad
//! requests are InvalidArgument, strangers are refused.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use flotilla_common::ResourceKind;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use flotilla_coordinator::{
    CacheAccess, CacheListLimits, FleetMetrics, InformerEvent, Informers, WorkerReads,
    cache_service,
};
use flotilla_devcluster::{DevCluster, DevClusterConfig, EtcdServer};
use flotilla_proto as proto;
use flotilla_proto::cache_client::CacheClient;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

fn configmaps() -> ResourceKind {
    ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)
}

fn names(response: &proto::ListResponse) -> Vec<String> {
    response
        .objects
        .iter()
        .map(|o| {
            let v: serde_json::Value = serde_json::from_slice(o).unwrap();
            v["metadata"]["name"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn workers_read_the_coordinators_cache_over_grpc() {
    let etcd = EtcdServer::start().await.unwrap();
    let cluster = DevCluster::start(DevClusterConfig {
        etcd_endpoints: etcd.endpoints(),
        listen: "127.0.0.1:0".parse().unwrap(),
        compact_interval: None,
        bookmark_interval: Duration::from_secs(1),
        extension: None,
    })
    .await
    .unwrap();
    let client = cluster.client().await.unwrap();
    let namespace =
        serde_json::from_value::<Namespace>(json!({"metadata": {"name": "a"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let configmaps_a = Api::<ConfigMap>::namespaced(client.clone(), "a");
    for (name, app) in [("web", "web"), ("db", "db")] {
        let cm =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}}}))
                .unwrap();
        configmaps_a
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }

    let informers = Informers::new(
        client,
        &mut prometheus_client::registry::Registry::default(),
    );
    let mut events = informers.subscribe();
    // The leader's dispatcher would publish this: worker w0 on lease 7 runs a controller of ConfigMaps.
    let access = CacheAccess::default();
    access.publish(HashMap::from([(
        "w0".to_owned(),
        WorkerReads {
            lease: 7,
            kinds: HashSet::from([configmaps()]),
            owner_graph: false,
        },
    )]));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(cache_service(
                informers.clone(),
                Arc::new(move || Some(access.clone())),
                FleetMetrics::default(),
                CacheListLimits::default(),
            ))
            .serve_with_incoming_shutdown(
                TcpListenerStream::new(listener),
                stop.clone().cancelled_owned(),
            ),
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut stranger = CacheClient::new(channel.clone());
    let mut cache = CacheClient::with_interceptor(channel, |mut request: tonic::Request<()>| {
        let metadata = request.metadata_mut();
        metadata.insert(proto::WORKER_ID_METADATA, "w0".parse().unwrap());
        metadata.insert(proto::LEASE_ID_METADATA, "7".parse().unwrap());
        Ok(request)
    });

    let get = proto::GetRequest {
        kind: Some((&configmaps()).into()),
        namespace: "a".into(),
        name: "web".into(),
    };
    let status = cache.get(get.clone()).await.unwrap_err();
    assert_eq!(
        status.code(),
        tonic::Code::Unavailable,
        "{}",
        status.message()
    );
    assert_eq!(
        status.message(),
        "informer for v1/configmaps not synced yet"
    );
    assert!(
        informers.kinds().is_empty(),
        "a cache request must not start an informer"
    );
    // The leader starts the informers of the kinds its controllers declare.
    informers.ensure(&configmaps());

    let synced = async {
        while let Some(event) = events.recv().await {
            if matches!(event, InformerEvent::Synced { .. }) {
                return;
            }
        }
    };
    tokio::time::timeout(WAIT, synced)
        .await
        .expect("the informer did not sync");
    let status = stranger.get(get.clone()).await.unwrap_err();
    assert_eq!(
        status.code(),
        tonic::Code::Unauthenticated,
        "{}",
        status.message()
    );

    let object = cache
        .get(get)
        .await
        .unwrap()
        .into_inner()
        .object
        .expect("a/web is cached");
    let object: serde_json::Value = serde_json::from_slice(&object).unwrap();
    assert_eq!(
        (object["kind"].as_str(), object["metadata"]["name"].as_str()),
        (Some("ConfigMap"), Some("web"))
    );
    let missing = proto::GetRequest {
        kind: Some((&configmaps()).into()),
        namespace: "a".into(),
        name: "nope".into(),
    };
    assert_eq!(cache.get(missing).await.unwrap().into_inner().object, None);

    let list = |selector: &str, index: &str| proto::ListRequest {
        kind: Some((&configmaps()).into()),
        namespace: "a".into(),
        label_selector: selector.into(),
        index: index.into(),
        index_value: String::new(),
        ..Default::default()
    };
    let all = cache.list(list("", "")).await.unwrap().into_inner();
    assert_eq!(names(&all), ["db", "web"]);
    assert!(all.resource_version.parse::<u64>().unwrap() > 0);
    assert_eq!(
        names(
            &cache
                .list(list("app notin (db)", ""))
                .await
                .unwrap()
                .into_inner()
        ),
        ["web"]
    );
    for (selector, index) in [("app in (", ""), ("", "by-color")] {
        let status = cache.list(list(selector, index)).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{}",
            status.message()
        );
    }

    stop.cancel();
    tokio::time::timeout(WAIT, server)
        .await
        .expect("the gRPC server did not stop")
        .unwrap()
        .unwrap();
    informers.shutdown();
}
