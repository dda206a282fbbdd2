//! The TokenRequest API (`POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`, what `kubectl
//! create token` calls): issues a token that authenticates as the ServiceAccount.

use std::time::Duration;

use serde_json::{Value, json};

use super::super::meta;
use super::super::state::ApiState;
use super::super::status::{ApiError, Cause, Gr};
use super::tokens::Tokens;

/// The audience tokens get when the request names none (upstream's default `--api-audiences`).
const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// `spec.expirationSeconds` when unset, upstream's default.
const DEFAULT_EXPIRATION: i64 = 3600;
/// The shortest lifetime upstream accepts.
const MIN_EXPIRATION: i64 = 600;
/// The longest lifetime upstream accepts (2^32 s).
const MAX_EXPIRATION: i64 = 1 << 32;

/// Issues a token for ServiceAccount `namespace/name`; `body` is a TokenRequest (or empty). Answers
/// the TokenRequest with `status.token` and `status.expirationTimestamp`, as upstream.
///
/// # Errors
/// 400 for a body that is not a TokenRequest, 422 for a lifetime under 10 minutes or over 2^32 s,
/// 404 when the ServiceAccount does not exist, 500 on etcd failures.
pub async fn token_request(
    st: &ApiState,
    tokens: &Tokens,
    namespace: &str,
    name: &str,
    body: &[u8],
) -> Result<Value, ApiError> {
    let request: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    let spec = &request["spec"];
    let expiration = match &spec["expirationSeconds"] {
        Value::Null => DEFAULT_EXPIRATION,
        v => v
            .as_i64()
            .ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
    };
    let out_of_range = if expiration < MIN_EXPIRATION {
        Some("may not specify a duration less than 10 minutes")
    } else if expiration > MAX_EXPIRATION {
        Some("may not specify a duration larger than 2^32 seconds")
    } else {
        None
    };
    if let Some(detail) = out_of_range {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            vec![Cause::invalid(
                "spec.expirationSeconds",
                &json!(expiration),
                detail,
            )],
        ));
    }
    let audiences = match spec["audiences"].as_array() {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!([DEFAULT_AUDIENCE]),
    };
    let key = format!("/registry/serviceaccounts/{namespace}/{name}");
    let account = st
        .storage
        .get(&key)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .ok_or_else(|| {
            ApiError::not_found(
                Gr {
                    group: "",
                    resource: "serviceaccounts",
                },
                name,
            )
        })?;
    let uid = account.value["metadata"]["uid"]
        .as_str()
        .unwrap_or_default();
    let ttl = Duration::from_secs(u64::try_from(expiration).unwrap_or(0));
    let (token, _) = tokens.issue(namespace, name, uid, ttl);
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": {"audiences": audiences, "expirationSeconds": expiration, "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null)},
        "status": {"token": token, "expirationTimestamp": meta::now_plus(expiration)},
    }))
}
