//! A protobuf `DeleteOptions` body (what client-go's typed clients send with a DELETE when they speak
//! protobuf, e.g. Helm's release storage), decoded into the JSON a JSON client would have sent.

use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use prost::Message;
use serde_json::{Map, Value, json};

use super::{ProtobufError, envelope};

/// The JSON of the `DeleteOptions` in `body`. Any apiVersion is taken: client-go encodes the options in
/// the group version of the resource being deleted, where upstream registers them too.
///
/// # Errors
/// Every [`ProtobufError`] of the envelope; an envelope naming another kind; options that do not decode.
pub fn delete_options_to_json(body: &[u8]) -> Result<Vec<u8>, ProtobufError> {
    let env = envelope::open(body)?;
    if !env.kind.is_empty() && env.kind != "DeleteOptions" {
        return Err(ProtobufError::UnknownKind {
            api_version: env.api_version,
            kind: env.kind,
        });
    }
    let options = pb_meta::DeleteOptions::decode(env.raw.as_slice()).map_err(|source| {
        ProtobufError::Object {
            kind: "DeleteOptions",
            source,
        }
    })?;
    // Every field is a Go pointer or a list: present on the wire only when set, so kept as sent.
    let mut out = Map::new();
    if let Some(grace) = options.grace_period_seconds {
        out.insert("gracePeriodSeconds".into(), json!(grace));
    }
    if let Some(p) = options.preconditions {
        let mut pre = Map::new();
        if let Some(uid) = p.uid {
            pre.insert("uid".into(), json!(uid));
        }
        if let Some(rv) = p.resource_version {
            pre.insert("resourceVersion".into(), json!(rv));
        }
        out.insert("preconditions".into(), Value::Object(pre));
    }
    if let Some(orphan) = options.orphan_dependents {
        out.insert("orphanDependents".into(), json!(orphan));
    }
    if let Some(policy) = options.propagation_policy {
        out.insert("propagationPolicy".into(), json!(policy));
    }
    if !options.dry_run.is_empty() {
        out.insert("dryRun".into(), json!(options.dry_run));
    }
    if let Some(ignore) = options.ignore_store_read_error_with_cluster_breaking_potential {
        out.insert(
            "ignoreStoreReadErrorWithClusterBreakingPotential".into(),
            json!(ignore),
        );
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| ProtobufError::Value(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_pb::apimachinery::pkg::runtime as pb_runtime;

    use super::*;

    fn body(kind: &str, options: &pb_meta::DeleteOptions) -> Vec<u8> {
        let unknown = pb_runtime::Unknown {
            type_meta: Some(pb_runtime::TypeMeta {
                api_version: Some("v1".into()),
                kind: Some(kind.into()),
            }),
            raw: Some(options.encode_to_vec()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = b"k8s\0".to_vec();
        out.extend(unknown.encode_to_vec());
        out
    }

    #[test]
    fn options_decode_to_the_json_a_json_client_sends() {
        let options = pb_meta::DeleteOptions {
            propagation_policy: Some("Foreground".into()),
            preconditions: Some(pb_meta::Preconditions {
                uid: Some("u-1".into()),
                resource_version: None,
            }),
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let json: Value = serde_json::from_slice(
            &delete_options_to_json(&body("DeleteOptions", &options)).unwrap(),
        )
        .unwrap();
        assert_eq!(
            json,
            json!({"propagationPolicy": "Foreground", "preconditions": {"uid": "u-1"}, "gracePeriodSeconds": 0})
        );
    }

    #[test]
    fn another_kind_or_garbage_is_an_error() {
        let options = pb_meta::DeleteOptions::default();
        assert!(delete_options_to_json(&body("Pod", &options)).is_err());
        assert!(delete_options_to_json(b"k8s\0\x0a\xff").is_err());
        assert!(delete_options_to_json(b"{}").is_err());
    }
}
