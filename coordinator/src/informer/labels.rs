//! An object's labels as the cache holds them: one exact-size slice of pairs sorted by key.
//!
//! A `BTreeMap<String, String>` spends a whole B-tree node (about 550 bytes) on the one to three labels
//! an object usually has, for every cached object; at 100,000 pods that alone is more than the objects'
//! other indexed fields together. Lookups are a binary search over a handful of keys.

use std::collections::BTreeMap;

use flotilla_common::LabelSet;

/// Labels, sorted by key, each key once. Immutable once built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Box<[(String, String)]>);

impl Labels {
    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// Every label, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many labels there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        // A BTreeMap iterates in key order with each key once: the slice is sorted as built.
        Self(map.into_iter().collect())
    }
}

impl LabelSet for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use flotilla_common::LabelSelector;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>()
            .into()
    }

    #[test]
    fn lookups_find_each_label_and_only_those() {
        let set = labels(&[("tier", "web"), ("app", "shop"), ("zone", "a")]);
        assert_eq!(set.label("app"), Some("shop"));
        assert_eq!(set.label("tier"), Some("web"));
        assert_eq!(set.label("zone"), Some("a"));
        assert_eq!(set.get("ap"), None);
        assert_eq!(set.get("zzz"), None);
        assert_eq!(
            set.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["app", "tier", "zone"]
        );
        assert!(Labels::default().is_empty() && Labels::default().get("app").is_none());
    }

    #[test]
    fn a_selector_matches_the_compact_form_as_it_matches_the_map() {
        let map: BTreeMap<String, String> = [("app", "shop"), ("rank", "3")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let compact = Labels::from(map.clone());
        for text in [
            "app=shop",
            "app!=shop",
            "rank>2",
            "rank<2",
            "!tier",
            "app in (a,shop)",
            "tier",
        ] {
            let selector = LabelSelector::parse(text).expect(text);
            assert_eq!(selector.matches(&compact), selector.matches(&map), "{text}");
        }
    }
}
