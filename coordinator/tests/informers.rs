//! The shared informers against a real etcd and the devcluster API server: sync, ordered events, indexes,
//! and the relist after a compaction that reports what vanished while the watch was down.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_common::ResourceKind;
use flotilla_coordinator::{InformerEvent, Informers};
use flotilla_devcluster::{DevCluster, DevClusterConfig, EtcdServer};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// Long enough for a loaded 2-core machine; every wait below ends as soon as its event arrives.
const WAIT: Duration = Duration::from_secs(30);

fn configmaps() -> ResourceKind {
    ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)
}

fn pods() -> ResourceKind {
    ResourceKind::new("", "v1", "Pod", "pods", true)
}

/// A TCP proxy between the informers and the API server that can cut every connection and refuse
/// new ones, so a test can take the watch down while the cluster changes.
struct Proxy {
    addr: SocketAddr,
    up: watch::Sender<bool>,
    /// How many proxied connections are open.
    open: Arc<watch::Sender<usize>>,
    accept: tokio::task::JoinHandle<()>,
}

/// Counts one proxied connection as open while it lives.
struct OpenConnection(Arc<watch::Sender<usize>>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, up_rx) = watch::channel(true);
        let open = Arc::new(watch::Sender::new(0));
        let counter = open.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !*up_rx.borrow() {
                    continue;
                }
                counter.send_modify(|n| *n += 1);
                let guard = OpenConnection(counter.clone());
                let mut up_rx = up_rx.clone();
                tokio::spawn(async move {
                    let _guard = guard;
                    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        biased;
                        _ = up_rx.wait_for(|up| !*up) => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                    }
                });
            }
        });
        Self {
            addr,
            up,
            open,
            accept,
        }
    }

    fn client(&self) -> kube::Client {
        let config = kube::Config::new(format!("http://{}", self.addr).parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    /// Closes every proxied connection (returning once they are all closed) and refuses new ones
    /// until [`Proxy::restore`].
    async fn cut(&self) {
        self.up.send_replace(false);
        let mut open = self.open.subscribe();
        tokio::time::timeout(WAIT, open.wait_for(|n| *n == 0))
            .await
            .expect("proxied connections did not close")
            .unwrap();
    }

    fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.up.send_replace(false);
        self.accept.abort();
    }
}

struct Fixture {
    proxy: Proxy,
    /// Talks to the API server directly, past the proxy.
    client: kube::Client,
    cluster: DevCluster,
    _etcd: EtcdServer,
}

impl Fixture {
    async fn start() -> Self {
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
        let proxy = Proxy::start(cluster.addr()).await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for ns in ["a", "b"] {
            let namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            namespaces
                .create(&PostParams::default(), &namespace)
                .await
                .unwrap();
        }
        Self {
            proxy,
            client,
            cluster,
            _etcd: etcd,
        }
    }

    fn informers(&self) -> Informers {
        Informers::new(
            self.proxy.client(),
            &mut prometheus_client::registry::Registry::default(),
        )
    }

    async fn create_configmap(
        &self,
        ns: &str,
        name: &str,
        labels: serde_json::Value,
        owner: Option<&str>,
    ) -> ConfigMap {
        let owners: Vec<_> = owner
            .map(|uid| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": true}))
            .into_iter()
            .collect();
        let cm = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "ownerReferences": owners},
            "data": {"k": "v"},
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &cm)
            .await
            .unwrap()
    }

    async fn delete_configmap(&self, ns: &str, name: &str) {
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// The next event, or a panic naming what was awaited.
async fn next(events: &mut mpsc::Receiver<InformerEvent>, what: &str) -> InformerEvent {
    tokio::time::timeout(WAIT, events.recv())
        .await
        .unwrap_or_else(|_| panic!("no event within {WAIT:?} while waiting for {what}"))
        .unwrap_or_else(|| panic!("the event channel closed while waiting for {what}"))
}

/// Skips events until one satisfies `wanted`.
async fn until(
    events: &mut mpsc::Receiver<InformerEvent>,
    what: &str,
    wanted: impl Fn(&InformerEvent) -> bool,
) -> InformerEvent {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap_or_else(|_| panic!("no {what} within {WAIT:?}"))
            .unwrap_or_else(|| panic!("the event channel closed while waiting for {what}"));
        if wanted(&event) {
            return event;
        }
    }
}

fn describe(event: &InformerEvent) -> String {
    match event {
        InformerEvent::Applied { old, new } => {
            format!(
                "applied {} (old: {})",
                new.key(),
                old.as_ref()
                    .map_or("none".into(), |o| o.resource_version.to_string())
            )
        }
        InformerEvent::Deleted {
            old,
            final_state_unknown,
        } => {
            format!(
                "deleted {} (final state unknown: {final_state_unknown})",
                old.key()
            )
        }
        InformerEvent::Synced { kind } => format!("synced {kind}"),
    }
}

#[tokio::test]
async fn informers_sync_then_report_adds_updates_and_deletes_in_order_with_indexes() {
    let fx = Fixture::start().await;
    fx.create_configmap("a", "pre", json!({"app": "web"}), None)
        .await;

    let informers = fx.informers();
    let mut events = informers.subscribe();
    assert!(!informers.is_synced(&configmaps()));
    informers.ensure(&configmaps());
    informers.ensure(&configmaps());

    assert_eq!(
        describe(&next(&mut events, "the listed object").await),
        "applied a/pre (old: none)"
    );
    assert_eq!(
        describe(&next(&mut events, "the sync").await),
        "synced v1/configmaps"
    );
    assert!(informers.is_synced(&configmaps()));
    let store = informers.store(&configmaps()).unwrap();
    assert!(
        store.get("a/pre").unwrap().to_value()["metadata"]
            .get("managedFields")
            .is_none()
    );

    let created = fx
        .create_configmap("a", "one", json!({"app": "web"}), Some("owner-1"))
        .await;
    let created_rv: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    let InformerEvent::Applied { old: None, new } = next(&mut events, "the add").await else {
        panic!("expected an add")
    };
    assert_eq!(
        (new.key(), new.resource_version),
        ("a/one".to_owned(), created_rv)
    );
    assert!(
        store.get("a/one").is_some(),
        "the store must hold an object before its event arrives"
    );

    Api::<ConfigMap>::namespaced(fx.client.clone(), "a")
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": "api"}}})),
        )
        .await
        .unwrap();
    let InformerEvent::Applied {
        old: Some(old),
        new,
    } = next(&mut events, "the update").await
    else {
        panic!("expected an update")
    };
    assert_eq!(old.resource_version, created_rv);
    assert!(new.resource_version > created_rv);
    assert_eq!(new.labels.get("app").map(String::as_str), Some("api"));

    fx.create_configmap("b", "two", json!({}), Some("owner-1"))
        .await;
    assert_eq!(
        describe(&next(&mut events, "the second add").await),
        "applied b/two (old: none)"
    );
    let owned: Vec<_> = store
        .by_owner_uid("owner-1")
        .iter()
        .map(|o| o.key())
        .collect();
    assert_eq!(owned, ["a/one", "b/two"]);
    let in_a: Vec<_> = store.by_namespace("a").iter().map(|o| o.key()).collect();
    assert_eq!(in_a, ["a/one", "a/pre"]);

    fx.delete_configmap("a", "one").await;
    assert_eq!(
        describe(&next(&mut events, "the delete").await),
        "deleted a/one (final state unknown: false)"
    );
    assert!(store.get("a/one").is_none());
    assert_eq!(store.by_owner_uid("owner-1").len(), 1);

    let pod = serde_json::from_value::<Pod>(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "node-x", "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(fx.client.clone(), "b")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    informers.ensure(&pods());
    until(
        &mut events,
        "the pod sync",
        |e| matches!(e, InformerEvent::Synced { kind } if *kind == pods()),
    )
    .await;
    let on_node: Vec<_> = informers
        .store(&pods())
        .unwrap()
        .by_node_name("node-x")
        .iter()
        .map(|o| o.key())
        .collect();
    assert_eq!(on_node, ["b/p"]);
    let kinds: Vec<_> = informers
        .kinds()
        .into_iter()
        .map(|s| (s.kind.plural, s.synced, s.objects))
        .collect();
    assert_eq!(
        kinds,
        [
            ("configmaps".to_owned(), true, 2),
            ("pods".to_owned(), true, 1)
        ]
    );
    informers.shutdown();
}

#[tokio::test]
async fn a_relist_after_compaction_reports_objects_deleted_while_the_watch_was_down() {
    let fx = Fixture::start().await;
    fx.create_configmap("a", "keep", json!({}), None).await;
    fx.create_configmap("a", "doomed", json!({}), None).await;
    let informers = fx.informers();
    let mut events = informers.subscribe();
    informers.ensure(&configmaps());
    until(&mut events, "the first sync", |e| {
        matches!(e, InformerEvent::Synced { .. })
    })
    .await;

    fx.proxy.cut().await;
    fx.delete_configmap("a", "doomed").await;
    fx.create_configmap("a", "born", json!({}), None).await;
    fx.cluster.compact_now().await.unwrap();
    fx.proxy.restore();

    // The watch resumes from a compacted revision: 410 Gone, a relist, and the diff of the store
    // against it. The delete itself was never seen, so its final state is unknown.
    let mut seen = Vec::new();
    loop {
        let event = next(&mut events, "the relist").await;
        seen.push(describe(&event));
        if matches!(event, InformerEvent::Synced { .. }) {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            "deleted a/doomed (final state unknown: true)",
            "applied a/born (old: none)",
            "synced v1/configmaps"
        ]
    );
    let store = informers.store(&configmaps()).unwrap();
    let keys: Vec<_> = store.list().iter().map(|o| o.key()).collect();
    assert_eq!(keys, ["a/born", "a/keep"]);
    assert!(informers.is_synced(&configmaps()));
    informers.shutdown();
}

#[tokio::test]
async fn a_kind_the_server_does_not_serve_stays_unsynced_without_disturbing_the_others() {
    let fx = Fixture::start().await;
    let informers = fx.informers();
    let mut events = informers.subscribe();
    let missing = ResourceKind::new("example.com", "v1", "Widget", "widgets", true);
    informers.ensure(&missing);
    informers.ensure(&configmaps());
    until(&mut events, "the configmap sync", |e| {
        matches!(e, InformerEvent::Synced { .. })
    })
    .await;
    assert!(informers.is_synced(&configmaps()));
    assert!(!informers.is_synced(&missing));
    assert_eq!(informers.store(&missing).map(|s| s.len()), Some(0));
    informers.shutdown();
}

#[tokio::test]
async fn a_metadata_only_informer_caches_metadata_and_is_upgraded_in_place_to_whole_objects() {
    let fx = Fixture::start().await;
    fx.create_configmap("a", "cm", json!({"app": "web"}), Some("u-rs"))
        .await;
    let informers = fx.informers();
    let mut events = informers.subscribe();

    informers.ensure_metadata(&configmaps());
    until(&mut events, "the metadata-only sync", |e| {
        matches!(e, InformerEvent::Synced { .. })
    })
    .await;
    let store = informers.store(&configmaps()).unwrap();
    let cached = store.get("a/cm").unwrap();
    assert!(
        cached.partial,
        "a metadata-only informer caches partial objects"
    );
    assert!(
        cached.to_value().get("data").is_none(),
        "no body is listed: {}",
        cached.to_value()
    );
    assert_eq!(
        cached.to_value()["kind"],
        "ConfigMap",
        "the object keeps its own kind"
    );
    assert_eq!(cached.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        cached.controller_owner().map(|o| o.uid.as_str()),
        Some("u-rs"),
        "owners are in the metadata"
    );
    informers.ensure_metadata(&configmaps());
    assert!(
        informers.is_synced(&configmaps()),
        "asking again changes nothing"
    );

    informers.ensure(&configmaps());
    assert!(
        !informers.is_synced(&configmaps()),
        "an upgraded informer is unsynced until its whole objects are listed"
    );
    assert!(
        store.get("a/cm").is_some_and(|o| o.partial),
        "until then the store keeps serving the metadata"
    );
    let upgraded = until(
        &mut events,
        "the whole object",
        |e| matches!(e, InformerEvent::Applied { new, .. } if new.key() == "a/cm" && !new.partial),
    )
    .await;
    let InformerEvent::Applied { old, new } = upgraded else {
        unreachable!()
    };
    assert!(
        old.is_some_and(|o| o.partial),
        "the whole object replaces the partial one as an update"
    );
    assert_eq!(new.to_value()["data"]["k"], "v");
    until(&mut events, "the upgraded sync", |e| {
        matches!(e, InformerEvent::Synced { .. })
    })
    .await;
    assert!(informers.is_synced(&configmaps()));
    assert!(
        informers
            .store(&configmaps())
            .unwrap()
            .get("a/cm")
            .is_some_and(|o| !o.partial)
    );
    informers.shutdown();
}
