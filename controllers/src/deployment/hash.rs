//! The `pod-template-hash` of a Deployment's template (upstream `controller.ComputeHash`): the name
//! suffix and label that tie a ReplicaSet to one template. It must be the same in every process and
//! every build, so it is FNV-1a (32 bit) over a canonical JSON of the template (object keys sorted,
//! nulls left out), never std's `DefaultHasher`.

use flotilla_sdk::k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

/// The label (on ReplicaSets, their selectors and their pods) carrying the hash.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

/// Consonants and digits only, as upstream's `rand.SafeEncodeString`: no vowels, so no words, and no
/// characters easily confused (0/o, 1/l, 3/e).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The hash of `template` with `collision_count` mixed in (a Deployment bumps the count when a name is
/// taken by a ReplicaSet with another template, which yields a fresh name).
pub fn pod_template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut canonical = Vec::new();
    // A template always serializes; if it ever did not, the empty input still yields a stable name.
    if let Ok(value) = serde_json::to_value(template) {
        write_canonical(&value, &mut canonical);
    }
    let mut hash = fnv1a(FNV_OFFSET, &canonical);
    if let Some(count) = collision_count {
        // Upstream writes the count as 8 little-endian bytes of which the first 4 hold it.
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&count.to_le_bytes());
        hash = fnv1a(hash, &bytes);
    }
    safe_encode(&hash.to_string())
}

fn fnv1a(mut hash: u32, bytes: &[u8]) -> u32 {
    for byte in bytes {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// JSON with object keys in byte order and null members left out, whatever order the serializer
/// (`preserve_order`) kept.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> =
                map.iter().filter(|(_, v)| !v.is_null()).collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend(Value::String(key.clone()).to_string().as_bytes());
                out.push(b':');
                write_canonical(member, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => out.extend(scalar.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn template(labels: &BTreeMap<String, String>, image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "main", "image": image}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_hash_is_pinned_so_names_survive_upgrades() {
        // Changing this value renames every ReplicaSet of every Deployment on upgrade: don't.
        let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        let t = template(&labels, "nginx:1.27");
        assert_eq!(
            pod_template_hash(&t, None),
            pod_template_hash(&t.clone(), None)
        );
        let pinned = pod_template_hash(&t, None);
        assert!(pinned.bytes().all(|b| ALPHANUMS.contains(&b)), "{pinned}");
        assert_eq!(pinned, "79fdc9f5cd");
    }

    #[test]
    fn key_order_does_not_matter() {
        let a: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap();
        let b: PodTemplateSpec = serde_json::from_value(json!({
            "spec": {"containers": [{"image": "i", "name": "c"}]},
            "metadata": {"annotations": {"x": "y"}, "labels": {"b": "2", "a": "1"}}
        }))
        .unwrap();
        assert_eq!(
            pod_template_hash(&a, Some(1)),
            pod_template_hash(&b, Some(1))
        );
    }

    proptest! {
        #[test]
        fn equal_templates_hash_equal_and_the_collision_count_changes_the_hash(
            labels in proptest::collection::btree_map("[a-z]{1,8}", "[a-z0-9]{0,8}", 0..5),
            image in "[a-z]{1,10}:[0-9]{1,3}",
            count in 0i32..1000,
        ) {
            let a = template(&labels, &image);
            let b = template(&labels, &image);
            prop_assert_eq!(pod_template_hash(&a, Some(count)), pod_template_hash(&b, Some(count)));
            prop_assert_ne!(pod_template_hash(&a, Some(count)), pod_template_hash(&a, Some(count + 1)));
            prop_assert_ne!(pod_template_hash(&a, None), pod_template_hash(&a, Some(count)));
        }

        #[test]
        fn another_image_gives_another_hash(image in "[a-z]{1,10}", tag in 0u32..100) {
            let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
            let a = template(&labels, &format!("{image}:{tag}"));
            let b = template(&labels, &format!("{image}:{}", tag + 1));
            prop_assert_ne!(pod_template_hash(&a, None), pod_template_hash(&b, None));
        }
    }
}
