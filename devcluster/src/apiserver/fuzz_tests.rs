//! Fuzz targets (`bolero::check!`) for what devcluster reads from clients: the body of a POST or PUT
//! (JSON, or protobuf decoded to JSON) through decoding, defaulting and validation of every built-in
//! kind; label and field selectors; and the three patch types (JSON, merge, strategic merge, plus the
//! YAML of an apply patch). Under `cargo test` each runs its corpus and a few hundred random inputs;
//! under `cargo bolero test` it runs coverage-guided (README: Tests).
//!
//! Contracts checked: no input panics (a panic in a handler would drop the connection instead of
//! answering 400/422); a label selector prints to a string that parses back to one matching the same
//! label sets; a merge patch applied twice changes nothing the second time.

use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value, json};

use super::builtins::builtins;
use super::objects::{Target, decode_body};
use super::query::Query;
use super::registry::ResourceInfo;
use super::selector::{FieldSelector, LabelSelector};
use super::{patch, protobuf, yaml};

static KINDS: LazyLock<Vec<Arc<ResourceInfo>>> =
    LazyLock::new(|| builtins().into_iter().map(Arc::new).collect());

/// Splits an input at its first newline: `(head, rest)`; `(input, "")` without one.
fn split(bytes: &[u8]) -> (&[u8], &[u8]) {
    match bytes.iter().position(|b| *b == b'\n') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, &[]),
    }
}

/// The first byte picks the built-in kind and whether the body is protobuf (odd) or JSON (even).
#[test]
fn request_bodies() {
    bolero::check!()
        .with_iterations(300)
        .for_each(|bytes: &[u8]| {
            let Some((&selector, body)) = bytes.split_first() else {
                return;
            };
            let info = &KINDS[usize::from(selector / 2) % KINDS.len()];
            let json = if selector % 2 == 1 {
                match protobuf::to_json(body, &info.api_version(), &info.kind) {
                    Ok(json) => json,
                    Err(_) => return,
                }
            } else {
                body.to_vec()
            };
            let target = Target::new(
                info.clone(),
                info.namespaced.then(|| "default".to_owned()),
                None,
                Query::parse(None),
                "fuzz".into(),
            );
            let Ok(mut object) = decode_body(&target, &json) else {
                return;
            };
            let old = object.clone();
            (info.defaulter)(&mut object);
            (info.prepare_create)(&mut object);
            let _ = (info.validate)(&object);
            let mut updated = object.clone();
            (info.prepare_update)(&mut updated, &old);
            let _ = (info.validate_update)(&updated, &old);
        });
}

#[test]
fn selectors() {
    let allowed: Vec<String> = ["spec.nodeName", "status.phase", "source", "type"]
        .map(String::from)
        .into();
    bolero::check!()
        .with_iterations(500)
        .for_each(|bytes: &[u8]| {
            let (text, object) = split(bytes);
            let Ok(text) = std::str::from_utf8(text) else {
                return;
            };
            let object = serde_json::from_slice::<Value>(object).unwrap_or_else(|_| {
                json!({"metadata": {"name": "a", "namespace": "b", "labels": {"a": "b", "c": "1"}}})
            });
            if let Ok(selector) = LabelSelector::parse(text) {
                let printed = selector.to_query();
                let reparsed = LabelSelector::parse(&printed).unwrap_or_else(|e| {
                    panic!("{text:?} printed as {printed:?}, which fails: {e}")
                });
                assert_eq!(reparsed.to_query(), printed, "{text:?}");
                assert_eq!(
                    selector.matches(&object),
                    reparsed.matches(&object),
                    "{text:?} and {printed:?} on {object}"
                );
                if let Some(labels) = object["metadata"]["labels"].as_object() {
                    assert_eq!(selector.matches_map(labels), reparsed.matches_map(labels));
                }
                assert!(selector.matches_map(&Map::new()) || !selector.is_empty());
            }
            if let Ok(selector) = LabelSelector::from_object(&object) {
                let printed = selector.to_query();
                let reparsed = LabelSelector::parse(&printed).unwrap_or_else(|e| {
                    panic!("{object} printed as {printed:?}, which fails: {e}")
                });
                assert_eq!(selector.matches(&object), reparsed.matches(&object));
            }
            if let Ok(selector) = FieldSelector::parse(text, &allowed) {
                let _ = selector.matches(&object);
                let _ = selector.is_empty();
            }
        });
}

/// The first byte picks the patch type; the rest is `target\npatch`.
#[test]
fn patches() {
    bolero::check!()
        .with_iterations(500)
        .for_each(|bytes: &[u8]| {
            let Some((&kind, rest)) = bytes.split_first() else {
                return;
            };
            let (target, body) = split(rest);
            let Ok(target) = serde_json::from_slice::<Value>(target) else {
                return;
            };
            let parsed = match kind % 4 {
                // Apply patches are YAML (or JSON) applied as strategic merge patches.
                3 => yaml::parse(body).ok(),
                _ => serde_json::from_slice::<Value>(body).ok(),
            };
            let Some(p) = parsed else {
                return;
            };
            let mut doc = target.clone();
            match kind % 4 {
                0 => {
                    patch::merge(&mut doc, &p);
                    let once = doc.clone();
                    patch::merge(&mut doc, &p);
                    assert_eq!(doc, once, "a merge patch is idempotent: {p}");
                }
                1 => {
                    let _ = patch::json(&mut doc, &p);
                }
                _ => patch::strategic(&mut doc, &p),
            }
            serde_json::to_vec(&doc).unwrap_or_else(|e| panic!("{doc:?} does not serialize: {e}"));
        });
}

/// Found by the `selectors` target: a plain-map selector with an empty key printed as `=`, which the
/// query form refuses. Such a selector is now refused itself, as the query form and kube-apiserver's
/// validation refuse it.
#[test]
fn a_selector_object_with_an_invalid_key_or_value_is_refused() {
    for bad in [
        json!({"": 0}),
        json!({"matchLabels": {"": "a"}}),
        json!({"matchLabels": {"a": "not a value"}}),
        json!({"matchExpressions": [{"key": "", "operator": "Exists"}]}),
        json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["b c"]}]}),
    ] {
        assert!(
            LabelSelector::from_object(&bad).is_err(),
            "{bad} is refused"
        );
    }
    let good = LabelSelector::from_object(&json!({"app": "web", "tier": ""})).unwrap();
    assert_eq!(
        LabelSelector::parse(&good.to_query()).unwrap().to_query(),
        good.to_query()
    );
}
