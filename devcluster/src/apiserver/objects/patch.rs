//! PATCH on an object (main resource or `/status`): the patch is decoded by its content type and
//! applied to the current object inside [`guaranteed_update`], so it is re-applied to the newer object
//! when another writer wins a race. An apply patch on an object that does not exist creates it.

use serde_json::{Value, json};

use super::create::create_as;
use super::update::guaranteed_update;
use super::{Part, Target, internal};
use crate::apiserver::state::ApiState;
use crate::apiserver::status::{ApiError, Cause};
use crate::apiserver::{meta, patch as patches, yaml};

/// The PATCH flavours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// application/merge-patch+json
    Merge,
    /// application/json-patch+json
    Json,
    /// application/strategic-merge-patch+json
    Strategic,
    /// application/apply-patch+yaml
    Apply,
}

const NOT_A_JSON_PATCH: &str = "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp";

/// PATCH on an object (main resource or `/status`). Returns the object and whether it was created
/// (an apply patch on a missing object).
///
/// # Errors
/// 400 for a malformed patch, 422 when a JSON patch operation fails or an apply patch names no
/// `fieldManager`, 415 for a strategic merge patch of a custom resource, plus
/// [`guaranteed_update`]'s.
pub async fn patch(
    st: &ApiState,
    t: &Target,
    part: Part,
    kind: PatchKind,
    body: &[u8],
) -> Result<(Value, bool), ApiError> {
    let p = decode(kind, body)?;
    if kind == PatchKind::Apply {
        require_field_manager(t)?;
        if part == Part::Main && st.storage.get(&t.key()).await.map_err(internal)?.is_none() {
            return Ok((create_by_apply(st, t, &p).await?, true));
        }
    }
    check_shape(kind, &p)?;
    let operation = if kind == PatchKind::Apply {
        "Apply"
    } else {
        "Update"
    };
    let custom = t.info.custom;
    let updated = guaranteed_update(st, t, part, operation, p.is_object().then_some(&p), |cur| {
        apply_to(cur, kind, custom, &p)
    })
    .await?;
    Ok((updated, false))
}

/// The patch document: YAML (or JSON) for apply patches, JSON otherwise.
fn decode(kind: PatchKind, body: &[u8]) -> Result<Value, ApiError> {
    if kind == PatchKind::Apply {
        yaml::parse(body).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
    }
}

/// An apply patch must name its field manager (422, as upstream).
fn require_field_manager(t: &Target) -> Result<(), ApiError> {
    if t.query.get("fieldManager").is_none_or(str::is_empty) {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause::required(
                "fieldManager",
                "is required for apply patch",
            )],
        ));
    }
    Ok(())
}

/// Creates the object an apply patch describes, named as the URL when the patch names none.
async fn create_by_apply(st: &ApiState, t: &Target, p: &Value) -> Result<Value, ApiError> {
    let mut body = p.clone();
    if meta::name(&body).is_empty() {
        meta::set(&mut body, "name", json!(t.object_name()));
    }
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    create_as(st, t, &bytes, true).await
}

/// A JSON patch is a list of operations; the other flavours are objects.
fn check_shape(kind: PatchKind, p: &Value) -> Result<(), ApiError> {
    if kind == PatchKind::Json && !p.is_array() {
        return Err(ApiError::bad_request(NOT_A_JSON_PATCH));
    }
    if kind != PatchKind::Json && !p.is_object() {
        return Err(ApiError::bad_request(
            "error decoding patch: json: cannot unmarshal into Go value of type map[string]interface {}",
        ));
    }
    Ok(())
}

/// The current object with the patch applied. A resourceVersion only counts as a precondition
/// when the patch itself sets one, so the stored one is removed first.
fn apply_to(cur: &Value, kind: PatchKind, custom: bool, p: &Value) -> Result<Value, ApiError> {
    let mut doc = cur.clone();
    meta::remove(&mut doc, "resourceVersion");
    match kind {
        PatchKind::Merge => patches::merge(&mut doc, p),
        PatchKind::Strategic if custom => {
            return Err(ApiError::unsupported_patch());
        }
        PatchKind::Strategic => patches::strategic(&mut doc, p),
        PatchKind::Apply if custom => patches::merge(&mut doc, p),
        PatchKind::Apply => patches::strategic(&mut doc, p),
        PatchKind::Json => {
            if let Err(not_array) = patches::json(&mut doc, p) {
                return Err(if not_array {
                    ApiError::bad_request(NOT_A_JSON_PATCH)
                } else {
                    ApiError::invalid_plain(
                        "the server rejected our request due to an error in our request",
                    )
                });
            }
        }
    }
    Ok(doc)
}
