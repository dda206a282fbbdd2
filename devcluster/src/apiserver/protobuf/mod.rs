//! Request bodies in `application/vnd.kubernetes.protobuf` (what kubectl's typed generators and
//! client-go send): decoded into the JSON the same object would have had, so that every write then
//! takes the one JSON path (defaulting, validation, storage).
//!
//! * `envelope` — the `k8s\0` magic and the `runtime.Unknown` around the object.
//! * `delete_options` — a DELETE's options, which come in the group version of the resource.
//! * `kinds` — which (apiVersion, kind) decode, as a list; anything else is refused.
//! * `convert` / `messages` — k8s-pb message → k8s-openapi type, with Go's zero-value rules.

mod convert;
mod delete_options;
mod envelope;
mod kinds;
mod messages;

pub use delete_options::delete_options_to_json;

/// The protobuf media type (request `Content-Type`, `Accept`).
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Why a protobuf body could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    /// The body is empty.
    #[error("empty data")]
    Empty,
    /// The body does not start with `k8s\0` (upstream's message, prefix in decimal bytes).
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    Magic,
    /// The `runtime.Unknown` envelope does not decode (truncated or not protobuf).
    #[error("cannot decode the runtime.Unknown envelope: {0}")]
    Envelope(prost::DecodeError),
    /// The envelope asks for a content encoding or inner content type that is not plain protobuf.
    #[error(
        "unsupported envelope: contentEncoding {encoding:?} and contentType {content_type:?} (only unencoded protobuf is accepted)"
    )]
    Encoding {
        /// `contentEncoding` as sent.
        encoding: String,
        /// `contentType` as sent.
        content_type: String,
    },
    /// The envelope names a kind that has no protobuf form here.
    #[error("no kind {kind:?} is registered for version {api_version:?}")]
    UnknownKind {
        /// `typeMeta.apiVersion`.
        api_version: String,
        /// `typeMeta.kind`.
        kind: String,
    },
    /// The object's bytes do not decode as the kind the envelope names.
    #[error("cannot decode the {kind}: {source}")]
    Object {
        /// The kind the envelope names.
        kind: &'static str,
        /// What prost found wrong.
        source: prost::DecodeError,
    },
    /// A decoded value has no JSON form (an IntOrString of unknown type, a RawExtension that is not
    /// JSON, a time out of range).
    #[error("{0}")]
    Value(String),
}

/// Decodes a protobuf request body into the JSON bytes of the object it carries (with `apiVersion`
/// and `kind`), exactly what a client sending JSON would have sent. An envelope without a kind is
/// taken to carry `default_api_version`/`default_kind` (the URL's), as upstream does.
///
/// The kind is the envelope's, not the URL's: a body of the wrong kind decodes and is then refused
/// by the JSON path like the same mistake in JSON.
///
/// # Errors
/// Every [`ProtobufError`]; none of them panics on any input.
pub fn to_json(
    body: &[u8],
    default_api_version: &str,
    default_kind: &str,
) -> Result<Vec<u8>, ProtobufError> {
    let env = envelope::open(body)?;
    let kind = if env.kind.is_empty() {
        default_kind.to_string()
    } else {
        env.kind
    };
    let api_version = if env.api_version.is_empty() {
        default_api_version.to_string()
    } else {
        env.api_version
    };
    let decode = kinds::decoder(&api_version, &kind)
        .ok_or(ProtobufError::UnknownKind { api_version, kind })?;
    let value = decode(&env.raw)?;
    serde_json::to_vec(&value).map_err(|e| ProtobufError::Value(e.to_string()))
}

#[cfg(test)]
mod tests {
    use k8s_pb::api::apps::v1 as apps;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use prost::Message;
    use serde_json::{Value, json};

    use super::*;

    fn meta(name: &str) -> Option<meta::ObjectMeta> {
        // What Go writes for an ObjectMeta with only a name: every value field, zero or not.
        Some(meta::ObjectMeta {
            name: Some(name.into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            self_link: Some(String::new()),
            uid: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        })
    }

    fn json_of(api_version: &str, kind: &str, raw: Vec<u8>) -> Value {
        let body = envelope::seal(api_version, kind, raw);
        serde_json::from_slice(&to_json(&body, "", "").unwrap()).unwrap()
    }

    #[test]
    fn every_listed_kind_is_the_same_kind_in_k8s_pb_and_k8s_openapi() {
        for (api_version, kind) in kinds::all() {
            let value = json_of(api_version, kind, Vec::new());
            assert_eq!(value["apiVersion"], api_version);
            assert_eq!(value["kind"], kind);
        }
    }

    #[test]
    fn a_configmap_decodes_to_the_json_kubectl_would_send() {
        let cm = core::ConfigMap {
            metadata: meta("web"),
            data: [("k".to_string(), "v".to_string())].into(),
            binary_data: [("b".to_string(), vec![0, 1])].into(),
            immutable: None,
        };
        assert_eq!(
            json_of("v1", "ConfigMap", cm.encode_to_vec()),
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "web"},
                "data": {"k": "v"},
                "binaryData": {"b": "AAE="},
            })
        );
    }

    #[test]
    fn zero_value_fields_are_dropped_and_pointer_zeros_kept() {
        let deployment = apps::Deployment {
            metadata: meta("web"),
            spec: Some(apps::DeploymentSpec {
                replicas: Some(0),
                min_ready_seconds: Some(0),
                paused: Some(false),
                strategy: Some(apps::DeploymentStrategy {
                    r#type: Some(String::new()),
                    rolling_update: None,
                }),
                template: Some(core::PodTemplateSpec {
                    metadata: meta(""),
                    spec: Some(core::PodSpec {
                        containers: vec![core::Container {
                            name: Some("nginx".into()),
                            image: Some("nginx".into()),
                            stdin: Some(false),
                            resources: Some(Default::default()),
                            ..Default::default()
                        }],
                        host_network: Some(false),
                        dns_policy: Some(String::new()),
                        termination_grace_period_seconds: Some(0),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            status: Some(apps::DeploymentStatus {
                replicas: Some(0),
                ..Default::default()
            }),
        };
        assert_eq!(
            json_of("apps/v1", "Deployment", deployment.encode_to_vec()),
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 0,
                    // Required in k8s-openapi, so an unset one shows empty (Go would write null).
                    "selector": {},
                    "strategy": {},
                    "template": {
                        "metadata": {},
                        "spec": {
                            "containers": [{"name": "nginx", "image": "nginx", "resources": {}}],
                            "terminationGracePeriodSeconds": 0,
                        },
                    },
                },
                "status": {},
            })
        );
    }

    /// Bodies kubectl 1.32 sent for `kubectl create <generator> web ...` (`testdata/*.pb`), with the
    /// JSON the same command prints under `--dry-run=client -o json` (`testdata/*.json`).
    const KUBECTL: &[(&str, &[u8], &str)] = &[
        (
            "configmap",
            include_bytes!("testdata/configmap.pb"),
            include_str!("testdata/configmap.json"),
        ),
        (
            "cronjob",
            include_bytes!("testdata/cronjob.pb"),
            include_str!("testdata/cronjob.json"),
        ),
        (
            "deployment",
            include_bytes!("testdata/deployment.pb"),
            include_str!("testdata/deployment.json"),
        ),
        (
            "deployment-zero",
            include_bytes!("testdata/deployment-zero.pb"),
            include_str!("testdata/deployment-zero.json"),
        ),
        (
            "job",
            include_bytes!("testdata/job.pb"),
            include_str!("testdata/job.json"),
        ),
        (
            "namespace",
            include_bytes!("testdata/namespace.pb"),
            include_str!("testdata/namespace.json"),
        ),
        (
            "pdb",
            include_bytes!("testdata/pdb.pb"),
            include_str!("testdata/pdb.json"),
        ),
        (
            "priorityclass",
            include_bytes!("testdata/priorityclass.pb"),
            include_str!("testdata/priorityclass.json"),
        ),
        (
            "quota",
            include_bytes!("testdata/quota.pb"),
            include_str!("testdata/quota.json"),
        ),
        (
            "rolebinding",
            include_bytes!("testdata/rolebinding.pb"),
            include_str!("testdata/rolebinding.json"),
        ),
        (
            "secret",
            include_bytes!("testdata/secret.pb"),
            include_str!("testdata/secret.json"),
        ),
        (
            "service",
            include_bytes!("testdata/service.pb"),
            include_str!("testdata/service.json"),
        ),
        (
            "serviceaccount",
            include_bytes!("testdata/serviceaccount.pb"),
            include_str!("testdata/serviceaccount.json"),
        ),
    ];

    /// Drops `"creationTimestamp": null`: Go's JSON writes a zero time as null, its protobuf as
    /// nothing, and kube-apiserver stores neither.
    fn without_null_timestamps(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if m.get("creationTimestamp") == Some(&Value::Null) {
                    m.remove("creationTimestamp");
                }
                m.values_mut().for_each(without_null_timestamps);
            }
            Value::Array(a) => a.iter_mut().for_each(without_null_timestamps),
            _ => {}
        }
    }

    #[test]
    fn kubectl_s_protobuf_bodies_decode_to_kubectl_s_json_for_the_same_objects() {
        for (name, body, json) in KUBECTL {
            let got: Value = serde_json::from_slice(&to_json(body, "", "").unwrap()).unwrap();
            let mut want: Value = serde_json::from_str(json).unwrap();
            without_null_timestamps(&mut want);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn every_cut_or_flipped_byte_of_a_kubectl_body_is_an_error_or_an_object_never_a_panic() {
        for (_, body, _) in KUBECTL {
            for len in 0..body.len() {
                let _ = to_json(&body[..len], "v1", "ConfigMap");
            }
            for i in 0..body.len() {
                let mut flipped = body.to_vec();
                flipped[i] ^= 0xff;
                let _ = to_json(&flipped, "v1", "ConfigMap");
            }
        }
    }

    #[test]
    fn an_envelope_for_a_kind_without_a_protobuf_form_is_refused() {
        let body = envelope::seal("example.com/v1", "Widget", Vec::new());
        let err = to_json(&body, "example.com/v1", "Widget").unwrap_err();
        assert!(matches!(err, ProtobufError::UnknownKind { .. }), "{err}");
    }

    #[test]
    fn an_envelope_without_a_kind_carries_the_url_s_kind() {
        let body = envelope::seal("", "", core::Namespace::default().encode_to_vec());
        let value: Value =
            serde_json::from_slice(&to_json(&body, "v1", "Namespace").unwrap()).unwrap();
        assert_eq!(value["kind"], "Namespace");
    }

    #[test]
    fn object_bytes_that_are_not_the_named_message_are_an_error() {
        let body = envelope::seal("v1", "ConfigMap", vec![0x0a, 0x05, 0x01]);
        let err = to_json(&body, "v1", "ConfigMap").unwrap_err();
        assert!(
            matches!(
                err,
                ProtobufError::Object {
                    kind: "ConfigMap",
                    ..
                }
            ),
            "{err}"
        );
    }
}
