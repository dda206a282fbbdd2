//! A simplified `metadata.managedFields`: one entry per (manager, operation) whose FieldsV1 lists the fields
//! the manager's request set. No ownership conflicts are computed (documented difference).

use serde_json::{Map, Value, json};

/// The field manager of a request: `fieldManager` if given, else the User-Agent up to the first `/`, else `unknown`.
pub fn manager(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    match user_agent.map(|ua| ua.split('/').next().unwrap_or("")) {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => "unknown".to_string(),
    }
}

fn key_of(elem: &Value) -> Option<String> {
    let m = elem.as_object()?;
    for keys in [
        &["containerPort", "protocol"][..],
        &["port", "protocol"],
        &["name"],
        &["type"],
        &["uid"],
        &["key"],
        &["mountPath"],
        &["ip"],
    ] {
        if keys.iter().all(|k| m.contains_key(*k)) {
            let mut o = Map::new();
            for k in keys {
                o.insert((*k).to_string(), m[*k].clone());
            }
            return Some(format!("k:{}", Value::Object(o)));
        }
    }
    None
}

fn fields(v: &Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, child) in m {
                match child {
                    // An empty map sets nothing (a Lease with `spec: {}` gets no managedFields upstream).
                    Value::Object(c) if c.is_empty() => {}
                    Value::Object(_) => {
                        if let Some(mut f) = fields(child) {
                            if let Some(fm) = f.as_object_mut() {
                                fm.insert(".".into(), json!({}));
                            }
                            out.insert(format!("f:{k}"), f);
                        }
                    }
                    Value::Array(items)
                        if items.iter().all(|i| key_of(i).is_some()) && !items.is_empty() =>
                    {
                        let mut lm = Map::new();
                        lm.insert(".".into(), json!({}));
                        for i in items {
                            let mut f = fields(i).unwrap_or_else(|| json!({}));
                            if let Some(fm) = f.as_object_mut() {
                                fm.insert(".".into(), json!({}));
                            }
                            if let Some(k) = key_of(i) {
                                lm.insert(k, f);
                            }
                        }
                        out.insert(format!("f:{k}"), Value::Object(lm));
                    }
                    _ => {
                        out.insert(format!("f:{k}"), json!({}));
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        _ => None,
    }
}

/// The FieldsV1 set of what a request body sets (system metadata and, unless `status_only`, status excluded).
pub fn fieldset(body: &Value, include_status: bool, status_only: bool) -> Option<Value> {
    let mut b = body.clone();
    let m = b.as_object_mut()?;
    m.remove("apiVersion");
    m.remove("kind");
    if status_only {
        m.retain(|k, _| k == "status");
    } else if !include_status {
        m.remove("status");
    }
    if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| {
            matches!(
                k.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences"
            )
        });
    }
    let mut f = fields(&b)?;
    // The top-level map itself has no "." entry; nested maps do.
    if let Some(fm) = f.as_object_mut() {
        fm.remove(".");
    }
    Some(strip_top_dots(f))
}

fn strip_top_dots(mut f: Value) -> Value {
    // Upstream omits "." for the first level under the root (f:spec has no "." when it is the root's child).
    if let Some(m) = f.as_object_mut() {
        for (_, child) in m.iter_mut() {
            if let Some(c) = child.as_object_mut() {
                c.remove(".");
            }
        }
    }
    f
}

/// Records (replaces) the entry of `manager`/`operation` in `obj`.
pub fn record(
    obj: &mut Value,
    manager: &str,
    operation: &str,
    api_version: &str,
    set: Option<Value>,
    subresource: Option<&str>,
) {
    let Some(set) = set else { return };
    let mut entries: Vec<Value> = obj["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    entries.retain(|e| {
        !(e["manager"] == manager
            && e["operation"] == operation
            && e.get("subresource").and_then(Value::as_str) == subresource)
    });
    let mut e = json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": super::meta::now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": set,
    });
    if let Some(s) = subresource {
        e["subresource"] = json!(s);
    }
    entries.push(e);
    super::meta::set(obj, "managedFields", Value::Array(entries));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_is_the_user_agent_up_to_the_first_slash() {
        assert_eq!(manager(None, Some("kubectl/v1.36 (linux)")), "kubectl");
        assert_eq!(manager(None, None), "unknown");
        assert_eq!(manager(Some("test"), Some("kubectl/v1")), "test");
    }

    #[test]
    fn a_name_only_body_has_no_fields() {
        assert!(
            fieldset(
                &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}),
                false,
                false
            )
            .is_none()
        );
        assert!(
            fieldset(
                &json!({"metadata": {"name": "l"}, "spec": {}}),
                false,
                false
            )
            .is_none()
        );
    }

    #[test]
    fn keyed_list_elements_are_named_by_their_key() {
        let f = fieldset(
            &json!({"spec": {"containers": [{"name": "c", "image": "x"}]}}),
            false,
            false,
        )
        .unwrap();
        assert_eq!(
            f,
            json!({"f:spec": {"f:containers": {".": {}, "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
    }
}
