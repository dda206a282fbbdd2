//! API errors rendered as `metav1.Status` bodies with upstream reasons, codes and message formats.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// One `details.causes[]` entry of a Status.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    /// Human readable, e.g. `Required value`.
    pub message: String,
    /// The JSON path of the field, e.g. `metadata.name`.
    pub field: String,
}

impl Cause {
    /// A `FieldValueRequired` cause.
    pub fn required(field: &str, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Cause {
            reason: "FieldValueRequired",
            message,
            field: field.to_string(),
        }
    }

    /// A `FieldValueInvalid` cause; `value` is rendered like Go's `%q`/JSON.
    pub fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {}: {detail}", render_value(value)),
            field: field.to_string(),
        }
    }

    /// A `FieldValueForbidden` cause.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field: field.to_string(),
        }
    }

    /// A `FieldValueNotSupported` cause.
    pub fn not_supported(field: &str, value: &Value, supported: &[&str]) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: {list}",
                render_value(value)
            ),
            field: field.to_string(),
        }
    }

    /// A `FieldValueTooLong` cause for a value over `limit` bytes (upstream's `field.TooLong`, which
    /// never repeats the value: it may be megabytes).
    pub fn too_long(field: &str, limit: usize) -> Self {
        Cause {
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {limit} bytes"),
            field: field.to_string(),
        }
    }

    /// A `FieldValueTypeInvalid` cause (CRD schema validation).
    pub fn type_invalid(field: &str, value: &Value, expected: &str) -> Self {
        Cause {
            reason: "FieldValueTypeInvalid",
            message: format!(
                "Invalid value: \"{}\": {field} in body must be of type {expected}: \"{}\"",
                type_name(value),
                type_name(value)
            ),
            field: field.to_string(),
        }
    }

    fn to_json(&self) -> Value {
        json!({"reason": self.reason, "message": self.message, "field": self.field})
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        other => other.to_string(),
    }
}

/// An API failure: HTTP code, Status reason, message and details; or a plain-text 404 for unknown paths.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Status reason (`NotFound`, `Invalid`, ...); empty for the plain-text 404.
    pub reason: &'static str,
    /// Status message.
    pub message: String,
    /// `details` (None: no details key at all).
    pub details: Option<Box<Value>>,
    /// `metadata` of the Status (a continue token for expired continues).
    pub metadata: Box<Value>,
}

/// The group/resource pair used by upstream in messages (`deployments.apps`) and details.
#[derive(Debug, Clone, Copy)]
pub struct Gr<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
}

impl Gr<'_> {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    fn details(&self, name: &str) -> Value {
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !self.group.is_empty() {
            d.insert("group".into(), json!(self.group));
        }
        d.insert("kind".into(), json!(self.resource));
        Value::Object(d)
    }
}

impl ApiError {
    fn new(
        code: u16,
        reason: &'static str,
        message: impl Into<String>,
        details: Option<Value>,
    ) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: details.map(Box::new),
            metadata: Box::new(json!({})),
        }
    }

    /// 404 NotFound for an object.
    pub fn not_found(gr: Gr<'_>, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", gr.qualified()),
            Some(gr.details(name)),
        )
    }

    /// 404 for a known group/version but unknown resource.
    pub fn resource_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
            Some(json!({})),
        )
    }

    /// The plain-text `404 page not found` of the Go mux.
    pub fn page_not_found() -> Self {
        Self::new(404, "", "404 page not found\n", None)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(gr: Gr<'_>, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", gr.qualified()),
            Some(gr.details(name)),
        )
    }

    /// 409 Conflict for a stale resourceVersion or failed precondition.
    pub fn conflict(gr: Gr<'_>, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                gr.qualified()
            ),
            Some(gr.details(name)),
        )
    }

    /// The 409 of a stale resourceVersion.
    pub fn stale(gr: Gr<'_>, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with field causes; `kind` is the Kind (not the plural).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let rendered: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let list = if rendered.len() == 1 {
            rendered[0].clone()
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        d.insert("kind".into(), json!(kind));
        d.insert(
            "causes".into(),
            Value::Array(causes.iter().map(Cause::to_json).collect()),
        );
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {list}"),
            Some(Value::Object(d)),
        )
    }

    /// 422 Invalid with only a message (failed JSON patch operations).
    pub fn invalid_plain(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message, Some(json!({})))
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message, None)
    }

    /// 403 Forbidden.
    pub fn forbidden(gr: Gr<'_>, name: &str, why: &str, causes: Vec<Cause>) -> Self {
        let mut d = gr.details(name);
        if !causes.is_empty() {
            d["causes"] = Value::Array(causes.iter().map(Cause::to_json).collect());
        }
        Self::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", gr.qualified()),
            Some(d),
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            Some(json!({})),
        )
    }

    /// 410 Expired.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message, None)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
            None,
        )
    }

    /// 415 for a POST/PUT body in an unknown format. Custom resources have no protobuf form, so
    /// their message (like upstream's) does not offer it.
    pub fn unsupported_body(custom: bool) -> Self {
        let accepted = if custom {
            "application/json, application/yaml"
        } else {
            "application/json, application/yaml, application/vnd.kubernetes.protobuf"
        };
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            ),
            None,
        )
    }

    /// 406 when the Accept header allows nothing devcluster writes (it answers in JSON only).
    pub fn not_acceptable() -> Self {
        Self::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json",
            None,
        )
    }

    /// 415 for a PATCH with a non-patch content type.
    pub fn unsupported_patch() -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            "415: Unsupported Media Type",
            Some(json!({})),
        )
    }

    /// 500 InternalError (etcd trouble and the like).
    pub fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
            Some(json!({"causes": [{"message": message}]})),
        )
    }

    /// Attaches a Status `metadata` (e.g. a fresh continue token).
    pub fn with_metadata(mut self, metadata: Value) -> Self {
        self.metadata = Box::new(metadata);
        self
    }

    /// The Status object body.
    pub fn status_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("metadata".into(), (*self.metadata).clone());
        m.insert("status".into(), json!("Failure"));
        m.insert("message".into(), json!(self.message));
        m.insert("reason".into(), json!(self.reason));
        if let Some(d) = &self.details {
            m.insert("details".into(), (**d).clone());
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if self.reason.is_empty() {
            let mut r = (code, self.message).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r.headers_mut().insert(
                "x-content-type-options",
                HeaderValue::from_static("nosniff"),
            );
            return r;
        }
        let body = serde_json::to_vec(&self.status_json()).unwrap_or_default();
        let mut r = (code, body).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_status_with_two_causes_brackets_the_list() {
        let e = ApiError::invalid(
            "apps",
            "Deployment",
            "nosel",
            vec![
                Cause::required("spec.selector", ""),
                Cause::invalid(
                    "spec.template.metadata.labels",
                    &json!({"app": "b"}),
                    "`selector` does not match template `labels`",
                ),
            ],
        );
        assert_eq!(
            e.message,
            "Deployment.apps \"nosel\" is invalid: [spec.selector: Required value, spec.template.metadata.labels: Invalid value: {\"app\":\"b\"}: `selector` does not match template `labels`]"
        );
        assert_eq!(e.status_json()["details"]["group"], "apps");
    }

    #[test]
    fn a_not_found_in_the_core_group_has_no_group_detail() {
        let e = ApiError::not_found(
            Gr {
                group: "",
                resource: "configmaps",
            },
            "x",
        );
        let s = e.status_json();
        assert_eq!(s["message"], "configmaps \"x\" not found");
        assert!(s["details"].get("group").is_none());
        assert_eq!(s["code"], 404);
    }
}
