//! Fuzz targets (`bolero::check!`) for the JSON field paths the cache reads along: the streaming
//! reader of one field of an object's JSON (mapping rules, selectors and named indexes use it per
//! event) and the object as the cache builds it from what the API server sends. Under `cargo test` the
//! target runs its corpus and a few hundred random inputs; under `cargo bolero test` it runs
//! coverage-guided (README: Tests).
//!
//! Contract checked: no input panics, and the streaming reader finds exactly what
//! `flotilla_common::value_at` finds in the parsed object, for every valid JSON document and path.

use flotilla_common::{ResourceKind, value_at};
use serde_json::Value;

use super::CachedObject;
use super::json_field::field;

#[test]
fn field_paths() {
    let kind = ResourceKind::new("", "v1", "Pod", "pods", true);
    bolero::check!()
        .with_iterations(500)
        .for_each(|bytes: &[u8]| {
            // The first line is the path, the rest the object.
            let (path, json) = match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (&b"metadata.name"[..], bytes),
            };
            let Ok(path) = std::str::from_utf8(path) else {
                return;
            };
            let streamed = field(json, path);
            let Ok(value) = serde_json::from_slice::<Value>(json) else {
                return;
            };
            assert_eq!(
                streamed.as_ref(),
                value_at(&value, path),
                "path {path:?} in {value}"
            );
            if let Ok(object) = CachedObject::from_value(&kind, value) {
                // The cached JSON is what workers receive: valid, and read the same way.
                let cached: Value = serde_json::from_slice(&object.json)
                    .unwrap_or_else(|e| panic!("{object:?} caches invalid JSON: {e}"));
                assert_eq!(object.field(path).as_ref(), value_at(&cached, path));
                let _ = object.string_at(path);
            }
        });
}
