//! One field of a serialized object, read without building the whole object: the cache keeps objects
//! as the JSON bytes workers receive, and mapping rules, selector and named indexes need a field or two
//! of them (`spec.selector`, `spec.volumeName`). The reader descends the dotted path and skips every
//! other member without allocating for it.

use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The value at dotted `path` (`spec.claimRef.name`) in the JSON object `json`, as
/// `flotilla_common::value_at` would find it in the parsed object; `None` when a step is missing or not
/// an object, or `json` is not valid JSON.
pub fn field(json: &[u8], path: &str) -> Option<Value> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut de = serde_json::Deserializer::from_slice(json);
    Path(&parts).deserialize(&mut de).ok().flatten()
}

/// Descends `self.0` from the value at hand.
struct Path<'p>(&'p [&'p str]);

impl<'de> DeserializeSeed<'de> for Path<'_> {
    type Value = Option<Value>;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        match self.0 {
            [] => serde::Deserialize::deserialize(de).map(Some),
            _ => de.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Path<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (first, rest) = self.0.split_first().unwrap_or((&"", &[]));
        let mut found = None;
        // Every member is consumed, the wanted one through the rest of the path, so the
        // deserializer stays consistent; a repeated key keeps the last, as serde_json's Value does.
        while let Some(wanted) = map.next_key_seed(KeyIs(first))? {
            if wanted {
                found = map.next_value_seed(Path(rest))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Whether a member's key is `self.0`, compared where the key lies (no copy of it).
struct KeyIs<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(key == self.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_field_is_found_along_its_path_and_nothing_else_is() {
        let pv = json!({"metadata": {"name": "pv"}, "spec": {"claimRef": {"namespace": "a", "name": "data"},
            "list": [1, {"name": "x"}], "n": 5, "s": "x", "b": true, "z": null}});
        let json = serde_json::to_vec(&pv).unwrap();
        assert_eq!(field(&json, "spec.claimRef.name"), Some(json!("data")));
        assert_eq!(
            field(&json, "spec.claimRef"),
            Some(json!({"namespace": "a", "name": "data"}))
        );
        assert_eq!(field(&json, "spec.n"), Some(json!(5)));
        assert_eq!(field(&json, "spec.z"), Some(Value::Null));
        assert_eq!(
            field(&json, "spec.list.name"),
            None,
            "arrays are not stepped into"
        );
        assert_eq!(field(&json, "spec.s.x"), None);
        assert_eq!(field(&json, "spec.missing"), None);
        assert_eq!(field(b"{\"spec\": ", "spec"), None, "garbled JSON");
        assert_eq!(field(b"[1, 2]", "spec"), None);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-c]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn reading_the_bytes_finds_what_the_parsed_object_holds(
            value in json_value(),
            path in prop::collection::vec("[a-c]", 1..4),
        ) {
            let path = path.join(".");
            let json = serde_json::to_vec(&value).unwrap();
            let expected = path.split('.').try_fold(&value, |v, part| v.get(part)).cloned();
            prop_assert_eq!(field(&json, &path), expected);
        }
    }
}
