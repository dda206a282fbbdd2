//! The size budget of what the leader sends a worker (`--dispatch-batch-bytes`). A worker's Assigns go
//! out in batches that stay under it, and an item that alone passes it goes lighter: a controller of a
//! kind gets no prefetched objects and reads them through the Cache service instead (in pages), the
//! owner graph's dependents go as the metadata the collector reads. So however large the objects one
//! user creates, no message nears the 16 MiB limit, no worker's stream breaks, and no key is dropped.

use bytes::Bytes;
use flotilla_common::ResourceKind;
use flotilla_proto as proto;
use prost::Message;
use serde_json::{Map, Value};

use super::super::messages::Primary;

/// The largest single Assign ever sent: the message limit, less room for the batch's framing. Only an
/// owner-graph item whose dependents' metadata alone passes the budget can come near it.
const HARD_LIMIT: usize = proto::MAX_MESSAGE_BYTES - 64 * 1024;

/// How an item was made to fit the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fit {
    /// As it was: within the budget.
    Whole,
    /// Without its prefetched objects, which the worker reads through the Cache service.
    FromCache,
    /// With its dependents cut to the metadata the garbage collector reads.
    MetadataOnly,
    /// Too large even so: not sent (the caller retries the key with backoff).
    TooLarge,
}

impl Fit {
    /// The `reason` label of `flotilla_bad_input_total` for an item that did not fit whole.
    pub(super) fn reason(self) -> &'static str {
        match self {
            Self::Whole => "",
            Self::FromCache => "oversized_item_prefetch_from_cache",
            Self::MetadataOnly => "oversized_item_metadata_only",
            Self::TooLarge => "oversized_item",
        }
    }
}

/// Makes `assign` fit `budget` bytes, lightening it as the module documentation says.
pub(super) fn fit(
    assign: &mut proto::Assign,
    primary: &Primary,
    prefetch_owned: &[ResourceKind],
    budget: usize,
) -> Fit {
    if assign.encoded_len() <= budget {
        return Fit::Whole;
    }
    let fit = match primary {
        Primary::Kind(_) => {
            assign.prefetched.clear();
            assign.prefetch_from_cache = prefetch_owned.iter().map(Into::into).collect();
            Fit::FromCache
        }
        // The collector's dependents may be of any kind and owned through any reference, which no
        // Cache index answers; but it reads only their metadata, as upstream's collector (metadata
        // informers) does.
        Primary::OwnerGraph => {
            for dependent in &mut assign.prefetched {
                if let Some(metadata) = metadata_only(&dependent.object) {
                    dependent.object = metadata;
                }
            }
            Fit::MetadataOnly
        }
    };
    if assign.encoded_len() <= HARD_LIMIT {
        fit
    } else {
        Fit::TooLarge
    }
}

/// Splits a worker's Assigns into batches of at most `budget` encoded bytes each (an item bigger than
/// the budget, see [`fit`], goes in a batch of its own). Order is kept.
pub(super) fn batches(items: Vec<proto::Assign>, budget: usize) -> Vec<Vec<proto::Assign>> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut bytes = 0;
    for item in items {
        // The field's tag and length prefix beside the item itself.
        let size = item.encoded_len() + 8;
        if !batch.is_empty() && bytes + size > budget {
            out.push(std::mem::take(&mut batch));
            bytes = 0;
        }
        bytes += size;
        batch.push(item);
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

/// The object's `apiVersion`, `kind` and the metadata fields the garbage collector decides on (identity,
/// ownerReferences, finalizers, deletion); `None` when it is not a JSON object.
fn metadata_only(json: &[u8]) -> Option<Bytes> {
    const KEPT: [&str; 8] = [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "ownerReferences",
        "finalizers",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ];
    let Value::Object(mut object) = serde_json::from_slice(json).ok()? else {
        return None;
    };
    let mut trimmed = Map::new();
    for field in ["apiVersion", "kind"] {
        if let Some(v) = object.remove(field) {
            trimmed.insert(field.to_owned(), v);
        }
    }
    if let Some(Value::Object(mut metadata)) = object.remove("metadata") {
        let kept: Map<String, Value> = KEPT
            .iter()
            .filter_map(|f| metadata.remove(*f).map(|v| ((*f).to_owned(), v)))
            .collect();
        trimmed.insert("metadata".to_owned(), Value::Object(kept));
    }
    serde_json::to_vec(&trimmed).ok().map(Bytes::from)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bytes::Bytes;
    use flotilla_common::ResourceKind;
    use flotilla_proto as proto;
    use prost::Message;
    use serde_json::{Value, json};

    use super::super::super::messages::Primary;
    use super::{Fit, HARD_LIMIT, batches, fit};

    fn pods() -> ResourceKind {
        ResourceKind::new("", "v1", "Pod", "pods", true)
    }

    fn assign(object_bytes: usize, prefetched: usize, each: usize) -> proto::Assign {
        let pod = |i: usize| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": "a", "uid": format!("u{i}"),
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                        "uid": "rs", "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"containers": [{"name": "c", "args": ["x".repeat(each)]}]}})
        };
        proto::Assign {
            item_id: 1,
            key: "a/rs".into(),
            object: Bytes::from(vec![b' '; object_bytes]),
            prefetched: (0..prefetched)
                .map(|i| proto::PrefetchedObject {
                    kind: Some((&pods()).into()),
                    object: Bytes::from(serde_json::to_vec(&pod(i)).unwrap()),
                })
                .collect(),
            ..Default::default()
        }
    }

    const MIB: usize = 1024 * 1024;

    #[test]
    fn an_item_within_the_budget_goes_whole() {
        let mut a = assign(1000, 3, 1000);
        let before = a.clone();
        let fit = fit(&mut a, &Primary::Kind(pods()), &[pods()], 4 * MIB);
        assert_eq!(fit, Fit::Whole);
        assert_eq!(a, before);
    }

    #[test]
    fn a_replicaset_whose_pods_pass_the_budget_goes_without_them_and_names_their_kind() {
        // The probe's ReplicaSet: 16 pods of 1.2 MB each, 20 MB in all.
        let mut a = assign(1_200_000, 16, 1_200_000);
        let fit = fit(&mut a, &Primary::Kind(pods()), &[pods()], 4 * MIB);
        assert_eq!(fit, Fit::FromCache);
        assert!(a.prefetched.is_empty());
        assert_eq!(
            a.prefetch_from_cache,
            vec![proto::ResourceKind::from(&pods())]
        );
        assert!(a.encoded_len() <= 4 * MIB);
    }

    #[test]
    fn the_collectors_dependents_pass_as_metadata_that_keeps_what_it_decides_on() {
        let mut a = assign(1000, 16, 1_200_000);
        let fit = fit(&mut a, &Primary::OwnerGraph, &[], 4 * MIB);
        assert_eq!(fit, Fit::MetadataOnly);
        assert_eq!(a.prefetched.len(), 16);
        let first: Value = serde_json::from_slice(&a.prefetched[0].object).unwrap();
        assert_eq!(first["kind"], "Pod");
        assert_eq!(first["metadata"]["uid"], "u0");
        assert_eq!(first["metadata"]["ownerReferences"][0]["uid"], "rs");
        assert!(first.get("spec").is_none());
        assert!(a.encoded_len() < 64 * 1024);
    }

    #[test]
    fn an_item_too_large_even_lightened_is_not_sent() {
        let mut a = assign(HARD_LIMIT + 1, 0, 0);
        assert_eq!(
            fit(&mut a, &Primary::Kind(pods()), &[], 4 * MIB),
            Fit::TooLarge
        );
    }

    #[test]
    fn batches_stay_under_the_budget_and_keep_order() {
        let items: Vec<proto::Assign> = (0..40)
            .map(|i| proto::Assign {
                item_id: i,
                object: Bytes::from(vec![b' '; 300_000]),
                ..Default::default()
            })
            .collect();
        let batches = batches(items, MIB);
        assert!(batches.len() >= 12, "{}", batches.len());
        for batch in &batches {
            let bytes: usize = batch.iter().map(|a| a.encoded_len() + 8).sum();
            assert!(bytes <= MIB, "{bytes}");
        }
        let ids: Vec<u64> = batches.iter().flatten().map(|a| a.item_id).collect();
        assert_eq!(ids, (0..40).collect::<Vec<_>>());
    }

    #[test]
    fn an_item_over_the_budget_goes_in_a_batch_of_its_own() {
        let small = proto::Assign {
            item_id: 1,
            ..Default::default()
        };
        let big = proto::Assign {
            item_id: 2,
            object: Bytes::from(vec![b' '; 2 * MIB]),
            ..Default::default()
        };
        let batches = batches(vec![small.clone(), big, small], MIB);
        assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1, 1]);
    }
}
