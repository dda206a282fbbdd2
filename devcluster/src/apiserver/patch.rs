//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch for built-in kinds.

use serde_json::{Map, Value};

/// Applies an RFC 7386 merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Applies an RFC 6902 JSON patch.
///
/// # Errors
/// `Err(true)` when the body is not a patch array (400), `Err(false)` when an operation fails (422).
pub fn json(target: &mut Value, patch: &Value) -> Result<(), bool> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(|_| true)?;
    json_patch::patch(target, &ops).map_err(|_| false)
}

/// The merge key of a list field, or None when the list is replaced wholesale (atomic, as upstream for
/// lists without `patchStrategy: merge`). Decided by field name, with `ports` told apart by content.
fn merge_key(field: &str, sample: &[Value]) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => Some("name"),
        "readinessGates" => Some("conditionType"),
        "hostAliases" => Some("ip"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "conditions" | "addresses" => Some("type"),
        "ownerReferences" => Some("uid"),
        "topologySpreadConstraints" => Some("topologyKey"),
        "ports" => {
            if sample.iter().any(|p| p.get("containerPort").is_some()) {
                Some("containerPort")
            } else {
                Some("port")
            }
        }
        _ => None,
    }
}

/// Primitive lists merged as sets (patchStrategy merge without a key).
fn is_set_list(field: &str) -> bool {
    matches!(field, "finalizers")
}

/// Applies a strategic merge patch (built-in kinds): maps merge recursively, `null` deletes, lists with a
/// merge key merge element-wise (new elements first, as upstream orders them), `$patch: delete|replace`,
/// `$deleteFromPrimitiveList/<f>`; `$setElementOrder/<f>` and `$retainKeys` are accepted and ignored.
pub fn strategic(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => merge_map(t, p),
        _ => *target = strip_directives(patch),
    }
}

fn merge_map(t: &mut Map<String, Value>, p: &Map<String, Value>) {
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut clean = p.clone();
        clean.remove("$patch");
        *t = strip_map(&clean);
        return;
    }
    for (k, pv) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(del)) = (
                t.get_mut(field).and_then(Value::as_array_mut),
                pv.as_array(),
            ) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        match pv {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(pm) => {
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    t.remove(k);
                    continue;
                }
                match t.get_mut(k).and_then(Value::as_object_mut) {
                    Some(tm) => merge_map(tm, pm),
                    None => {
                        t.insert(k.clone(), Value::Object(strip_map(pm)));
                    }
                }
            }
            Value::Array(pl) => {
                let merged = match t.get(k).and_then(Value::as_array) {
                    Some(tl) => merge_list(k, tl, pl),
                    None => pl
                        .iter()
                        .filter(|e| !is_delete(e))
                        .map(strip_directives)
                        .collect(),
                };
                t.insert(k.clone(), Value::Array(merged));
            }
            other => {
                t.insert(k.clone(), other.clone());
            }
        }
    }
}

fn is_delete(e: &Value) -> bool {
    e.get("$patch").and_then(Value::as_str) == Some("delete")
}

fn merge_list(field: &str, target: &[Value], patch: &[Value]) -> Vec<Value> {
    if patch
        .iter()
        .any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return patch
            .iter()
            .filter(|e| e.get("$patch").is_none())
            .map(strip_directives)
            .collect();
    }
    if is_set_list(field) {
        let mut out: Vec<Value> = target.to_vec();
        for e in patch {
            if !out.contains(e) {
                out.push(e.clone());
            }
        }
        return out;
    }
    let Some(key) = merge_key(field, target).or_else(|| merge_key(field, patch)) else {
        return patch.iter().map(strip_directives).collect();
    };
    let mut out: Vec<Value> = target.to_vec();
    let mut fresh = Vec::new();
    for pe in patch {
        let Some(id) = pe.get(key) else { continue };
        let pos = out.iter().position(|te| te.get(key) == Some(id));
        match (pos, is_delete(pe)) {
            (Some(i), true) => {
                out.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic(&mut out[i], pe),
            (None, false) => fresh.push(strip_directives(pe)),
        }
    }
    fresh.extend(out);
    fresh
}

fn strip_map(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
        .map(|(k, v)| (k.clone(), strip_directives(v)))
        .collect()
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_map(m)),
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|e| !is_delete(e))
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "nginx:1.25", "ports": [{"containerPort": 80, "protocol": "TCP"}]},
            {"name": "b", "image": "busybox", "env": [{"name": "K", "value": "V"}]}
        ]}}}})
    }

    #[test]
    fn containers_merge_by_name_and_keep_other_fields() {
        let mut d = base();
        strategic(
            &mut d,
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "busybox:1.37"}]}}}}),
        );
        let cs = &d["spec"]["template"]["spec"]["containers"];
        assert_eq!(cs[1]["image"], "busybox:1.37");
        assert_eq!(cs[1]["env"][0]["name"], "K");
        assert_eq!(cs.as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_new_container_is_placed_first() {
        let mut d = base();
        strategic(
            &mut d,
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "redis:7"}]}}}}),
        );
        let names: Vec<_> = d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].clone())
            .collect();
        assert_eq!(names, vec![json!("c"), json!("a"), json!("b")]);
    }

    #[test]
    fn the_delete_directive_removes_an_element() {
        let mut d = base();
        strategic(
            &mut d,
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}}}),
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn container_ports_merge_by_container_port() {
        let mut d = base();
        strategic(
            &mut d,
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 8080}]}]}}}}),
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["ports"],
            json!([{"containerPort": 8080}, {"containerPort": 80, "protocol": "TCP"}])
        );
    }

    #[test]
    fn conditions_merge_by_type_and_tolerations_are_replaced() {
        let mut pod = json!({"spec": {"tolerations": [{"key": "a"}]}, "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}});
        strategic(
            &mut pod,
            &json!({"spec": {"tolerations": [{"key": "b"}]}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        assert_eq!(pod["spec"]["tolerations"], json!([{"key": "b"}]));
        assert_eq!(
            pod["status"]["conditions"][0],
            json!({"type": "Ready", "status": "True"})
        );
        assert_eq!(pod["status"]["conditions"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn null_deletes_a_key_and_finalizers_merge_as_a_set() {
        let mut o = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]}});
        strategic(
            &mut o,
            &json!({"metadata": {"labels": {"a": null}, "finalizers": ["y", "x"]}}),
        );
        assert_eq!(o["metadata"]["labels"], json!({"b": "2"}));
        assert_eq!(o["metadata"]["finalizers"], json!(["x", "y"]));
    }
}
