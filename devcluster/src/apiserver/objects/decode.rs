//! Request bodies: a JSON body meant for a resource is decoded, its kind and apiVersion checked and
//! its fields checked against the kind's types, worded like kube-apiserver's decoder; unknown fields
//! become warnings or, with `fieldValidation=Strict`, a 400.

use serde_json::Value;

use super::Target;
use crate::apiserver::registry::ResourceInfo;
use crate::apiserver::status::ApiError;
use crate::apiserver::typed;

/// Decodes a JSON body meant for `t`'s resource, checking kind/apiVersion like upstream's decoder.
/// Unknown fields are dropped; they are warnings on `t` unless `fieldValidation` is `Strict` (400)
/// or `Ignore` (silent).
///
/// # Errors
/// 400 BadRequest for unparsable JSON, a non-object, the wrong kind/apiVersion, a field of the
/// wrong type, or an unknown field under `fieldValidation=Strict`.
pub fn decode_body(t: &Target, body: &[u8]) -> Result<Value, ApiError> {
    let info = &t.info;
    let v = parse_object(info, body)?;
    check_type(info, &v)?;
    if let Err(e) = typed::check(info, &v) {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            info.kind, info.version, info.kind
        )));
    }
    let mut v = v;
    drop_unknown_fields(t, &mut v)?;
    Ok(v)
}

/// The body as a JSON object.
fn parse_object(info: &ResourceInfo, body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        let snippet: String = String::from_utf8_lossy(body).chars().take(30).collect();
        let why = if e.is_eof() {
            "unexpected end of JSON input".to_string()
        } else {
            e.to_string()
        };
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {why} ({snippet} ...)",
            info.kind
        ))
    })?;
    if !v.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            info.kind,
            if v.is_array() { "array" } else { "value" }
        )));
    }
    Ok(v)
}

/// `kind` and `apiVersion`, when given, must be the resource's.
fn check_type(info: &ResourceInfo, v: &Value) -> Result<(), ApiError> {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let version = api_version.rsplit('/').next().unwrap_or("");
    let kind_ok = kind.is_empty() || kind == info.kind;
    let version_ok = api_version.is_empty() || api_version == info.api_version();
    if kind_ok && version_ok {
        return Ok(());
    }
    let k = if kind.is_empty() { &info.kind } else { kind };
    Err(ApiError::bad_request(format!(
        "{k} in version \"{version}\" cannot be handled as a {}: converting ({version}.{k}) to ({}.{}): unknown conversion",
        info.kind,
        internal_group(&info.group),
        info.kind
    )))
}

/// The internal API group name upstream's conversion errors print (`core`, `apps`, `networking`).
fn internal_group(group: &str) -> &str {
    if group.is_empty() {
        "core"
    } else {
        group.split('.').next().unwrap_or(group)
    }
}

/// Drops fields the kind does not have, as `fieldValidation` asks.
fn drop_unknown_fields(t: &Target, v: &mut Value) -> Result<(), ApiError> {
    let info = &t.info;
    let unknown = typed::drop_unknown(info, v);
    if unknown.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match t.query.get("fieldValidation") {
        Some("Strict") => Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            info.kind,
            info.version,
            info.kind,
            listed.join(", ")
        ))),
        Some("Ignore") => Ok(()),
        _ => {
            t.warnings.lock().extend(listed);
            Ok(())
        }
    }
}
