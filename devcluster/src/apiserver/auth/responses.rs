//! Upstream's Status bodies for requests refused by authentication (401) and authorization (403),
//! with kube-apiserver's exact message formats (`responsewriters.Forbidden`, `apierrors.NewForbidden`).

use serde_json::{Map, Value, json};

use super::super::status::ApiError;
use super::attributes::Attributes;

/// 401 `Unauthorized`, as upstream answers an unknown or expired bearer token.
pub fn unauthorized() -> ApiError {
    ApiError {
        code: 401,
        reason: "Unauthorized",
        message: "Unauthorized".into(),
        details: None,
        metadata: Box::new(json!({})),
    }
}

/// 403 `Forbidden` for `user` asking `attrs`, with the authorizer's `reason` appended when there is
/// one: `pods "p" is forbidden: User "u" cannot get resource "pods" in API group "" in the namespace
/// "ns"`; details carry the group, the resource (as `kind`) and the name, each only when not empty.
pub fn forbidden(user: &str, attrs: &Attributes, reason: &str) -> ApiError {
    let mut why = if !attrs.resource_request {
        format!(
            "User \"{user}\" cannot {} path \"{}\"",
            attrs.verb, attrs.path
        )
    } else {
        let resource = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let scope = if attrs.namespace.is_empty() {
            "at the cluster scope".to_owned()
        } else {
            format!("in the namespace \"{}\"", attrs.namespace)
        };
        format!(
            "User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
            attrs.verb, attrs.api_group
        )
    };
    if !reason.is_empty() {
        why = format!("{why}: {reason}");
    }
    let (group, resource) = if attrs.resource_request {
        (attrs.api_group.as_str(), attrs.resource.as_str())
    } else {
        ("", "")
    };
    let qualified = match (group, resource) {
        (_, "") => String::new(),
        ("", r) => r.to_owned(),
        (g, r) => format!("{r}.{g}"),
    };
    let message = match (qualified.as_str(), attrs.name.as_str()) {
        ("", _) => format!("forbidden: {why}"),
        (q, "") => format!("{q} is forbidden: {why}"),
        (q, name) => format!("{q} \"{name}\" is forbidden: {why}"),
    };
    let mut details = Map::new();
    if !attrs.name.is_empty() && attrs.resource_request {
        details.insert("name".into(), json!(attrs.name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    if !resource.is_empty() {
        details.insert("kind".into(), json!(resource));
    }
    ApiError {
        code: 403,
        reason: "Forbidden",
        message,
        details: Some(Box::new(Value::Object(details))),
        metadata: Box::new(json!({})),
    }
}

/// 403 from an admission check (`admission.NewForbidden`): `<resource>[.group] ["name"] is
/// forbidden: <why>`, details as [`forbidden`]'s.
pub fn admission_forbidden(attrs: &Attributes, name: &str, why: &str) -> ApiError {
    let qualified = if attrs.api_group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.api_group)
    };
    let message = if name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} \"{name}\" is forbidden: {why}")
    };
    let mut details = Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !attrs.api_group.is_empty() {
        details.insert("group".into(), json!(attrs.api_group));
    }
    details.insert("kind".into(), json!(attrs.resource));
    ApiError {
        code: 403,
        reason: "Forbidden",
        message,
        details: Some(Box::new(Value::Object(details))),
        metadata: Box::new(json!({})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespaced_denial_names_user_verb_resource_group_and_namespace() {
        let attrs = Attributes {
            verb: "list".into(),
            resource_request: true,
            resource: "pods".into(),
            namespace: "ns".into(),
            ..Attributes::default()
        };
        let status = forbidden("system:serviceaccount:ns:bot", &attrs, "").status_json();
        assert_eq!(
            status,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "pods is forbidden: User \"system:serviceaccount:ns:bot\" cannot list resource \"pods\" in API group \"\" in the namespace \"ns\"",
                "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403})
        );
    }

    #[test]
    fn a_subresource_denial_names_the_object_and_the_combined_resource() {
        let attrs = Attributes {
            verb: "update".into(),
            resource_request: true,
            api_group: "apps".into(),
            resource: "deployments".into(),
            subresource: "status".into(),
            namespace: "ns".into(),
            name: "web".into(),
            ..Attributes::default()
        };
        let e = forbidden(
            "u",
            &attrs,
            "RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found",
        );
        assert_eq!(
            e.message,
            "deployments.apps \"web\" is forbidden: User \"u\" cannot update resource \"deployments/status\" in API group \"apps\" in the namespace \"ns\": RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found"
        );
        assert_eq!(
            e.status_json()["details"],
            json!({"name": "web", "group": "apps", "kind": "deployments"})
        );
    }

    #[test]
    fn a_non_resource_denial_names_the_path() {
        let attrs = Attributes {
            verb: "get".into(),
            path: "/version".into(),
            ..Attributes::default()
        };
        let status = forbidden("system:anonymous", &attrs, "").status_json();
        assert_eq!(
            status["message"],
            "forbidden: User \"system:anonymous\" cannot get path \"/version\""
        );
        assert_eq!(status["details"], json!({}));
    }
}
