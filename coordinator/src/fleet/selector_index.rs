//! The primaries of one selector mapping (e.g. ReplicaSets by `spec.selector`), indexed so that an
//! event on a labelled object (a pod) finds the primaries whose selector matches it without scanning
//! every primary of its namespace.
//!
//! Each primary's selector is parsed once, when the primary is seen, and filed under one label that
//! every object it matches must carry (its first `=` or `in` requirement) — or, when it has none, in
//! its namespace's small unindexed set that every lookup checks. A lookup gathers the primaries filed
//! under the object's labels and checks their whole selector, so it answers exactly what a scan would.
//!
//! The index follows its kind's informer events, applying an update or delete only if it is not older
//! than the version it holds (by resourceVersion): it may be built from the store while events the
//! store already reflects are still on their way. (A late add of a primary the store had already
//! deleted lives only until that delete's own event arrives, as a scan of the store would have seen
//! it then too.)

use std::collections::{HashMap, HashSet};

use flotilla_common::LabelSelector;
use serde_json::Value;

use crate::informer::{CachedObject, Labels};

/// One primary as the index holds it.
#[derive(Debug)]
struct Entry {
    resource_version: u64,
    namespace: Option<String>,
    selector: LabelSelector,
}

/// See the module documentation. Keys are the primaries' object keys.
#[derive(Debug, Default)]
pub struct SelectorIndex {
    /// Dotted path of the selector in the primary, e.g. `spec.selector`.
    path: String,
    /// Every primary with a selector that can match something.
    entries: HashMap<String, Entry>,
    /// (namespace, label key, label value) → primaries whose selector requires that label.
    by_label: HashMap<(Option<String>, String, String), HashSet<String>>,
    /// namespace → primaries whose selector requires no `=`/`in` label.
    unindexed: HashMap<Option<String>, HashSet<String>>,
}

impl SelectorIndex {
    /// An index of the selectors at `path` of `primaries`.
    pub fn build<'a>(path: &str, primaries: impl IntoIterator<Item = &'a CachedObject>) -> Self {
        let mut index = Self {
            path: path.to_owned(),
            ..Self::default()
        };
        for primary in primaries {
            index.apply(primary);
        }
        index
    }

    /// A primary was added or updated.
    pub fn apply(&mut self, primary: &CachedObject) {
        let key = primary.key();
        if self.is_stale(&key, primary.resource_version) {
            return;
        }
        self.unfile(&key);
        let selector = primary.field(&self.path).as_ref().and_then(parse_selector);
        match selector {
            Some(selector) if !selector.is_nothing() => {
                self.file(&key, primary.namespace.clone(), &selector);
                self.entries.insert(
                    key,
                    Entry {
                        resource_version: primary.resource_version,
                        namespace: primary.namespace.clone(),
                        selector,
                    },
                );
            }
            // No selector, or one that matches nothing: never a candidate.
            _ => {}
        }
    }

    /// A primary was deleted (`last` is its last known state).
    pub fn remove(&mut self, last: &CachedObject) {
        let key = last.key();
        if self.is_stale(&key, last.resource_version) {
            return;
        }
        self.unfile(&key);
    }

    /// Calls `emit` with every primary whose selector matches `labels`: those of namespace `namespace`,
    /// or of every namespace when it is `None`.
    pub fn matching(&self, namespace: Option<&str>, labels: &Labels, mut emit: impl FnMut(&str)) {
        let matches = |key: &str| {
            self.entries.get(key).is_some_and(|e| {
                namespace.is_none_or(|ns| e.namespace.as_deref() == Some(ns))
                    && e.selector.matches(labels)
            })
        };
        let Some(ns) = namespace else {
            // Across namespaces (rare: a cluster-scoped object mapped to namespaced primaries).
            let mut keys: Vec<&String> = self.entries.keys().filter(|k| matches(k)).collect();
            keys.sort();
            keys.into_iter().for_each(|k| emit(k));
            return;
        };
        let ns = Some(ns.to_owned());
        let mut found: Vec<&String> = labels
            .iter()
            .filter_map(|(k, v)| self.by_label.get(&(ns.clone(), k.to_owned(), v.to_owned())))
            .flatten()
            .chain(self.unindexed.get(&ns).into_iter().flatten())
            .filter(|k| matches(k))
            .collect();
        // A primary filed under one label only, but an `in` requirement files it under each value; the
        // object has one value per key, so a primary is found at most once per key — dedup anyway.
        found.sort();
        found.dedup();
        found.into_iter().for_each(|k| emit(k));
    }

    /// How many primaries the index holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn is_stale(&self, key: &str, resource_version: u64) -> bool {
        self.entries
            .get(key)
            .is_some_and(|held| resource_version < held.resource_version)
    }

    fn file(&mut self, key: &str, namespace: Option<String>, selector: &LabelSelector) {
        match selector.required_label() {
            Some((label, values)) => {
                for value in values {
                    self.by_label
                        .entry((namespace.clone(), label.to_owned(), value.clone()))
                        .or_default()
                        .insert(key.to_owned());
                }
            }
            None => {
                self.unindexed
                    .entry(namespace)
                    .or_default()
                    .insert(key.to_owned());
            }
        }
    }

    fn unfile(&mut self, key: &str) {
        let Some(old) = self.entries.remove(key) else {
            return;
        };
        match old.selector.required_label() {
            Some((label, values)) => {
                for value in values {
                    let slot = (old.namespace.clone(), label.to_owned(), value.clone());
                    if let Some(keys) = self.by_label.get_mut(&slot) {
                        keys.remove(key);
                        if keys.is_empty() {
                            self.by_label.remove(&slot);
                        }
                    }
                }
            }
            None => {
                if let Some(keys) = self.unindexed.get_mut(&old.namespace) {
                    keys.remove(key);
                    if keys.is_empty() {
                        self.unindexed.remove(&old.namespace);
                    }
                }
            }
        }
    }
}

/// A selector is either a LabelSelector (`matchLabels` / `matchExpressions`, e.g. a ReplicaSet's) or a
/// plain map (a Service's, where an empty map selects nothing). `None` when it is neither: it matches
/// nothing.
pub fn parse_selector(selector: &Value) -> Option<LabelSelector> {
    let is_label_selector =
        selector.get("matchLabels").is_some() || selector.get("matchExpressions").is_some();
    let parsed = if is_label_selector {
        LabelSelector::from_label_selector_json(selector)
    } else {
        LabelSelector::from_map_json(selector)
    };
    parsed.ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use flotilla_common::ResourceKind;
    use proptest::prelude::*;

    fn matches(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
        parse_selector(selector).is_some_and(|s| s.matches(labels))
    }

    /// A primary in `ns` named `name` at `rv` with `selector` at `spec.selector`.
    fn primary(ns: &str, name: &str, rv: u64, selector: Value) -> CachedObject {
        let kind = ResourceKind::new("apps", "v1", "ReplicaSet", "replicasets", true);
        let value = serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"),
                         "resourceVersion": rv.to_string()},
            "spec": {"selector": selector},
        });
        CachedObject::from_value(&kind, value).unwrap()
    }

    fn found(
        index: &SelectorIndex,
        ns: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Vec<String> {
        let mut keys = Vec::new();
        index.matching(ns, &Labels::from(labels.clone()), |k| {
            keys.push(k.to_owned())
        });
        keys
    }

    #[test]
    fn updates_move_a_primary_between_labels_and_stale_events_are_ignored() {
        let web: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
        let db: BTreeMap<String, String> = [("app".to_owned(), "db".to_owned())].into();
        let mut index = SelectorIndex::build("spec.selector", []);
        index.apply(&primary(
            "ns",
            "rs",
            5,
            serde_json::json!({"matchLabels": {"app": "web"}}),
        ));
        assert_eq!(found(&index, Some("ns"), &web), ["ns/rs"]);
        assert!(
            found(&index, Some("other"), &web).is_empty(),
            "another namespace"
        );
        index.apply(&primary(
            "ns",
            "rs",
            7,
            serde_json::json!({"matchLabels": {"app": "db"}}),
        ));
        assert!(found(&index, Some("ns"), &web).is_empty());
        assert_eq!(found(&index, Some("ns"), &db), ["ns/rs"]);
        // An older version arriving late changes nothing; nor does the delete of an older version.
        index.apply(&primary(
            "ns",
            "rs",
            6,
            serde_json::json!({"matchLabels": {"app": "web"}}),
        ));
        index.remove(&primary("ns", "rs", 6, serde_json::json!({})));
        assert_eq!(found(&index, Some("ns"), &db), ["ns/rs"]);
        index.remove(&primary("ns", "rs", 7, serde_json::json!({})));
        assert!(found(&index, Some("ns"), &db).is_empty());
        assert_eq!(index.len(), 0);
    }

    fn arb_selector() -> impl Strategy<Value = Value> {
        let key = prop::sample::select(vec!["a", "b", "c"]);
        let value = prop::sample::select(vec!["1", "2"]);
        let expression = (
            key.clone(),
            prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist"]),
            prop::collection::vec(value.clone(), 1..3),
        )
            .prop_map(|(k, op, values)| match op {
                "Exists" | "DoesNotExist" => serde_json::json!({"key": k, "operator": op}),
                _ => serde_json::json!({"key": k, "operator": op, "values": values}),
            });
        prop_oneof![
            // A Service-style map (an empty one selects nothing).
            prop::collection::btree_map(key.clone(), value.clone(), 0..3)
                .prop_map(|m| serde_json::json!(m)),
            // A LabelSelector.
            (
                prop::collection::btree_map(key, value, 0..2),
                prop::collection::vec(expression, 0..3)
            )
                .prop_map(|(m, e)| serde_json::json!({"matchLabels": m, "matchExpressions": e})),
            Just(serde_json::json!("garbage")),
        ]
    }

    fn arb_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
        prop::collection::btree_map(
            prop::sample::select(vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]),
            prop::sample::select(vec!["1".to_owned(), "2".to_owned()]),
            0..3,
        )
    }

    proptest! {
        /// After any sequence of applies and removes, the index answers exactly what a scan of the
        /// primaries left answers.
        #[test]
        fn the_index_answers_exactly_what_a_scan_answers(
            ops in prop::collection::vec((0usize..6, prop::sample::select(vec!["x", "y"]), any::<bool>(), arb_selector()), 0..40),
            queries in prop::collection::vec((prop::sample::select(vec!["x", "y"]), arb_labels()), 1..8),
        ) {
            let mut index = SelectorIndex::build("spec.selector", []);
            let mut live: BTreeMap<String, CachedObject> = BTreeMap::new();
            for (rv, (name, ns, delete, selector)) in ops.into_iter().enumerate() {
                let object = primary(ns, &format!("p{name}"), rv as u64 + 1, selector);
                if delete {
                    index.remove(&object);
                    live.remove(&object.key());
                } else {
                    index.apply(&object);
                    live.insert(object.key(), object);
                }
            }
            for (ns, labels) in queries {
                let scan: Vec<String> = live
                    .values()
                    .filter(|o| o.namespace.as_deref() == Some(ns))
                    .filter(|o| o.field("spec.selector").is_some_and(|s| matches(&s, &labels)))
                    .map(CachedObject::key)
                    .collect();
                prop_assert_eq!(found(&index, Some(ns), &labels), scan.clone());
                let everywhere: Vec<String> = live
                    .values()
                    .filter(|o| o.field("spec.selector").is_some_and(|s| matches(&s, &labels)))
                    .map(CachedObject::key)
                    .collect();
                prop_assert_eq!(found(&index, None, &labels), everywhere);
            }
        }
    }

    #[test]
    fn a_service_style_selector_matches_by_subset_and_an_empty_one_matches_nothing() {
        let labels: BTreeMap<String, String> = [
            ("app".to_owned(), "web".to_owned()),
            ("x".into(), "y".into()),
        ]
        .into();
        assert!(matches(&serde_json::json!({"app": "web"}), &labels));
        assert!(!matches(&serde_json::json!({"app": "db"}), &labels));
        assert!(!matches(&serde_json::json!({}), &labels));
    }

    #[test]
    fn a_label_selector_with_expressions_matches() {
        let labels: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
        let sel = serde_json::json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]});
        assert!(matches(&sel, &labels));
    }
}
