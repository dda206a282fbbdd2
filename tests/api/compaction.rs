//! Compaction: a watch, a continue token or an exact list from a compacted revision is 410 Expired
//! (fixtures `errors/watch-rv-1-410.json`, `list-continue-compacted-410.json`,
//! `list-exact-rv-compacted-410.json`). Forcing compaction needs devcluster.

use serde_json::json;

use super::common::{SOON, configmap, configmaps, create, get_ok, rv, setup};
use crate::support::raw;
use crate::support::watch::{RawWatch, event_type};

/// Writes `n` ConfigMaps so that the store's revision moves on.
async fn churn(client: &kube::Client, ns: &str, prefix: &str, n: usize) {
    for i in 0..n {
        create(
            client,
            &configmaps(ns),
            &configmap(&format!("{prefix}{i}"), json!({})),
        )
        .await;
    }
}

#[tokio::test]
async fn a_watch_from_a_compacted_revision_gets_an_expired_error_event() {
    let (cluster, client, ns) = setup("compact-watch").await;
    crate::skip_unless_devcluster!(cluster, "forced compaction");
    let first = create(&client, &configmaps(&ns), &configmap("a", json!({}))).await;
    churn(&client, &ns, "churn", 3).await;
    let compacted = cluster.compact_now().await.unwrap();
    assert!(compacted > i64::try_from(rv(&first)).unwrap());

    let path = format!(
        "{}?watch=true&resourceVersion={}",
        configmaps(&ns),
        rv(&first)
    );
    let mut watch = RawWatch::open(&client, &path).await;
    let error = watch.next(SOON, "the ERROR event").await;
    assert_eq!(event_type(&error), "ERROR", "{error}");
    let status = &error["object"];
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 410);
    assert_eq!(status["reason"], "Expired");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version"),
        "{status}"
    );
    assert_eq!(
        watch
            .next_or_end(SOON, "the stream to close after the error")
            .await,
        None
    );

    // A watch from the current revision still works.
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
    create(&client, &configmaps(&ns), &configmap("after", json!({}))).await;
    assert_eq!(event_type(&watch.next(SOON, "ADDED after").await), "ADDED");
}

#[tokio::test]
async fn a_continue_token_from_before_compaction_is_410_expired_with_a_fresh_token() {
    // Surprise 23: the 410 carries an inconsistent continue token to resume from.
    let (cluster, client, ns) = setup("compact-continue").await;
    crate::skip_unless_devcluster!(cluster, "forced compaction");
    churn(&client, &ns, "cm", 3).await;
    let page = get_ok(&client, &format!("{}?limit=1", configmaps(&ns))).await;
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    churn(&client, &ns, "more", 2).await;
    cluster.compact_now().await.unwrap();

    let reply = raw::get(
        &client,
        &format!("{}?limit=1&continue={token}", configmaps(&ns)),
    )
    .await;
    let status = reply.expect_status(410, "Expired");
    assert!(
        status["message"].as_str().unwrap().starts_with(
            "The provided continue parameter is too old to display a consistent list result."
        ),
        "{status}"
    );
    let fresh = status["metadata"]["continue"].as_str().unwrap_or_default();
    assert!(!fresh.is_empty(), "a fresh continue token: {status}");
    let rest = get_ok(
        &client,
        &format!("{}?limit=10&continue={fresh}", configmaps(&ns)),
    )
    .await;
    let names = super::common::names(&rest);
    assert!(
        !names.contains(&"cm0".to_string()) && names.contains(&"cm1".to_string()),
        "{names:?}"
    );
}

#[tokio::test]
async fn an_exact_list_at_a_compacted_revision_is_410_expired() {
    let (cluster, client, ns) = setup("compact-exact").await;
    crate::skip_unless_devcluster!(cluster, "forced compaction");
    let first = create(&client, &configmaps(&ns), &configmap("a", json!({}))).await;
    churn(&client, &ns, "churn", 2).await;
    cluster.compact_now().await.unwrap();
    let path = format!(
        "{}?resourceVersion={}&resourceVersionMatch=Exact",
        configmaps(&ns),
        rv(&first)
    );
    let status = raw::get(&client, &path).await.expect_status(410, "Expired");
    assert_eq!(
        status["message"],
        "The resourceVersion for the provided list is too old."
    );
}

#[tokio::test]
async fn compaction_can_be_forced_over_http() {
    let (cluster, client, ns) = setup("compact-http").await;
    crate::skip_unless_devcluster!(cluster, "the /flotilla/v1/compact endpoint is devcluster's");
    let created = create(&client, &configmaps(&ns), &configmap("a", json!({}))).await;
    churn(&client, &ns, "churn", 2).await;
    let reply = raw::request(
        &client,
        http::Method::POST,
        "/flotilla/v1/compact",
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let path = format!(
        "{}?resourceVersion={}&resourceVersionMatch=Exact",
        configmaps(&ns),
        rv(&created)
    );
    raw::get(&client, &path).await.expect_status(410, "Expired");
}
