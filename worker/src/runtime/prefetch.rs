//! Related objects an item came without: when the leader's dispatch budget left an item's prefetched
//! objects out (they were too large to ship), the worker reads them through the Cache service — the
//! objects of each named kind owned by the primary object, as the leader would have sent them — before
//! the reconcile starts, so the controller sees the same `Context` either way. Under an exported
//! reconcile the reads are a `prefetch` span (`objects`: how many were read), parent of their
//! `cache list` spans.

use bytes::Bytes;
use flotilla_common::{ResourceKind, TRACE_TARGET, in_exported_span};
use flotilla_sdk::{CacheClient, CacheError, CacheQuery};
use tracing::{Instrument, Span, field, info_span};

/// Errors of reading left-out related objects; the item fails and is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrefetchError {
    /// The primary object has no uid to look its owned objects up by.
    #[error("the item's object has no metadata.uid to read its related objects by")]
    NoUid,
    /// The Cache service did not answer.
    #[error("cannot read related {kind} through the cache")]
    Cache {
        kind: String,
        #[source]
        source: CacheError,
    },
}

/// `prefetched` plus, for each of `kinds`, the cached objects of that kind owned by `object`.
///
/// # Errors
/// [`PrefetchError`] when `object` carries no uid or a Cache read fails.
pub(crate) async fn complete(
    cache: CacheClient,
    object: Bytes,
    prefetched: Vec<(ResourceKind, Bytes)>,
    kinds: Vec<ResourceKind>,
) -> Result<Vec<(ResourceKind, Bytes)>, PrefetchError> {
    if kinds.is_empty() {
        return Ok(prefetched);
    }
    let span = if in_exported_span() {
        info_span!(target: TRACE_TARGET, "prefetch", objects = field::Empty, otel.status_code = field::Empty)
    } else {
        Span::none()
    };
    let already = prefetched.len();
    let result = read(cache, object, prefetched, kinds)
        .instrument(span.clone())
        .await;
    match &result {
        // As i64: the OpenTelemetry layer exports unsigned fields as strings.
        Ok(all) => {
            span.record(
                "objects",
                i64::try_from(all.len().saturating_sub(already)).unwrap_or(i64::MAX),
            );
        }
        Err(_) => {
            span.record("otel.status_code", "ERROR");
        }
    }
    result
}

async fn read(
    cache: CacheClient,
    object: Bytes,
    mut prefetched: Vec<(ResourceKind, Bytes)>,
    kinds: Vec<ResourceKind>,
) -> Result<Vec<(ResourceKind, Bytes)>, PrefetchError> {
    let uid = uid_of(&object).ok_or(PrefetchError::NoUid)?;
    let query = CacheQuery::all().owned_by(&uid);
    for kind in kinds {
        let objects =
            cache
                .list_json(&kind, &query)
                .await
                .map_err(|source| PrefetchError::Cache {
                    kind: kind.plural.clone(),
                    source,
                })?;
        prefetched.extend(objects.into_iter().map(|o| (kind.clone(), o)));
    }
    Ok(prefetched)
}

fn uid_of(object: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Meta {
        uid: String,
    }
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: Meta,
    }
    serde_json::from_slice::<Object>(object)
        .ok()
        .map(|o| o.metadata.uid)
        .filter(|uid| !uid.is_empty())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use flotilla_sdk::MemoryCache;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    fn pod(name: &str, owner: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("a".into()),
                uid: Some(format!("u-{name}")),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: owner.into(),
                    uid: owner.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn left_out_objects_are_read_by_owner_from_the_cache() {
        let memory = MemoryCache::default()
            .with(&pod("a", "rs-1"))
            .with(&pod("b", "rs-1"))
            .with(&pod("c", "rs-2"));
        let cache = CacheClient::new(Some(Arc::new(memory)));
        let kind = flotilla_sdk::kind_of::<Pod>();
        let object = Bytes::from_static(br#"{"metadata":{"name":"rs","uid":"rs-1"}}"#);
        let got = complete(cache, object, Vec::new(), vec![kind])
            .await
            .unwrap();
        let mut names: Vec<String> = got
            .iter()
            .map(|(_, json)| {
                serde_json::from_slice::<Pod>(json)
                    .unwrap()
                    .metadata
                    .name
                    .unwrap()
            })
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
    }

    #[tokio::test]
    async fn an_object_without_a_uid_fails_the_item_rather_than_reading_nothing() {
        let cache = CacheClient::new(Some(Arc::new(MemoryCache::default())));
        let kind = flotilla_sdk::kind_of::<Pod>();
        let err = complete(cache, Bytes::new(), Vec::new(), vec![kind])
            .await
            .unwrap_err();
        assert!(matches!(err, PrefetchError::NoUid));
    }

    #[tokio::test]
    async fn under_a_traced_reconcile_the_reads_are_a_prefetch_span_counting_the_objects_read() {
        use flotilla_common::{AttrValue, SpanCapture};

        let capture = SpanCapture::start();
        let memory = MemoryCache::default()
            .with(&pod("a", "rs-1"))
            .with(&pod("b", "rs-1"));
        let cache = CacheClient::new(Some(Arc::new(memory)));
        let kind = flotilla_sdk::kind_of::<Pod>();
        let object = Bytes::from_static(br#"{"metadata":{"name":"rs","uid":"rs-1"}}"#);
        let shipped = vec![(kind.clone(), Bytes::from_static(b"{}"))];
        let got = complete(cache, object, shipped, vec![kind])
            .instrument(info_span!(target: TRACE_TARGET, "reconcile"))
            .await
            .unwrap();
        assert_eq!(got.len(), 3);
        let spans = capture.spans();
        let [prefetch, reconcile] = &spans[..] else {
            panic!("a prefetch under the reconcile: {spans:#?}")
        };
        assert_eq!(prefetch.name, "prefetch");
        assert_eq!(prefetch.parent_span_id, reconcile.span_id);
        assert_eq!(
            prefetch.attr("objects"),
            Some(&AttrValue::Int(2)),
            "the objects read, not those shipped with the item"
        );
    }
}
