//! Watch semantics (fixtures `listwatch/watch-*`): from a resourceVersion, "" and "0", bookmarks,
//! timeoutSeconds, selectors, streaming lists. No sleeps: every event is awaited with a bound.

use std::time::Duration;

use serde_json::json;

use super::common::{SOON, configmap, configmaps, create, get_ok, names, rv, setup};
use crate::support::raw;
use crate::support::watch::{RawWatch, event_name, event_type};

#[tokio::test]
async fn a_watch_from_a_resource_version_sees_only_later_changes_in_order() {
    // Fixture listwatch/watch-rv-current.json.
    let (_cluster, client, ns) = setup("watch-rv").await;
    create(&client, &configmaps(&ns), &configmap("before", json!({}))).await;
    let list = get_ok(&client, &configmaps(&ns)).await;
    let mut watch = RawWatch::open(
        &client,
        &format!(
            "{}?watch=true&resourceVersion={}",
            configmaps(&ns),
            rv(&list)
        ),
    )
    .await;
    let created = create(
        &client,
        &configmaps(&ns),
        &configmap("live", json!({"k": "1"})),
    )
    .await;
    let path = format!("{}/live", configmaps(&ns));
    let patched = raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"data": {"k": "2"}}),
    )
    .await
    .expect_ok(200);
    raw::delete(&client, &path, None).await.expect_ok(200);

    let added = watch.next(SOON, "ADDED live").await;
    assert_eq!(
        (event_type(&added), event_name(&added)),
        ("ADDED", "live"),
        "{added}"
    );
    assert_eq!(added["object"]["kind"], "ConfigMap");
    assert_eq!(added["object"]["apiVersion"], "v1");
    assert_eq!(
        added["object"]["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    let modified = watch.next(SOON, "MODIFIED live").await;
    assert_eq!(event_type(&modified), "MODIFIED", "{modified}");
    assert_eq!(modified["object"]["data"]["k"], "2");
    assert_eq!(
        modified["object"]["metadata"]["resourceVersion"],
        patched["metadata"]["resourceVersion"]
    );
    let deleted = watch.next(SOON, "DELETED live").await;
    assert_eq!(
        (event_type(&deleted), event_name(&deleted)),
        ("DELETED", "live"),
        "{deleted}"
    );
    assert!(
        rv(&deleted["object"]) > rv(&modified["object"]),
        "a delete gets a new resourceVersion"
    );
}

#[tokio::test]
async fn a_watch_with_resource_version_unset_or_zero_starts_with_synthetic_added_events() {
    // Fixtures listwatch/watch-rv-unset.json and watch-rv-0.json (Surprise 24).
    let (_cluster, client, ns) = setup("watch-initial").await;
    for name in ["a", "b", "c"] {
        create(&client, &configmaps(&ns), &configmap(name, json!({}))).await;
    }
    for query in [
        "watch=true",
        "watch=true&resourceVersion=0",
        "watch=true&resourceVersion=",
    ] {
        let mut existing = names(&get_ok(&client, &configmaps(&ns)).await);
        existing.sort();
        let mut watch = RawWatch::open(&client, &format!("{}?{query}", configmaps(&ns))).await;
        let mut initial = Vec::new();
        for _ in 0..existing.len() {
            let event = watch.next(SOON, &format!("initial ADDED ({query})")).await;
            assert_eq!(event_type(&event), "ADDED", "{query}: {event}");
            initial.push(event_name(&event).to_string());
        }
        initial.sort();
        assert_eq!(initial, existing, "{query}");
        assert!(existing.starts_with(&["a".to_string(), "b".to_string(), "c".to_string()]));
        let name = format!("live-{}", crate::support::namespace::random_suffix(4));
        create(&client, &configmaps(&ns), &configmap(&name, json!({}))).await;
        let live = watch.next(SOON, &format!("live ADDED ({query})")).await;
        assert_eq!(
            (event_type(&live), event_name(&live)),
            ("ADDED", name.as_str()),
            "{query}"
        );
    }
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream() {
    let (_cluster, client, ns) = setup("watch-timeout").await;
    // Before the open: the server's second runs from when it took the request.
    let started = tokio::time::Instant::now();
    let mut watch = RawWatch::open(
        &client,
        &format!("{}?watch=true&timeoutSeconds=1", configmaps(&ns)),
    )
    .await;
    let events = watch
        .until_end(SOON, "the server to close a timeoutSeconds=1 watch")
        .await;
    assert!(
        events.iter().all(|e| event_type(e) != "ERROR"),
        "{events:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "closed too early: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn bookmarks_carry_only_kind_api_version_and_resource_version() {
    // Fixture listwatch/watch-bookmarks.json (Surprise 26).
    let (cluster, client, ns) = setup("watch-bookmark").await;
    crate::skip_unless_devcluster!(
        cluster,
        "upstream sends the first bookmark only after about a minute"
    );
    let list = get_ok(&client, &configmaps(&ns)).await;
    let path = format!(
        "{}?watch=true&allowWatchBookmarks=true&resourceVersion={}",
        configmaps(&ns),
        rv(&list)
    );
    let mut watch = RawWatch::open(&client, &path).await;
    let created = create(&client, &configmaps(&ns), &configmap("x", json!({}))).await;
    let added = watch
        .next_matching(SOON, "ADDED x", |e| event_type(e) == "ADDED")
        .await;
    assert_eq!(event_name(&added), "x");
    let bookmark = watch
        .next_matching(SOON, "a BOOKMARK", |e| event_type(e) == "BOOKMARK")
        .await;
    let object = &bookmark["object"];
    assert_eq!(object["kind"], "ConfigMap");
    assert_eq!(object["apiVersion"], "v1");
    assert!(
        rv(object) >= rv(&created),
        "bookmark rv {} behind the last event {}",
        rv(object),
        rv(&created)
    );
    assert!(
        object.get("data").is_none() && object["metadata"].get("name").is_none(),
        "{object}"
    );
}

#[tokio::test]
async fn watches_without_allow_watch_bookmarks_get_no_bookmarks() {
    let (cluster, client, ns) = setup("watch-nobookmark").await;
    crate::skip_unless_devcluster!(
        cluster,
        "needs devcluster's 1 s bookmark cadence to be meaningful"
    );
    let mut watch = RawWatch::open(
        &client,
        &format!("{}?watch=true&timeoutSeconds=3", configmaps(&ns)),
    )
    .await;
    let events = watch.until_end(SOON, "the end of a 3 s watch").await;
    assert!(
        events.iter().all(|e| event_type(e) != "BOOKMARK"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_field_selector_watch_sees_only_the_named_object() {
    let (_cluster, client, ns) = setup("watch-field").await;
    let mut watch = RawWatch::open(
        &client,
        &format!(
            "{}?watch=true&fieldSelector=metadata.name%3Dwanted",
            configmaps(&ns)
        ),
    )
    .await;
    create(&client, &configmaps(&ns), &configmap("other", json!({}))).await;
    create(&client, &configmaps(&ns), &configmap("wanted", json!({}))).await;
    let event = watch.next(SOON, "ADDED wanted").await;
    assert_eq!(
        (event_type(&event), event_name(&event)),
        ("ADDED", "wanted"),
        "{event}"
    );
}

#[tokio::test]
async fn an_object_leaving_a_label_selector_is_delivered_as_deleted() {
    let (_cluster, client, ns) = setup("watch-label").await;
    let mut watch = RawWatch::open(
        &client,
        &format!("{}?watch=true&labelSelector=team%3Da", configmaps(&ns)),
    )
    .await;
    create(
        &client,
        &configmaps(&ns),
        &json!({"metadata": {"name": "m", "labels": {"team": "a"}}}),
    )
    .await;
    let added = watch.next(SOON, "ADDED m").await;
    assert_eq!(event_type(&added), "ADDED");
    let path = format!("{}/m", configmaps(&ns));
    raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"team": "b"}}}),
    )
    .await
    .expect_ok(200);
    let gone = watch.next(SOON, "m leaving the selector").await;
    assert_eq!(
        (event_type(&gone), event_name(&gone)),
        ("DELETED", "m"),
        "{gone}"
    );
}

#[tokio::test]
async fn a_streaming_list_ends_its_initial_events_with_an_annotated_bookmark() {
    // Fixtures listwatch/watch-sendinitialevents.json and -no-rvmatch-422.json.
    let (_cluster, client, ns) = setup("watch-streaming").await;
    for name in ["a", "b"] {
        create(&client, &configmaps(&ns), &configmap(name, json!({}))).await;
    }
    let path = format!(
        "{}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        configmaps(&ns)
    );
    let mut watch = RawWatch::open(&client, &path).await;
    for _ in 0..2 {
        let event = watch.next(SOON, "initial ADDED").await;
        assert_eq!(event_type(&event), "ADDED", "{event}");
    }
    let end = watch.next(SOON, "the initial-events-end bookmark").await;
    assert_eq!(event_type(&end), "BOOKMARK", "{end}");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    let without_match = format!(
        "{}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true",
        configmaps(&ns)
    );
    let reply = match RawWatch::try_open(&client, &without_match).await {
        Ok(_) => panic!("sendInitialEvents without resourceVersionMatch must be rejected"),
        Err(reply) => reply,
    };
    reply.expect_status(422, "Invalid");
}

#[tokio::test]
async fn kube_rs_typed_watch_delivers_events() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, WatchEvent, WatchParams};
    let (_cluster, client, ns) = setup("watch-kube").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let list = get_ok(&client, &configmaps(&ns)).await;
    let mut stream = api
        .watch(&WatchParams::default().timeout(30), &rv(&list).to_string())
        .await
        .unwrap()
        .boxed();
    create(&client, &configmaps(&ns), &configmap("typed", json!({}))).await;
    let event = crate::support::watch::next_item(&mut stream, SOON, "typed ADDED")
        .await
        .unwrap();
    match event {
        WatchEvent::Added(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("typed")),
        other => panic!("expected Added, got {other:?}"),
    }
}

#[tokio::test]
async fn a_burst_of_large_updates_reaches_a_watch_whole_and_later_changes_follow() {
    // Eight concurrent updates of ~900 KB ConfigMaps, each event 1.8 MB with its previous value: etcd
    // may batch such events into one watch response past the etcd client's 4 MiB limit, on which a
    // watch cache reading etcd without fragments would fail at every restart (devcluster asks for
    // fragments). Every update arrives whole, and so does a small change after them.
    let (_cluster, client, ns) = setup("watch-large").await;
    let names: Vec<String> = (0..8).map(|i| format!("big-{i}")).collect();
    for name in &names {
        create(
            &client,
            &configmaps(&ns),
            &configmap(name, json!({"blob": "a"})),
        )
        .await;
    }
    let list = get_ok(&client, &configmaps(&ns)).await;
    let mut watch = RawWatch::open(
        &client,
        &format!(
            "{}?watch=true&resourceVersion={}",
            configmaps(&ns),
            rv(&list)
        ),
    )
    .await;
    let body = json!({"data": {"blob": "b".repeat(900_000)}});
    let paths: Vec<String> = names
        .iter()
        .map(|name| format!("{}/{name}", configmaps(&ns)))
        .collect();
    let updates = paths
        .iter()
        .map(|path| raw::patch(&client, path, "application/merge-patch+json", &body));
    for update in futures::future::join_all(updates).await {
        update.expect_ok(200);
    }
    create(&client, &configmaps(&ns), &configmap("small", json!({}))).await;
    let mut seen = Vec::new();
    while seen.len() < names.len() + 1 {
        let event = watch
            .next(Duration::from_secs(30), "the burst's events")
            .await;
        if event_type(&event) == "BOOKMARK" {
            continue;
        }
        if event_type(&event) == "MODIFIED" {
            assert_eq!(
                event["object"]["data"]["blob"].as_str().map(str::len),
                Some(900_000),
                "{}",
                event_name(&event)
            );
        }
        seen.push(event_name(&event).to_owned());
    }
    seen.sort();
    let mut expected = names.clone();
    expected.push("small".into());
    expected.sort();
    assert_eq!(seen, expected);
}
