//! Upstream's `OwnerReferencesPermissionEnforcement` admission (`plugin/pkg/admission/gc`), on in RBAC
//! mode as on clusters that enable it: changing an object's ownerReferences needs `delete` on the
//! object (except on create), and a reference that newly sets `blockOwnerDeletion` needs `update` on
//! the owner's `finalizers` subresource. This is why controllers' roles grant `<owners>/finalizers`.
//!
//! devcluster checks here, before the body is applied, so a patch's ownerReferences are read from the
//! patch: a JSON body's `metadata.ownerReferences` (create, update, merge, strategic and apply patches)
//! or the values of JSON-patch operations on `/metadata/ownerReferences…`, compared with the stored
//! object's. Protobuf bodies and subresources are not checked.

use serde_json::Value;

use super::super::state::ApiState;
use super::super::status::ApiError;
use super::attributes::Attributes;
use super::gate::Auth;
use super::responses::admission_forbidden;
use super::user::UserInfo;

/// Checks a create, update or patch of `attrs` with JSON `body` from `user`.
///
/// # Errors
/// 403 as upstream words it when a check fails; 500 on etcd failures.
pub async fn admit_owner_references(
    st: &ApiState,
    auth: &Auth,
    user: &UserInfo,
    attrs: &Attributes,
    body: &[u8],
) -> Result<(), ApiError> {
    if !attrs.resource_request
        || !attrs.subresource.is_empty()
        || !matches!(attrs.verb.as_str(), "create" | "update" | "patch")
    {
        return Ok(());
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return Ok(());
    };
    let Some(new_refs) = body_refs(&body) else {
        return Ok(());
    };
    let creating = attrs.verb == "create";
    let name = if creating {
        body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    } else {
        attrs.name.clone()
    };
    let old_refs = if creating {
        Vec::new()
    } else {
        stored_refs(st, attrs).await?
    };
    let changing = if creating {
        !new_refs.is_empty()
    } else {
        attrs.verb == "patch" || new_refs != old_refs
    };
    if !changing {
        return Ok(());
    }
    let deny = |why: String| admission_forbidden(attrs, &name, &why);
    if !creating {
        let delete = Attributes {
            verb: "delete".into(),
            path: String::new(),
            ..attrs.clone()
        };
        let verdict = auth.check(st, user, &delete).await?;
        if !verdict.allowed {
            return Err(deny(format!(
                "cannot set an ownerRef on a resource you can't delete: {}, <nil>",
                verdict.reason
            )));
        }
    }
    for owner in new_refs.iter().filter(|r| newly_blocking(r, &old_refs)) {
        let api_version = owner["apiVersion"].as_str().unwrap_or_default();
        let kind = owner["kind"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let Some(info) = st
            .registry
            .resources_of(group, version)
            .into_iter()
            .find(|r| r.kind == kind)
        else {
            return Err(deny(format!(
                "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {api_version} Kind {kind}: no matches for kind \"{kind}\" in version \"{api_version}\""
            )));
        };
        let finalizers = Attributes {
            verb: "update".into(),
            resource_request: true,
            api_group: info.group.clone(),
            api_version: info.version.clone(),
            resource: info.resource.clone(),
            subresource: "finalizers".into(),
            namespace: attrs.namespace.clone(),
            name: owner["name"].as_str().unwrap_or_default().to_owned(),
            path: String::new(),
        };
        let verdict = auth.check(st, user, &finalizers).await?;
        if !verdict.allowed {
            return Err(deny(format!(
                "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {}, <nil>",
                verdict.reason
            )));
        }
    }
    Ok(())
}

/// The ownerReferences a body sets; None when it does not touch them.
fn body_refs(body: &Value) -> Option<Vec<Value>> {
    if let Some(ops) = body.as_array() {
        let mut refs = Vec::new();
        let mut touched = false;
        for op in ops {
            let path = op["path"].as_str().unwrap_or_default();
            if path.starts_with("/metadata/ownerReferences") {
                touched = true;
                match &op["value"] {
                    Value::Array(list) => refs.extend(list.iter().cloned()),
                    v @ Value::Object(_) => refs.push(v.clone()),
                    _ => {}
                }
            }
        }
        return touched.then_some(refs);
    }
    match &body["metadata"]["ownerReferences"] {
        Value::Array(list) => Some(list.clone()),
        Value::Null if body["metadata"].get("ownerReferences").is_some() => Some(Vec::new()),
        _ => None,
    }
}

/// The stored object's ownerReferences (none when it does not exist: the request fails later).
async fn stored_refs(st: &ApiState, attrs: &Attributes) -> Result<Vec<Value>, ApiError> {
    let Some(info) = st
        .registry
        .lookup(&attrs.api_group, &attrs.api_version, &attrs.resource)
    else {
        return Ok(Vec::new());
    };
    let ns = (!attrs.namespace.is_empty() && info.namespaced).then_some(attrs.namespace.as_str());
    let stored = st
        .storage
        .get(&info.key(ns, &attrs.name))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(stored
        .and_then(|s| s.value["metadata"]["ownerReferences"].as_array().cloned())
        .unwrap_or_default())
}

/// Whether `owner` blocks its owner's deletion and no stored reference with its uid did.
fn newly_blocking(owner: &Value, old: &[Value]) -> bool {
    owner["blockOwnerDeletion"] == true
        && !old
            .iter()
            .any(|o| o["uid"] == owner["uid"] && o["blockOwnerDeletion"] == true)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_body_without_owner_references_does_not_touch_them() {
        assert_eq!(body_refs(&json!({"metadata": {"labels": {}}})), None);
        assert_eq!(
            body_refs(&json!({"metadata": {"ownerReferences": null}})),
            Some(vec![])
        );
        let add =
            json!([{"op": "add", "path": "/metadata/ownerReferences/-", "value": {"uid": "u"}}]);
        assert_eq!(body_refs(&add), Some(vec![json!({"uid": "u"})]));
        assert_eq!(
            body_refs(&json!([{"op": "add", "path": "/spec/x", "value": 1}])),
            None
        );
    }

    #[test]
    fn only_a_reference_that_starts_blocking_needs_the_finalizers_right() {
        let blocking = json!({"uid": "a", "blockOwnerDeletion": true});
        assert!(newly_blocking(&blocking, &[]));
        assert!(!newly_blocking(&blocking, std::slice::from_ref(&blocking)));
        assert!(newly_blocking(&blocking, &[json!({"uid": "a"})]));
        assert!(!newly_blocking(&json!({"uid": "b"}), &[]));
    }
}
