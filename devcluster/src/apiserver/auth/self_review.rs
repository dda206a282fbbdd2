//! The self-review APIs kubectl calls: `SelfSubjectAccessReview` (`POST
//! /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`, `kubectl auth can-i`), which asks the
//! authorizer about the caller, and `SelfSubjectReview` (`POST
//! /apis/authentication.k8s.io/v1/selfsubjectreviews`, `kubectl auth whoami`), which says who the
//! caller is. Neither is stored; both answer 201 with the request and its `status`, as upstream.

use serde_json::{Value, json};

use super::super::state::ApiState;
use super::super::status::{ApiError, Cause};
use super::AuthorizationMode;
use super::attributes::Attributes;
use super::decisions::RuleRef;
use super::rbac::authorize;
use super::user::UserInfo;

/// Which self-review a request is, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelfReview {
    /// `authorization.k8s.io/v1` `selfsubjectaccessreviews`.
    Access,
    /// `authentication.k8s.io/v1` `selfsubjectreviews`.
    Subject,
}

impl SelfReview {
    /// The self-review `attrs` (of a POST) create, if any.
    pub fn of(attrs: &Attributes) -> Option<SelfReview> {
        if !attrs.resource_request || attrs.verb != "create" || !attrs.subresource.is_empty() {
            return None;
        }
        match (
            attrs.api_group.as_str(),
            attrs.api_version.as_str(),
            attrs.resource.as_str(),
        ) {
            ("authorization.k8s.io", "v1", "selfsubjectaccessreviews") => Some(SelfReview::Access),
            ("authentication.k8s.io", "v1", "selfsubjectreviews") => Some(SelfReview::Subject),
            _ => None,
        }
    }
}

/// Answers a self-review `body` (JSON) from `user`: the body with its `status` filled in (a
/// SelfSubjectReview's body is not read: it has nothing to ask).
///
/// # Errors
/// 400 for a body that is not JSON, 422 for an access review that names neither or both of
/// `resourceAttributes` and `nonResourceAttributes`, 500 on etcd failures.
pub async fn self_review(
    st: &ApiState,
    mode: AuthorizationMode,
    user: &UserInfo,
    review: SelfReview,
    body: &[u8],
) -> Result<Value, ApiError> {
    // A SelfSubjectReview asks nothing (kubectl sends it as protobuf, which is not decoded): its
    // answer depends only on the caller.
    let mut request: Value = if body.is_empty() || review == SelfReview::Subject {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    if !request.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    let status = match review {
        SelfReview::Subject => {
            request["kind"] = json!("SelfSubjectReview");
            request["apiVersion"] = json!("authentication.k8s.io/v1");
            json!({"userInfo": user_info(user)})
        }
        SelfReview::Access => {
            request["kind"] = json!("SelfSubjectAccessReview");
            request["apiVersion"] = json!("authorization.k8s.io/v1");
            let attrs = access_attributes(&request["spec"])?;
            if mode == AuthorizationMode::Rbac {
                let verdict = authorize(st, user, &attrs).await?;
                access_status(verdict.allowed, verdict.rules.first(), &verdict.reason)
            } else {
                json!({"allowed": true})
            }
        }
    };
    if !request["metadata"].is_object() {
        request["metadata"] = json!({});
    }
    request["metadata"]["creationTimestamp"] = Value::Null;
    request["status"] = status;
    Ok(request)
}

/// `status.userInfo` of a SelfSubjectReview: upstream's `UserInfo`, `uid` omitted when empty.
fn user_info(user: &UserInfo) -> Value {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    info
}

/// The attributes a `SelfSubjectAccessReviewSpec` asks about, as upstream's
/// `ResourceAttributesFrom` / `NonResourceAttributesFrom` make them.
fn access_attributes(spec: &Value) -> Result<Attributes, ApiError> {
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let field = |v: &Value, name: &str| v[name].as_str().unwrap_or_default().to_owned();
    match (resource, non_resource) {
        (Some(r), None) => Ok(Attributes {
            verb: field(r, "verb"),
            resource_request: true,
            api_group: field(r, "group"),
            api_version: field(r, "version"),
            resource: field(r, "resource"),
            subresource: field(r, "subresource"),
            namespace: field(r, "namespace"),
            name: field(r, "name"),
            path: String::new(),
        }),
        (None, Some(n)) => Ok(Attributes {
            verb: field(n, "verb"),
            path: field(n, "path"),
            ..Attributes::default()
        }),
        (r, _) => {
            let value = r.cloned().unwrap_or(Value::Null);
            Err(ApiError::invalid(
                "authorization.k8s.io",
                "SelfSubjectAccessReview",
                "",
                vec![Cause::invalid(
                    "spec.resourceAttributes",
                    &value,
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )],
            ))
        }
    }
}

/// `status` of an access review: `allowed`, and a reason naming the binding and role that allowed
/// it (upstream's `RBAC: allowed by …`, without its `to <subject>` tail) or why it was denied.
fn access_status(allowed: bool, rule: Option<&RuleRef>, reason: &str) -> Value {
    let mut status = json!({"allowed": allowed});
    let reason = match rule {
        Some(rule) if allowed => {
            let binding = if rule.binding_namespace.is_empty() {
                rule.binding.clone()
            } else {
                format!("{}/{}", rule.binding, rule.binding_namespace)
            };
            format!(
                "RBAC: allowed by {} {binding:?} of {} {:?}",
                rule.binding_kind, rule.role_kind, rule.role
            )
        }
        _ => reason.to_owned(),
    };
    if !reason.is_empty() {
        status["reason"] = json!(reason);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: &str, path: &str) -> Attributes {
        let method = method.parse().unwrap();
        Attributes::of(
            &method,
            path,
            &super::super::super::query::Query::parse(None),
        )
    }

    #[test]
    fn only_creates_of_the_two_v1_review_resources_are_self_reviews() {
        let access = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
        let subject = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
        assert_eq!(
            SelfReview::of(&attrs("POST", access)),
            Some(SelfReview::Access)
        );
        assert_eq!(
            SelfReview::of(&attrs("POST", subject)),
            Some(SelfReview::Subject)
        );
        assert_eq!(SelfReview::of(&attrs("GET", access)), None);
        assert_eq!(
            SelfReview::of(&attrs(
                "POST",
                "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews"
            )),
            None
        );
    }

    #[test]
    fn an_access_review_asks_about_exactly_one_kind_of_attributes() {
        let spec = json!({"resourceAttributes": {"namespace": "ns", "verb": "get",
            "resource": "pods", "group": "", "name": "p"}});
        let a = access_attributes(&spec).unwrap();
        assert!(a.resource_request);
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.namespace.as_str()),
            ("get", "pods", "ns")
        );
        let spec = json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}});
        let a = access_attributes(&spec).unwrap();
        assert!(!a.resource_request);
        assert_eq!(a.path, "/healthz");
        assert!(access_attributes(&json!({})).is_err());
        let both = json!({"resourceAttributes": {}, "nonResourceAttributes": {}});
        assert!(access_attributes(&both).is_err());
    }

    #[test]
    fn an_allowed_review_names_the_binding_and_role_that_allowed_it() {
        let rule = RuleRef {
            binding_kind: "RoleBinding".into(),
            binding_namespace: "ns".into(),
            binding: "bot".into(),
            role_kind: "Role".into(),
            role: "reader".into(),
            index: 0,
            rule: json!({}),
        };
        assert_eq!(
            access_status(true, Some(&rule), ""),
            json!({"allowed": true,
                "reason": "RBAC: allowed by RoleBinding \"bot/ns\" of Role \"reader\""})
        );
        assert_eq!(access_status(false, None, ""), json!({"allowed": false}));
        assert_eq!(access_status(true, None, ""), json!({"allowed": true}));
    }

    #[test]
    fn a_subject_review_omits_an_empty_uid() {
        let admin = UserInfo::admin();
        assert_eq!(
            user_info(&admin),
            json!({"username": "system:admin",
                "groups": ["system:masters", "system:authenticated"]})
        );
    }
}
