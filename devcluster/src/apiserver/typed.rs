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
