//! The subresources that are views or single-field writes of the main object: `/scale` (an
//! autoscaling/v1 Scale over the kind's replica paths) and pods' `/binding` (sets `spec.nodeName`
//! once). Both write through [`guaranteed_update`].

use serde_json::{Value, json};

use super::update::guaranteed_update;
use super::{Part, Target};
use crate::apiserver::meta;
use crate::apiserver::registry::ResourceInfo;
use crate::apiserver::selector::LabelSelector;
use crate::apiserver::state::ApiState;
use crate::apiserver::status::{ApiError, Cause};

/// The autoscaling/v1 Scale view of a scalable object (Null for a kind without `/scale`).
pub fn to_scale(info: &ResourceInfo, obj: &Value) -> Value {
    let Some(paths) = &info.subresources.scale else {
        return Value::Null;
    };
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(|p| obj.pointer(p))
        .and_then(|s| LabelSelector::from_object(s).ok())
        .map(|s| s.to_query())
        .unwrap_or_default();
    let mut md = json!({
        "name": meta::name(obj),
        "namespace": meta::namespace(obj),
        "uid": obj["metadata"]["uid"],
        "resourceVersion": obj["metadata"]["resourceVersion"],
        "creationTimestamp": obj["metadata"]["creationTimestamp"],
    });
    if !info.namespaced
        && let Some(m) = md.as_object_mut()
    {
        m.remove("namespace");
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": md,
        "spec": {"replicas": meta::pointer_i64(obj, &paths.spec_replicas).unwrap_or(0)},
        "status": {"replicas": meta::pointer_i64(obj, &paths.status_replicas).unwrap_or(0), "selector": selector},
    })
}

/// PUT/PATCH of `/scale`: `scale_of` turns the current Scale into the desired one. The Scale's
/// resourceVersion, when it differs from the object's, is a precondition.
///
/// # Errors
/// 404 for a kind without `/scale`, plus [`guaranteed_update`]'s and `scale_of`'s.
pub async fn update_scale<F>(st: &ApiState, t: &Target, mut scale_of: F) -> Result<Value, ApiError>
where
    F: FnMut(Value) -> Result<Value, ApiError>,
{
    let info = t.info.clone();
    let Some(paths) = info.subresources.scale.clone() else {
        return Err(ApiError::resource_not_found());
    };
    let obj = guaranteed_update(st, t, Part::Main, "Update", None, |cur| {
        let want = scale_of(to_scale(&info, cur))?;
        let replicas = want["spec"]["replicas"].as_i64().unwrap_or(0);
        let rv = want["metadata"]["resourceVersion"].as_str().unwrap_or("");
        let pinned = if rv == cur["metadata"]["resourceVersion"].as_str().unwrap_or("") {
            ""
        } else {
            rv
        };
        let mut new = cur.clone();
        meta::set(&mut new, "resourceVersion", json!(pinned));
        if let Some(slot) = new.pointer_mut(&paths.spec_replicas) {
            *slot = json!(replicas);
        } else {
            new["spec"]["replicas"] = json!(replicas);
        }
        Ok(new)
    })
    .await?;
    Ok(to_scale(&info, &obj))
}

/// POST `pods/<name>/binding` (or `bindings`): sets spec.nodeName once.
///
/// # Errors
/// 400 for an undecodable Binding, 422 without `target.name`, 409 when already bound, 404 when
/// the pod is gone.
pub async fn bind(st: &ApiState, t: &Target, body: &[u8]) -> Result<Value, ApiError> {
    let b: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding Binding: {e}")))?;
    let node = b["target"]["name"].as_str().unwrap_or("").to_string();
    if node.is_empty() {
        return Err(ApiError::invalid(
            "",
            "Binding",
            meta::name(&b),
            vec![Cause::required("target.name", "")],
        ));
    }
    let name = t.object_name();
    guaranteed_update(st, t, Part::Main, "Update", None, |cur| {
        let bound = cur["spec"]["nodeName"].as_str().unwrap_or("");
        if !bound.is_empty() {
            return Err(ApiError::conflict(
                t.info.gr(),
                &name,
                &format!("pod {name} is already assigned to node \"{bound}\""),
            ));
        }
        let mut new = cur.clone();
        meta::remove(&mut new, "resourceVersion");
        new["spec"]["nodeName"] = json!(node);
        Ok(new)
    })
    .await?;
    Ok(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}
