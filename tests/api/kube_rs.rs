//! kube-rs runtime against the server: a watcher + reflector syncs, typed watches see bookmarks,
//! and a watcher relists after its resourceVersion was compacted away.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use tokio::sync::mpsc;

use super::common::{SOON, configmap, configmaps, create, get_ok, rv, setup};
use crate::support::namespace::unique_namespace;
use crate::support::raw;
use crate::support::wait::{wait_for, within};

/// Runs a reflector over ConfigMaps in `ns`, forwarding the watcher's events (for relist checks).
fn reflect(
    api: Api<ConfigMap>,
    config: watcher::Config,
) -> (
    Store<ConfigMap>,
    mpsc::UnboundedReceiver<&'static str>,
    tokio::task::JoinHandle<()>,
) {
    let (store, writer) = reflector::store();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream =
            reflector::reflector(writer, watcher::watcher(api, config).default_backoff()).boxed();
        while let Some(event) = stream.next().await {
            let kind = match event {
                Ok(Event::Init) => "Init",
                Ok(Event::InitDone) => "InitDone",
                Ok(Event::InitApply(_)) => "InitApply",
                Ok(Event::Apply(_)) => "Apply",
                Ok(Event::Delete(_)) => "Delete",
                Err(_) => "Error",
            };
            if tx.send(kind).is_err() {
                return;
            }
        }
    });
    (store, rx, task)
}

async fn next_kind(rx: &mut mpsc::UnboundedReceiver<&'static str>, wanted: &str, what: &str) {
    within(SOON * 2, what, async {
        while let Some(kind) = rx.recv().await {
            if kind == wanted {
                return;
            }
        }
        panic!("the watcher stopped before {what}");
    })
    .await;
}

fn data(store: &Store<ConfigMap>, ns: &str, name: &str) -> Option<String> {
    store
        .get(&ObjectRef::new(name).within(ns))
        .and_then(|cm| cm.data.as_ref().and_then(|d| d.get("k").cloned()))
}

#[tokio::test]
async fn a_reflector_syncs_and_follows_changes() {
    let (_cluster, client, ns) = setup("kubers-reflector").await;
    create(
        &client,
        &configmaps(&ns),
        &configmap("a", json!({"k": "1"})),
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let (store, mut events, task) = reflect(api, watcher::Config::default());
    within(
        SOON,
        "the reflector's initial sync",
        store.wait_until_ready(),
    )
    .await
    .unwrap();
    next_kind(&mut events, "InitDone", "the initial list").await;
    assert_eq!(data(&store, &ns, "a").as_deref(), Some("1"));

    create(
        &client,
        &configmaps(&ns),
        &configmap("b", json!({"k": "2"})),
    )
    .await;
    let path = format!("{}/a", configmaps(&ns));
    raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"data": {"k": "3"}}),
    )
    .await
    .expect_ok(200);
    raw::delete(&client, &format!("{}/b", configmaps(&ns)), None)
        .await
        .expect_ok(200);
    wait_for(
        SOON,
        "the store to reflect the update and the delete",
        || async {
            (data(&store, &ns, "a").as_deref() == Some("3")
                && data(&store, &ns, "b").is_none()
                && store.state().len() == 1)
                .then_some(())
        },
    )
    .await;
    task.abort();
}

#[tokio::test]
async fn a_typed_watch_with_bookmarks_receives_them() {
    let (cluster, client, ns) = setup("kubers-bookmarks").await;
    crate::skip_unless_devcluster!(
        cluster,
        "upstream sends the first bookmark only after about a minute"
    );
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let list = get_ok(&client, &configmaps(&ns)).await;
    let created = create(&client, &configmaps(&ns), &configmap("x", json!({}))).await;
    let mut stream = api
        .watch(&WatchParams::default().timeout(60), &rv(&list).to_string())
        .await
        .unwrap()
        .boxed();
    let bookmark = within(SOON, "a BOOKMARK", async {
        loop {
            match stream.next().await {
                Some(Ok(WatchEvent::Bookmark(bookmark))) => return bookmark,
                Some(Ok(_)) => continue,
                other => panic!("watch ended before a bookmark: {other:?}"),
            }
        }
    })
    .await;
    let bookmark_rv: u64 = bookmark.metadata.resource_version.parse().unwrap();
    assert!(bookmark_rv >= rv(&created));
}

#[tokio::test]
async fn a_watcher_relists_after_compaction_and_its_store_matches_the_server() {
    let (cluster, client, ns) = setup("kubers-relist").await;
    crate::skip_unless_devcluster!(cluster, "forced compaction");
    create(
        &client,
        &configmaps(&ns),
        &configmap("a", json!({"k": "1"})),
    )
    .await;
    create(
        &client,
        &configmaps(&ns),
        &configmap("b", json!({"k": "1"})),
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // Short watches without bookmarks: the watcher re-watches every second from the revision of
    // the last event it saw in this namespace, which compaction then removes.
    let config = watcher::Config::default().timeout(1).disable_bookmarks();
    let (store, mut events, task) = reflect(api, config);
    next_kind(&mut events, "InitDone", "the initial list").await;
    assert_eq!(store.state().len(), 2);

    let path = format!("{}/a", configmaps(&ns));
    raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"data": {"k": "2"}}),
    )
    .await
    .expect_ok(200);
    raw::delete(&client, &format!("{}/b", configmaps(&ns)), None)
        .await
        .expect_ok(200);
    create(
        &client,
        &configmaps(&ns),
        &configmap("c", json!({"k": "1"})),
    )
    .await;
    // Writes elsewhere move the revision past this namespace's last event.
    let elsewhere = unique_namespace(&client, "kubers-elsewhere").await;
    for i in 0..3 {
        create(
            &client,
            &configmaps(&elsewhere),
            &configmap(&format!("x{i}"), json!({})),
        )
        .await;
    }
    // No writes in this namespace after compaction: the watcher must learn them by relisting.
    cluster.compact_now().await.unwrap();

    next_kind(&mut events, "Init", "a relist after the 410").await;
    next_kind(&mut events, "InitDone", "the relist to finish").await;
    wait_for(
        SOON,
        "the store to match the server after the relist",
        || async {
            let mut names: Vec<String> = store
                .state()
                .iter()
                .filter_map(|cm| cm.metadata.name.clone())
                .collect();
            names.sort();
            (names == ["a", "c"] && data(&store, &ns, "a").as_deref() == Some("2")).then_some(())
        },
    )
    .await;
    task.abort();
}
