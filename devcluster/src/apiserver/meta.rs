//! Object metadata helpers: timestamps, uids, generated names, finalizer and field access.

use rand::Rng;
use serde_json::Value;

/// Now, as RFC 3339 with second precision in UTC (the metav1.Time wire form).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `now + secs`, same format.
pub fn now_plus(secs: i64) -> String {
    let t = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(secs);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Seconds since the RFC 3339 timestamp (None when unparsable).
pub fn age_secs(ts: &str) -> Option<i64> {
    let t: jiff::Timestamp = ts.parse().ok()?;
    Some((jiff::Timestamp::now() - t).get_seconds())
}

/// A random v4 uid.
pub fn uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `generateName` + 5 random characters from upstream's alphabet (no vowels, no confusable digits).
pub fn generated_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    // Upstream truncates the prefix so the result stays within 63 characters.
    let max_prefix = 63 - 5;
    let p = if prefix.len() > max_prefix {
        &prefix[..max_prefix]
    } else {
        prefix
    };
    format!("{p}{suffix}")
}

/// `metadata.name`.
pub fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or("")
}

/// `metadata.namespace`.
pub fn namespace(obj: &Value) -> &str {
    obj["metadata"]["namespace"].as_str().unwrap_or("")
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(String::from))
        .collect()
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn deleting(obj: &Value) -> bool {
    obj["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Sets `metadata.<key>`, creating `metadata` if needed.
pub fn set(obj: &mut Value, key: &str, value: Value) {
    if !obj["metadata"].is_object() {
        obj["metadata"] = serde_json::json!({});
    }
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.insert(key.to_string(), value);
    }
}

/// Removes `metadata.<key>`.
pub fn remove(obj: &mut Value, key: &str) {
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove(key);
    }
}

/// Reads a JSON pointer as i64.
pub fn pointer_i64(obj: &Value, ptr: &str) -> Option<i64> {
    obj.pointer(ptr).and_then(Value::as_i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_name_keeps_the_prefix_and_adds_five_characters() {
        let n = generated_name("web-");
        assert!(n.starts_with("web-"));
        assert_eq!(n.len(), 9);
        assert_eq!(generated_name(&"x".repeat(80)).len(), 63);
    }
}
