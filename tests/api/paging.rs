//! List paging with limit and continue (fixtures `listwatch/list-page-*`, `list-limit-*`,
//! `list-resourceversion-0.json`, `errors/list-invalid-limit.json`).

use serde_json::{Value, json};

use super::common::{configmap, configmaps, create, get_ok, names, rv, setup};
use crate::support::raw;

async fn seed(client: &kube::Client, ns: &str, count: usize) {
    for i in 0..count {
        create(
            client,
            &configmaps(ns),
            &configmap(&format!("cm{i}"), json!({"i": i.to_string()})),
        )
        .await;
    }
}

fn continue_token(list: &Value) -> Option<String> {
    list["metadata"]["continue"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

#[tokio::test]
async fn pages_follow_continue_tokens_with_remaining_counts_and_one_snapshot() {
    let (_cluster, client, ns) = setup("paging").await;
    seed(&client, &ns, 5).await;
    let base = configmaps(&ns);
    let page1 = get_ok(&client, &format!("{base}?limit=2")).await;
    assert_eq!(names(&page1), ["cm0", "cm1"]);
    assert_eq!(page1["metadata"]["remainingItemCount"], 3);
    let token = continue_token(&page1).expect("page 1 has a continue token");

    // Written after page 1: a consistent snapshot must not show it on later pages.
    create(&client, &base, &configmap("cm2a", json!({}))).await;

    let page2 = get_ok(&client, &format!("{base}?limit=2&continue={token}")).await;
    assert_eq!(names(&page2), ["cm2", "cm3"]);
    assert_eq!(page2["metadata"]["remainingItemCount"], 1);
    assert_eq!(
        rv(&page2),
        rv(&page1),
        "every page is served at the first page's resourceVersion"
    );
    let token = continue_token(&page2).expect("page 2 has a continue token");
    let page3 = get_ok(&client, &format!("{base}?limit=2&continue={token}")).await;
    assert_eq!(names(&page3), ["cm4"]);
    assert_eq!(
        continue_token(&page3),
        None,
        "the last page has no continue token"
    );
    assert!(page3["metadata"].get("remainingItemCount").is_none());
}

#[tokio::test]
async fn continue_tokens_are_base64url_json_carrying_the_list_revision() {
    // Surprise 23: {"v":"meta.k8s.io/v1","rv":N,"start":"cm1\u0000"}.
    let (_cluster, client, ns) = setup("paging-token").await;
    seed(&client, &ns, 3).await;
    let page = get_ok(&client, &format!("{}?limit=1", configmaps(&ns))).await;
    let token = continue_token(&page).unwrap();
    let decoded = base64url_decode(&token);
    let decoded: Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(decoded["v"], "meta.k8s.io/v1");
    assert_eq!(decoded["rv"].as_u64(), Some(rv(&page)));
    assert!(
        decoded["start"].as_str().unwrap().contains("cm0\u{0}"),
        "start key: {decoded}"
    );
}

#[tokio::test]
async fn limit_zero_or_exactly_the_count_returns_everything_without_continue() {
    let (_cluster, client, ns) = setup("paging-limits").await;
    seed(&client, &ns, 5).await;
    for query in ["limit=0", "limit=5", "limit=50"] {
        let list = get_ok(&client, &format!("{}?{query}", configmaps(&ns))).await;
        assert_eq!(names(&list).len(), 5, "{query}");
        assert_eq!(continue_token(&list), None, "{query}");
    }
}

#[tokio::test]
async fn resource_version_zero_is_served_from_cache_and_ignores_the_limit() {
    // Fixture listwatch/list-resourceversion-0.json (Surprise 22).
    let (_cluster, client, ns) = setup("paging-rv0").await;
    seed(&client, &ns, 5).await;
    let list = get_ok(
        &client,
        &format!("{}?resourceVersion=0&limit=2", configmaps(&ns)),
    )
    .await;
    assert_eq!(names(&list).len(), 5);
    assert_eq!(continue_token(&list), None);
}

#[tokio::test]
async fn a_non_numeric_limit_is_400_and_a_garbage_continue_token_is_400() {
    // Fixture errors/list-invalid-limit.json.
    let (_cluster, client, ns) = setup("paging-bad").await;
    let status = raw::get(&client, &format!("{}?limit=abc", configmaps(&ns)))
        .await
        .expect_status(400, "BadRequest");
    assert_eq!(
        status["message"],
        "strconv.ParseInt: parsing \"abc\": invalid syntax"
    );
    raw::get(
        &client,
        &format!("{}?limit=1&continue=not-a-token", configmaps(&ns)),
    )
    .await
    .expect_status(400, "BadRequest");
}

#[tokio::test]
async fn kube_rs_paged_lists_see_every_object_once() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams};
    let (_cluster, client, ns) = setup("paging-kube").await;
    seed(&client, &ns, 7).await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(3);
    loop {
        let page = api.list(&params).await.unwrap();
        seen.extend(page.items.into_iter().filter_map(|cm| cm.metadata.name));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(seen, (0..7).map(|i| format!("cm{i}")).collect::<Vec<_>>());
}

#[tokio::test]
async fn lists_of_large_objects_are_complete_with_and_without_limit() {
    // Regression: devcluster read etcd 500 keys at a time, so a list whose objects added up to more
    // than etcd-client's 4 MiB reply limit answered 500. 12 ConfigMaps of ~900 KB (each within
    // etcd's 1.5 MiB request limit) are ~10 MB.
    let (_cluster, client, ns) = setup("paging-large").await;
    let expected: Vec<String> = (0..12).map(|i| format!("big{i:02}")).collect();
    for name in &expected {
        create(
            &client,
            &configmaps(&ns),
            &configmap(name, json!({"blob": "x".repeat(900_000)})),
        )
        .await;
    }

    let all = get_ok(&client, &configmaps(&ns)).await;
    assert_eq!(names(&all), expected);
    assert!(
        all["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|cm| cm["data"].get("blob").is_some())
            .all(|cm| cm["data"]["blob"].as_str().map(str::len) == Some(900_000))
    );
    assert_eq!(continue_token(&all), None);
    let total = all["items"].as_array().unwrap().len();

    // Paged: every object once, pages of at most `limit`, one snapshot, honest remaining counts.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut returned = 0;
    let mut snapshot = None;
    loop {
        let query = match &token {
            Some(t) => format!("?limit=5&continue={t}"),
            None => "?limit=5".to_string(),
        };
        let page = get_ok(&client, &format!("{}{query}", configmaps(&ns))).await;
        let items = page["items"].as_array().unwrap().len();
        assert!(items <= 5, "a page of {items} items for limit=5");
        returned += items;
        assert_eq!(
            *snapshot.get_or_insert(rv(&page)),
            rv(&page),
            "every page is served at the first page's resourceVersion"
        );
        seen.extend(names(&page));
        token = continue_token(&page);
        match &token {
            Some(_) => assert_eq!(
                page["metadata"]["remainingItemCount"],
                json!(total - returned),
                "remainingItemCount after {returned} items"
            ),
            None => break,
        }
    }
    assert_eq!(seen, expected);
    assert_eq!(returned, total);
}

/// Decodes unpadded or padded base64url (the root package has no base64 dependency).
fn base64url_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => panic!("not base64url: {text}"),
        }
    };
    let digits: Vec<u32> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    let mut out = Vec::new();
    for chunk in digits.chunks(4) {
        let mut acc = 0u32;
        for (i, d) in chunk.iter().enumerate() {
            acc |= d << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}
