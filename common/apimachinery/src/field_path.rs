//! Dotted field paths into an object (`spec.claimRef.name`), as mapping rules and named indexes name
//! them, and the names of the cache's built-in indexes a declared index may not take.

use serde_json::Value;

/// The indexes every cache keeps (`namespace`, `owner-uid`: the controller ownerReference's uid,
/// `node-name`: a pod's `spec.nodeName`); a declared index must be named otherwise.
pub const BUILTIN_INDEXES: [&str; 3] = ["namespace", "owner-uid", "node-name"];

/// The value at dotted `path` in `value` (`spec.selector` → `value["spec"]["selector"]`), if every
/// step is an object holding the next part.
pub fn value_at<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, part| v.get(part))
}

/// The non-empty string at dotted `path` in `value`; `None` when the path is absent or holds anything
/// else (a number, an object, an empty string).
pub fn string_at<'a>(value: &'a Value, path: &str) -> Option<&'a str> {
    value_at(value, path)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn string_at_follows_dotted_paths_and_takes_only_non_empty_strings() {
        let pv =
            json!({"spec": {"claimRef": {"namespace": "a", "name": "data"}, "empty": "", "n": 5}});
        assert_eq!(string_at(&pv, "spec.claimRef.name"), Some("data"));
        assert_eq!(string_at(&pv, "spec.claimRef.namespace"), Some("a"));
        assert_eq!(string_at(&pv, "spec.claimRef"), None, "an object");
        assert_eq!(string_at(&pv, "spec.empty"), None);
        assert_eq!(string_at(&pv, "spec.n"), None);
        assert_eq!(string_at(&pv, "spec.missing.name"), None);
        assert!(value_at(&pv, "spec.claimRef").is_some_and(Value::is_object));
    }
}
