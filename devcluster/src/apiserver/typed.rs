//! The few typed-decoding checks upstream's strict Go structs make that clients trip over (string maps
//! holding non-strings), worded like Go's json errors.

use serde_json::Value;

use super::registry::ResourceInfo;

fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::String(_) => "string",
        Value::Null => "null",
    }
}

fn string_map(v: &Value, owner: &str, field: &str) -> Result<(), String> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(m)) => match m.values().find(|x| !x.is_string()) {
            Some(bad) => Err(format!(
                "json: cannot unmarshal {} into Go struct field {owner}.{field} of type string",
                go_type(bad)
            )),
            None => Ok(()),
        },
        Some(other) => Err(format!(
            "json: cannot unmarshal {} into Go struct field {owner}.{field} of type map[string]string",
            go_type(other)
        )),
    }
}

/// Checks the shape of the fields whose type errors upstream reports as 400 at decode time.
///
/// # Errors
/// A Go-style decode message.
pub fn check(info: &ResourceInfo, v: &Value) -> Result<(), String> {
    if let Some(m) = v.get("metadata") {
        if !m.is_object() && !m.is_null() {
            return Err(format!(
                "json: cannot unmarshal {} into Go struct field {}.metadata of type v1.ObjectMeta",
                go_type(m),
                info.kind
            ));
        }
        string_map(m, "ObjectMeta", "labels")?;
        string_map(m, "ObjectMeta", "annotations")?;
        if let Some(name) = m.get("name")
            && !name.is_string()
            && !name.is_null()
        {
            return Err(format!(
                "json: cannot unmarshal {} into Go struct field ObjectMeta.metadata.name of type string",
                go_type(name)
            ));
        }
    }
    if !info.custom {
        match info.kind.as_str() {
            "ConfigMap" => {
                string_map(v, "ConfigMap", "data")?;
                string_map(v, "ConfigMap", "binaryData")?;
            }
            "Secret" => {
                string_map(v, "Secret", "data")?;
                string_map(v, "Secret", "stringData")?;
            }
            _ => {}
        }
        if let Some(spec) = v.get("spec")
            && !spec.is_object()
            && !spec.is_null()
        {
            return Err(format!(
                "json: cannot unmarshal {} into Go struct field {}.spec of type v1.{}Spec",
                go_type(spec),
                info.kind,
                info.kind
            ));
        }
    }
    Ok(())
}

fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Option<Value> {
    let typed: T = serde_json::from_value(v.clone()).ok()?;
    serde_json::to_value(typed).ok()
}

/// The built-in object as its typed (k8s-openapi) form sees it, or None when there is no typed form or
/// the object does not decode (then nothing is reported as unknown).
fn typed_view(info: &ResourceInfo, v: &Value) -> Option<Value> {
    use k8s_openapi::api::{apps, batch, coordination, core, discovery, events};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    if info.custom {
        return None;
    }
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "ConfigMap") => roundtrip::<core::v1::ConfigMap>(v),
        ("", "Endpoints") => roundtrip::<core::v1::Endpoints>(v),
        ("", "Event") => roundtrip::<core::v1::Event>(v),
        ("", "Namespace") => roundtrip::<core::v1::Namespace>(v),
        ("", "Node") => roundtrip::<core::v1::Node>(v),
        ("", "PersistentVolumeClaim") => roundtrip::<core::v1::PersistentVolumeClaim>(v),
        ("", "Pod") => roundtrip::<core::v1::Pod>(v),
        ("", "ReplicationController") => roundtrip::<core::v1::ReplicationController>(v),
        ("", "Secret") => roundtrip::<core::v1::Secret>(v),
        ("", "ServiceAccount") => roundtrip::<core::v1::ServiceAccount>(v),
        ("", "Service") => roundtrip::<core::v1::Service>(v),
        ("apps", "ControllerRevision") => roundtrip::<apps::v1::ControllerRevision>(v),
        ("apps", "DaemonSet") => roundtrip::<apps::v1::DaemonSet>(v),
        ("apps", "Deployment") => roundtrip::<apps::v1::Deployment>(v),
        ("apps", "ReplicaSet") => roundtrip::<apps::v1::ReplicaSet>(v),
        ("apps", "StatefulSet") => roundtrip::<apps::v1::StatefulSet>(v),
        ("batch", "CronJob") => roundtrip::<batch::v1::CronJob>(v),
        ("batch", "Job") => roundtrip::<batch::v1::Job>(v),
        ("coordination.k8s.io", "Lease") => roundtrip::<coordination::v1::Lease>(v),
        ("discovery.k8s.io", "EndpointSlice") => roundtrip::<discovery::v1::EndpointSlice>(v),
        ("events.k8s.io", "Event") => roundtrip::<events::v1::Event>(v),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            roundtrip::<apiext::CustomResourceDefinition>(v)
        }
        _ => None,
    }
}

fn collect_unknown(orig: &mut Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    match (orig, typed) {
        (Value::Object(o), Value::Object(t)) => {
            let keys: Vec<String> = o.keys().cloned().collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match t.get(&k) {
                    Some(tv) => {
                        if let Some(ov) = o.get_mut(&k) {
                            collect_unknown(ov, tv, &p, out);
                        }
                    }
                    None if o.get(&k).is_some_and(|x| !x.is_null()) => {
                        o.remove(&k);
                        out.push(p);
                    }
                    None => {}
                }
            }
        }
        (Value::Array(o), Value::Array(t)) => {
            for (i, (ov, tv)) in o.iter_mut().zip(t.iter()).enumerate() {
                collect_unknown(ov, tv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Removes the fields of a built-in object its type does not declare; returns their paths (upstream's
/// default `fieldValidation=Warn` drops them with a warning, `Strict` refuses the request).
pub fn drop_unknown(info: &ResourceInfo, v: &mut Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(t) = typed_view(info, v) {
        collect_unknown(v, &t, "", &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::builtins::builtins;
    use serde_json::json;

    #[test]
    fn unknown_fields_of_a_configmap_are_found_and_dropped() {
        let info = builtins()
            .into_iter()
            .find(|r| r.kind == "ConfigMap")
            .unwrap();
        let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "bogus": 1}, "data": {"a": "b"}, "bogusTop": "x"});
        let dropped = drop_unknown(&info, &mut v);
        assert_eq!(
            dropped,
            vec!["metadata.bogus".to_string(), "bogusTop".to_string()]
        );
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}})
        );
    }

    #[test]
    fn a_pod_without_containers_still_decodes_or_is_left_alone() {
        let info = builtins().into_iter().find(|r| r.kind == "Pod").unwrap();
        let mut v = json!({"metadata": {"name": "p"}, "spec": {}});
        assert!(drop_unknown(&info, &mut v).is_empty());
    }
}
