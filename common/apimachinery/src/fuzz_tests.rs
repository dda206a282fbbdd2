//! Fuzz targets (`bolero::check!`) for the parsers here that read what clients send: the string and
//! JSON forms of label selectors, and dotted field paths. Under `cargo test` each runs its committed
//! corpus and a few hundred random inputs; under `cargo bolero test` it runs coverage-guided (see the
//! README's Tests section).
//!
//! Contracts checked: no input panics; a selector that parses prints to a string that parses back to
//! the same selector, and both match the same label sets. Inputs the fuzzer found failing are kept
//! below as plain tests.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{LabelSelector, value_at};

/// Label sets to match a selector against: built from the selector's own keys and values (so matches
/// happen), plus the empty set.
fn label_sets(text: &str) -> Vec<BTreeMap<String, String>> {
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || "-_./".contains(c)))
        .filter(|w| !w.is_empty())
        .take(8)
        .collect();
    let mut sets = vec![BTreeMap::new()];
    for (i, key) in words.iter().enumerate() {
        let mut set = BTreeMap::new();
        for (j, value) in words.iter().enumerate().skip(i) {
            set.insert((*key).to_owned(), (*value).to_owned());
            if j > i {
                set.insert((*value).to_owned(), (*key).to_owned());
            }
        }
        sets.push(set);
    }
    sets
}

#[test]
fn label_selector_string_form() {
    bolero::check!()
        .with_iterations(500)
        .for_each(|bytes: &[u8]| {
            let Ok(text) = std::str::from_utf8(bytes) else {
                return;
            };
            let Ok(selector) = LabelSelector::parse(text) else {
                return;
            };
            let printed = selector.to_string();
            let reparsed = LabelSelector::parse(&printed)
                .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
            assert_eq!(selector, reparsed, "{text:?} printed as {printed:?}");
            for labels in label_sets(text) {
                assert_eq!(
                    selector.matches(&labels),
                    reparsed.matches(&labels),
                    "{text:?} and {printed:?} on {labels:?}"
                );
            }
            if let Some((key, values)) = selector.required_label() {
                for labels in label_sets(text) {
                    if selector.matches(&labels) {
                        assert!(labels.get(key).is_some_and(|v| values.contains(v)));
                    }
                }
            }
        });
}

#[test]
fn label_selector_json_forms() {
    bolero::check!()
        .with_iterations(500)
        .for_each(|bytes: &[u8]| {
            let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
                return;
            };
            if let Ok(selector) = LabelSelector::from_label_selector_json(&value) {
                let printed = selector.to_string();
                let reparsed = LabelSelector::parse(&printed)
                    .unwrap_or_else(|e| panic!("{value} printed as {printed:?}, which fails: {e}"));
                assert_eq!(selector, reparsed, "{value} printed as {printed:?}");
            }
            if let Ok(selector) = LabelSelector::from_map_json(&value) {
                let printed = selector.to_string();
                let reparsed = LabelSelector::parse(&printed)
                    .unwrap_or_else(|e| panic!("{value} printed as {printed:?}, which fails: {e}"));
                // "Nothing" prints as a contradiction, which is not the same value but selects the same.
                let text = value.to_string();
                for labels in label_sets(&text) {
                    assert_eq!(
                        selector.matches(&labels),
                        reparsed.matches(&labels),
                        "{value} and {printed:?} on {labels:?}"
                    );
                }
            }
        });
}

#[test]
fn field_path_lookup() {
    bolero::check!()
        .with_iterations(500)
        .for_each(|bytes: &[u8]| {
            // The first line is the path, the rest the object.
            let (path, json) = match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &b"{}"[..]),
            };
            let (Ok(path), Ok(value)) = (
                std::str::from_utf8(path),
                serde_json::from_slice::<Value>(json),
            ) else {
                return;
            };
            if let Some(found) = value_at(&value, path) {
                // Every step was an object member: walking the parts by hand finds the same value.
                let mut at = &value;
                for part in path.split('.') {
                    at = at
                        .get(part)
                        .unwrap_or_else(|| panic!("{path:?} in {value}"));
                }
                assert_eq!(at, found);
            }
            let _ = crate::string_at(&value, path);
        });
}

/// Found by `label_selector_json_forms`: a plain map with an empty key (`{"":""}`) became a selector
/// printing as `=`, which does not parse. Plain maps are now checked as `matchLabels` are.
#[test]
fn a_plain_map_with_an_invalid_key_or_value_is_refused() {
    for map in [
        r#"{"":""}"#,
        r#"{"a b":"c"}"#,
        r#"{"a":"-"}"#,
        r#"{"a":"b,c"}"#,
    ] {
        let value: Value = serde_json::from_str(map).unwrap_or_default();
        assert!(LabelSelector::from_map_json(&value).is_err(), "{map}");
    }
    let valid = LabelSelector::from_map_json(&serde_json::json!({"app": "web", "x/y": ""}));
    let printed = valid.map(|s| s.to_string()).unwrap_or_default();
    assert!(LabelSelector::parse(&printed).is_ok(), "{printed:?}");
}
