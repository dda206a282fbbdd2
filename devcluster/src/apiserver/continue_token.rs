//! List continue tokens in upstream's format: base64url(JSON {"v":"meta.k8s.io/v1","rv":N,"start":"<key>\u0000"}).

use base64::Engine;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Token {
    v: String,
    rv: i64,
    start: String,
}

/// A decoded continue token: the snapshot revision and the key (relative to the collection prefix) to resume at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continue {
    /// etcd revision of the list snapshot; -1 for an inconsistent continuation.
    pub rv: i64,
    /// Key to start at, relative to the list's prefix, without the leading `/` stripped (upstream keeps `/cm1\0`).
    pub start: String,
}

/// Encodes a token.
pub fn encode(rv: i64, start: &str) -> String {
    let t = Token {
        v: "meta.k8s.io/v1".into(),
        rv,
        start: start.into(),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&t).unwrap_or_default())
}

/// Decodes a token.
///
/// # Errors
/// A message for the 400 BadRequest upstream returns for a garbled token.
pub fn decode(s: &str) -> Result<Continue, String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .or_else(|_| URL_SAFE.decode(s))
        .map_err(|e| format!("continue key is not valid: {e}"))?;
    let t: Token =
        serde_json::from_slice(&bytes).map_err(|e| format!("continue key is not valid: {e}"))?;
    if t.v != "meta.k8s.io/v1" {
        return Err("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into());
    }
    if t.start.contains("..") || t.start.is_empty() {
        return Err("continue key is not valid: key start is invalid".into());
    }
    Ok(Continue {
        rv: t.rv,
        start: t.start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_the_recorded_upstream_bytes() {
        assert_eq!(
            encode(632, "/cm1\u{0}"),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NjMyLCJzdGFydCI6Ii9jbTFcdTAwMDAifQ"
        );
    }

    #[test]
    fn a_recorded_token_decodes_to_its_revision_and_start() {
        let c = decode("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NjMyLCJzdGFydCI6Ii9jbTNcdTAwMDAifQ")
            .unwrap();
        assert_eq!(
            c,
            Continue {
                rv: 632,
                start: "/cm3\u{0}".into()
            }
        );
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(decode("not-a-token").is_err());
    }
}
