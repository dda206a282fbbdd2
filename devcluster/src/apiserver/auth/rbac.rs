//! Upstream's RBAC authorizer: a request is allowed when a rule of a role bound to its user allows
//! it — ClusterRoleBindings first, then the RoleBindings of the request's namespace — matching verbs,
//! API groups, resources (`*`, `*/<subresource>`), resourceNames and nonResourceURLs (`/prefix*`) as
//! `k8s.io/kubernetes/pkg/apis/rbac/v1` does. Members of `system:masters` bypass it.
//!
//! Unlike upstream, which stops at the first rule that allows, every binding is visited so the
//! decision names each rule that would have allowed the request (see `decisions`).

use std::collections::HashMap;

use serde_json::Value;

use super::super::state::ApiState;
use super::super::status::ApiError;
use super::attributes::Attributes;
use super::decisions::RuleRef;
use super::user::{MASTERS, UserInfo};

/// The outcome of authorizing one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Every rule that allows it (empty for a `system:masters` bypass and for a denial).
    pub rules: Vec<RuleRef>,
    /// For a denial, upstream's reason (`RBAC: clusterrole.rbac.authorization.k8s.io "x" not
    /// found` when a binding names a missing role), else empty.
    pub reason: String,
}

/// Authorizes `attrs` from `user` against the stored RBAC objects.
///
/// # Errors
/// etcd failures (500).
pub async fn authorize(
    st: &ApiState,
    user: &UserInfo,
    attrs: &Attributes,
) -> Result<Verdict, ApiError> {
    if user.in_group(MASTERS) {
        return Ok(Verdict {
            allowed: true,
            rules: Vec::new(),
            reason: String::new(),
        });
    }
    let read = |prefix: String| async move {
        st.storage
            .list(&prefix, None, None)
            .await
            .map(|page| page.items.into_iter().map(|s| s.value).collect::<Vec<_>>())
            .map_err(|e| ApiError::internal(e.to_string()))
    };
    let cluster_roles = by_name(read("/registry/clusterroles/".into()).await?);
    let mut bindings = read("/registry/clusterrolebindings/".into()).await?;
    let mut roles = HashMap::new();
    if !attrs.namespace.is_empty() {
        let ns = &attrs.namespace;
        bindings.extend(read(format!("/registry/rolebindings/{ns}/")).await?);
        roles = by_name(read(format!("/registry/roles/{ns}/")).await?);
    }
    Ok(evaluate(user, attrs, &bindings, &cluster_roles, &roles))
}

/// What upstream's rule resolver (`RulesFor`) finds for a user in a namespace: every rule bound to
/// them, and why some bindings gave none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoundRules {
    /// The rules of every role bound to the user (ClusterRoleBindings, then the namespace's
    /// RoleBindings), as stored.
    pub rules: Vec<Value>,
    /// For each binding whose role could not be read, upstream's error
    /// (`roles.rbac.authorization.k8s.io "x" not found`).
    pub errors: Vec<String>,
}

/// Every rule bound to `user` in `namespace` ("" for the cluster scope: ClusterRoleBindings only).
///
/// # Errors
/// etcd failures (500).
pub async fn rules_for(
    st: &ApiState,
    user: &UserInfo,
    namespace: &str,
) -> Result<BoundRules, ApiError> {
    let read = |prefix: String| async move {
        st.storage
            .list(&prefix, None, None)
            .await
            .map(|page| page.items.into_iter().map(|s| s.value).collect::<Vec<_>>())
            .map_err(|e| ApiError::internal(e.to_string()))
    };
    let cluster_roles = by_name(read("/registry/clusterroles/".into()).await?);
    let mut bindings = read("/registry/clusterrolebindings/".into()).await?;
    let mut roles = HashMap::new();
    if !namespace.is_empty() {
        bindings.extend(read(format!("/registry/rolebindings/{namespace}/")).await?);
        roles = by_name(read(format!("/registry/roles/{namespace}/")).await?);
    }
    let mut bound = BoundRules::default();
    for binding in &bindings {
        let binding_ns = binding["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let subjects = binding["subjects"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !subjects.iter().any(|s| applies_to(s, user, binding_ns)) {
            continue;
        }
        match referenced_rules(&binding["roleRef"], binding_ns, &cluster_roles, &roles) {
            Ok(rules) => bound.rules.extend(rules),
            Err(e) => bound.errors.push(e),
        }
    }
    Ok(bound)
}

/// The rules of the role a binding in `namespace` ("" for a ClusterRoleBinding) refers to (upstream's
/// `GetRoleReferenceRules`), or upstream's error when there is no such role.
///
/// # Errors
/// etcd failures (500).
pub async fn role_reference_rules(
    st: &ApiState,
    role_ref: &Value,
    namespace: &str,
) -> Result<Result<Vec<Value>, String>, ApiError> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    let key = match role_ref["kind"].as_str().unwrap_or_default() {
        "ClusterRole" => format!("/registry/clusterroles/{name}"),
        "Role" => format!("/registry/roles/{namespace}/{name}"),
        _ => String::new(),
    };
    let mut found = HashMap::new();
    if !key.is_empty()
        && let Some(role) = st
            .storage
            .get(&key)
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
    {
        found.insert(name.to_owned(), role.value);
    }
    Ok(referenced_rules(role_ref, namespace, &found, &found))
}

/// The rules of the role `role_ref` names, looked up in `cluster_roles` or the namespace's `roles`.
/// Errors read like upstream's registry errors (plural resource), not its authorizer's.
fn referenced_rules(
    role_ref: &Value,
    namespace: &str,
    cluster_roles: &HashMap<String, Value>,
    roles: &HashMap<String, Value>,
) -> Result<Vec<Value>, String> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    let (role, resource) = match role_ref["kind"].as_str().unwrap_or_default() {
        "ClusterRole" => (cluster_roles.get(name), "clusterroles"),
        "Role" if !namespace.is_empty() => (roles.get(name), "roles"),
        "Role" => (None, "roles"),
        other => return Err(format!("unsupported role reference kind: \"{other}\"")),
    };
    match role {
        Some(role) => Ok(role["rules"].as_array().cloned().unwrap_or_default()),
        None => Err(format!(
            "{resource}.rbac.authorization.k8s.io \"{name}\" not found"
        )),
    }
}

fn by_name(objects: Vec<Value>) -> HashMap<String, Value> {
    objects
        .into_iter()
        .map(|o| {
            (
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                o,
            )
        })
        .collect()
}

/// The verdict of `bindings` (ClusterRoleBindings, then RoleBindings of the request's namespace)
/// over `cluster_roles` and the namespace's `roles`.
fn evaluate(
    user: &UserInfo,
    attrs: &Attributes,
    bindings: &[Value],
    cluster_roles: &HashMap<String, Value>,
    roles: &HashMap<String, Value>,
) -> Verdict {
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    for binding in bindings {
        let binding_ns = binding["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let subjects = binding["subjects"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !subjects.iter().any(|s| applies_to(s, user, binding_ns)) {
            continue;
        }
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let (role, singular) = match role_kind {
            "ClusterRole" => (cluster_roles.get(role_name), "clusterrole"),
            "Role" if !binding_ns.is_empty() => (roles.get(role_name), "role"),
            _ => continue,
        };
        let Some(role) = role else {
            errors.push(format!(
                "{singular}.rbac.authorization.k8s.io \"{role_name}\" not found"
            ));
            continue;
        };
        let binding_name = binding["metadata"]["name"].as_str().unwrap_or_default();
        let policy = role["rules"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (index, rule) in policy.iter().enumerate() {
            if rule_allows(attrs, rule) {
                rules.push(RuleRef {
                    binding_kind: binding["kind"].as_str().unwrap_or_default().to_owned(),
                    binding_namespace: binding_ns.to_owned(),
                    binding: binding_name.to_owned(),
                    role_kind: role_kind.to_owned(),
                    role: role_name.to_owned(),
                    index,
                    rule: rule.clone(),
                });
            }
        }
    }
    let allowed = !rules.is_empty();
    let reason = match errors.len() {
        _ if allowed => String::new(),
        0 => String::new(),
        1 => format!("RBAC: {}", errors[0]),
        _ => format!("RBAC: [{}]", errors.join(", ")),
    };
    Verdict {
        allowed,
        rules,
        reason,
    }
}

/// Whether a binding's `subject` names `user`; a ServiceAccount subject without a namespace means
/// the binding's own namespace (none for a ClusterRoleBinding).
fn applies_to(subject: &Value, user: &UserInfo, binding_ns: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str().unwrap_or_default() {
        "User" => user.name == name,
        "Group" => user.in_group(name),
        "ServiceAccount" => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(binding_ns);
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

fn strings(rule: &Value, field: &str) -> Vec<String> {
    rule[field]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether one PolicyRule allows the request (upstream's `RuleAllows`).
pub fn rule_allows(attrs: &Attributes, rule: &Value) -> bool {
    let verbs = strings(rule, "verbs");
    if !verbs.iter().any(|v| v == "*" || *v == attrs.verb) {
        return false;
    }
    if !attrs.resource_request {
        return strings(rule, "nonResourceURLs").iter().any(|url| {
            url == "*"
                || *url == attrs.path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| attrs.path.starts_with(prefix))
        });
    }
    let combined = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let groups = strings(rule, "apiGroups");
    let resources = strings(rule, "resources");
    let names = strings(rule, "resourceNames");
    groups.iter().any(|g| g == "*" || *g == attrs.api_group)
        && resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!attrs.subresource.is_empty()
                    && r.strip_prefix("*/") == Some(attrs.subresource.as_str()))
        })
        && (names.is_empty() || names.contains(&attrs.name))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn attrs(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn wildcards_and_subresources_match_as_upstream() {
        let all = json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]});
        assert!(rule_allows(
            &attrs("get", "apps", "deployments", "status", "ns", "d"),
            &all
        ));
        assert!(!rule_allows(
            &attrs("list", "apps", "deployments", "", "ns", ""),
            &all
        ));
        let status = json!({"apiGroups": ["apps"], "resources": ["*/status"], "verbs": ["*"]});
        assert!(rule_allows(
            &attrs("update", "apps", "deployments", "status", "ns", "d"),
            &status
        ));
        assert!(!rule_allows(
            &attrs("update", "apps", "deployments", "", "ns", "d"),
            &status
        ));
        assert!(!rule_allows(
            &attrs("update", "apps", "deployments", "scale", "ns", "d"),
            &status
        ));
        let plain = json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["*"]});
        assert!(!rule_allows(
            &attrs("update", "apps", "deployments", "status", "ns", "d"),
            &plain
        ));
        assert!(!rule_allows(
            &attrs("update", "", "deployments", "", "ns", "d"),
            &plain
        ));
    }

    #[test]
    fn resource_names_restrict_a_rule_to_those_objects() {
        let rule = json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get", "list"]});
        assert!(rule_allows(
            &attrs("get", "", "configmaps", "", "ns", "a"),
            &rule
        ));
        assert!(!rule_allows(
            &attrs("get", "", "configmaps", "", "ns", "b"),
            &rule
        ));
        assert!(!rule_allows(
            &attrs("list", "", "configmaps", "", "ns", ""),
            &rule
        ));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_a_trailing_star() {
        let rule = json!({"nonResourceURLs": ["/api", "/apis/*"], "verbs": ["get"]});
        let path = |p: &str| Attributes {
            verb: "get".into(),
            path: p.into(),
            ..Attributes::default()
        };
        assert!(rule_allows(&path("/api"), &rule));
        assert!(rule_allows(&path("/apis/apps/v1"), &rule));
        assert!(!rule_allows(&path("/api/v1"), &rule));
        assert!(!rule_allows(&path("/version"), &rule));
    }

    #[test]
    fn a_role_binding_grants_only_in_its_namespace_and_names_a_missing_role() {
        let sa = UserInfo::service_account("ns", "bot", "u1");
        let binding = json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "ns"},
            "roleRef": {"kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "bot"}]});
        let role = json!({"metadata": {"name": "reader", "namespace": "ns"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
        let roles = HashMap::from([("reader".to_owned(), role)]);
        let verdict = evaluate(
            &sa,
            &attrs("get", "", "pods", "", "ns", "p"),
            std::slice::from_ref(&binding),
            &HashMap::new(),
            &roles,
        );
        assert!(verdict.allowed);
        assert_eq!(verdict.rules[0].index, 0);
        let denied = evaluate(
            &sa,
            &attrs("get", "", "pods", "", "ns", "p"),
            &[binding],
            &HashMap::new(),
            &HashMap::new(),
        );
        assert!(!denied.allowed);
        assert_eq!(
            denied.reason,
            "RBAC: role.rbac.authorization.k8s.io \"reader\" not found"
        );
    }
}
