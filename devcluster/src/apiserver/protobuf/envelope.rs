//! The envelope of a Kubernetes protobuf body: the `k8s\0` magic, then a `runtime.Unknown` carrying
//! the object's apiVersion/kind and its encoded bytes.

use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;

use super::ProtobufError;

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// An unwrapped envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// `typeMeta.apiVersion` ("" when the sender left it out).
    pub api_version: String,
    /// `typeMeta.kind` ("" when the sender left it out).
    pub kind: String,
    /// The object itself, encoded as its own protobuf message.
    pub raw: Vec<u8>,
}

/// Unwraps a protobuf request body.
///
/// # Errors
/// [`ProtobufError::Empty`], [`ProtobufError::Magic`] without the `k8s\0` prefix,
/// [`ProtobufError::Envelope`] when the `runtime.Unknown` does not decode (a truncated body), and
/// [`ProtobufError::Encoding`] for a `contentEncoding` or `contentType` other than plain protobuf
/// (kube-apiserver does not decode those in request bodies either).
pub fn open(body: &[u8]) -> Result<Envelope, ProtobufError> {
    if body.is_empty() {
        return Err(ProtobufError::Empty);
    }
    let Some(rest) = body.strip_prefix(&MAGIC) else {
        return Err(ProtobufError::Magic);
    };
    let unknown = Unknown::decode(rest).map_err(ProtobufError::Envelope)?;
    let encoding = unknown.content_encoding.unwrap_or_default();
    let content_type = unknown.content_type.unwrap_or_default();
    if !encoding.is_empty() || !(content_type.is_empty() || content_type == super::MEDIA_TYPE) {
        return Err(ProtobufError::Encoding {
            encoding,
            content_type,
        });
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    Ok(Envelope {
        api_version: type_meta.api_version.unwrap_or_default(),
        kind: type_meta.kind.unwrap_or_default(),
        raw: unknown.raw.unwrap_or_default(),
    })
}

/// Wraps `raw` in an envelope (the inverse of [`open`]; used by tests).
#[cfg(test)]
pub fn seal(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = MAGIC.to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_envelope_opens_to_the_same_parts() {
        let body = seal("v1", "ConfigMap", vec![1, 2, 3]);
        let env = open(&body).unwrap();
        assert_eq!(
            env,
            Envelope {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                raw: vec![1, 2, 3],
            }
        );
    }

    #[test]
    fn a_body_without_the_magic_is_refused() {
        assert!(matches!(open(b"{\"kind\":1}"), Err(ProtobufError::Magic)));
        assert!(matches!(open(b""), Err(ProtobufError::Empty)));
    }

    #[test]
    fn every_truncation_of_an_envelope_is_an_error_or_a_shorter_envelope_never_a_panic() {
        let body = seal("apps/v1", "Deployment", vec![0x0a, 0x03, b'w', b'e', b'b']);
        for len in 0..body.len() {
            let _ = open(&body[..len]);
        }
        // Cut inside `raw`, before the (empty) content fields at the end.
        assert!(matches!(
            open(&body[..body.len() - 6]),
            Err(ProtobufError::Envelope(_))
        ));
    }

    #[test]
    fn a_gzip_content_encoding_is_refused() {
        let unknown = Unknown {
            content_encoding: Some("gzip".into()),
            ..Default::default()
        };
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        assert!(matches!(open(&body), Err(ProtobufError::Encoding { .. })));
    }
}
