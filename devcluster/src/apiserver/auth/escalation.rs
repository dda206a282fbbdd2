//! Upstream's RBAC escalation prevention (`pkg/registry/rbac/*/policybased`): in RBAC mode a user
//! may write a Role or ClusterRole only if she already holds every permission it grants (or may
//! `escalate` roles), and a RoleBinding or ClusterRoleBinding only if she holds every permission of
//! the role it refers to (or may `bind` that role). Without this, `create` on roles and rolebindings
//! would be as good as cluster-admin.
//!
//! The check runs in the storage pipeline, on the object as it will be stored (a patch already
//! applied), before validation — where upstream runs it — so it sees what a patch really grants.
//! Members of `system:masters` and devcluster's own writes (no user) are not checked; an update that
//! only changes ownerReferences or finalizers is not checked (the garbage collector must be able to
//! make it). A ClusterRole's `aggregationRule` needs full authority, as upstream.

use serde_json::Value;

use super::super::objects::Target;
use super::super::state::ApiState;
use super::super::status::ApiError;
use super::AuthorizationMode;
use super::attributes::Attributes;
use super::policy_rules::{Rule, compact, go_quote, go_quote_list, uncovered};
use super::rbac::{role_reference_rules, rules_for};
use super::user::{MASTERS, UserInfo};

/// The API group of the objects this check guards.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Refuses a write of an RBAC object that would grant `t.user` more than she holds. `old` is the
/// stored object on an update, None on a create.
///
/// # Errors
/// 403 Forbidden with upstream's message when the write escalates; 500 on etcd failures.
pub async fn admit_rbac_write(
    st: &ApiState,
    t: &Target,
    old: Option<&Value>,
    new: &Value,
) -> Result<(), ApiError> {
    let info = &t.info;
    if st.auth.mode() != AuthorizationMode::Rbac || info.group != RBAC_GROUP {
        return Ok(());
    }
    let Some(user) = t.user.as_ref().filter(|u| !u.in_group(MASTERS)) else {
        return Ok(());
    };
    if old.is_some_and(|old| only_gc_fields_change(old, new)) {
        return Ok(());
    }
    let namespace = t.namespace.as_deref().unwrap_or_default();
    let name = new["metadata"]["name"].as_str().unwrap_or_default();
    let deny = |why: &str| forbidden(&info.resource, name, why);
    match info.resource.as_str() {
        "roles" | "clusterroles" => {
            let escalate = Attributes {
                verb: "escalate".into(),
                resource_request: true,
                api_group: RBAC_GROUP.into(),
                api_version: "*".into(),
                resource: info.resource.clone(),
                namespace: namespace.to_owned(),
                // The request's name, as upstream's RequestInfo has it: none on a create.
                name: t.name.clone().unwrap_or_default(),
                ..Attributes::default()
            };
            if st.auth.check(st, user, &escalate).await?.allowed {
                return Ok(());
            }
            if let Some(why) = missing(st, user, namespace, &Rule::list(&new["rules"])).await? {
                return Err(deny(&why));
            }
            let aggregates = |v: &Value| {
                v["aggregationRule"]["clusterRoleSelectors"]
                    .as_array()
                    .is_some_and(|s| !s.is_empty())
            };
            if aggregates(new) || old.is_some_and(aggregates) {
                let full = [
                    Rule {
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        verbs: vec!["*".into()],
                        ..Rule::default()
                    },
                    Rule {
                        non_resource_urls: vec!["*".into()],
                        verbs: vec!["*".into()],
                        ..Rule::default()
                    },
                ];
                if missing(st, user, namespace, &full).await?.is_some() {
                    return Err(deny(
                        "must have cluster-admin privileges to use the aggregationRule",
                    ));
                }
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = &new["roleRef"];
            let role_resource = match role_ref["kind"].as_str() {
                Some("ClusterRole") => Some("clusterroles"),
                Some("Role") => Some("roles"),
                _ => None,
            };
            if let Some(resource) = role_resource {
                let bind = Attributes {
                    verb: "bind".into(),
                    resource_request: true,
                    api_group: role_ref["apiGroup"].as_str().unwrap_or_default().into(),
                    resource: resource.into(),
                    namespace: namespace.to_owned(),
                    name: role_ref["name"].as_str().unwrap_or_default().into(),
                    ..Attributes::default()
                };
                if st.auth.check(st, user, &bind).await?.allowed {
                    return Ok(());
                }
            }
            let rules = match role_reference_rules(st, role_ref, namespace).await? {
                Ok(rules) => rules,
                Err(why) => return Err(deny(&why)),
            };
            let wanted: Vec<Rule> = rules.iter().map(Rule::from_json).collect();
            match missing(st, user, namespace, &wanted).await? {
                Some(why) => Err(deny(&why)),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// Upstream's `ConfirmNoEscalation`: None when the rules bound to `user` in `namespace` cover
/// `wanted`, else the message naming what she does not hold.
async fn missing(
    st: &ApiState,
    user: &UserInfo,
    namespace: &str,
    wanted: &[Rule],
) -> Result<Option<String>, ApiError> {
    let bound = rules_for(st, user, namespace).await?;
    let held: Vec<Rule> = bound.rules.iter().map(Rule::from_json).collect();
    let gaps = uncovered(&held, wanted);
    if gaps.is_empty() {
        return Ok(None);
    }
    let mut described: Vec<String> = compact(gaps).iter().map(Rule::compact_string).collect();
    described.sort();
    described.dedup();
    let mut why = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        go_quote_list(&user.groups),
        described.join("\n")
    );
    if !bound.errors.is_empty() {
        // Go prints `[]error{aggregate}`: the aggregate alone when it holds one error.
        let aggregate = match bound.errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        why.push_str(&format!("; resolution errors: [{aggregate}]"));
    }
    Ok(Some(why))
}

/// Upstream's `IsOnlyMutatingGCFields`: whether `new` differs from `old` only in ownerReferences,
/// finalizers or the deletion timestamp (and in what devcluster itself maintains: resourceVersion,
/// managedFields).
fn only_gc_fields_change(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "ownerReferences",
                "finalizers",
                "deletionTimestamp",
                "selfLink",
                "resourceVersion",
                "managedFields",
            ] {
                meta.remove(k);
            }
        }
        v
    };
    strip(old) == strip(new)
}

/// 403 as `apierrors.NewForbidden(rbac.Resource(resource), name, err)` words it.
fn forbidden(resource: &str, name: &str, why: &str) -> ApiError {
    let gr = super::super::status::Gr {
        group: RBAC_GROUP,
        resource,
    };
    let mut e = ApiError::forbidden(gr, name, why, Vec::new());
    if name.is_empty() {
        // A generateName create has no name yet: upstream then leaves out the quoted name.
        e.message = format!("{resource}.{RBAC_GROUP} is forbidden: {why}");
    }
    e
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn changing_only_owner_references_or_finalizers_is_a_gc_update() {
        let old = json!({"metadata": {"name": "r", "resourceVersion": "1"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!(["example.com/f"]);
        new["metadata"]["ownerReferences"] = json!([{"uid": "u"}]);
        new["metadata"]["resourceVersion"] = json!("2");
        assert!(only_gc_fields_change(&old, &new));
        new["rules"][0]["verbs"] = json!(["*"]);
        assert!(!only_gc_fields_change(&old, &new));
    }

    #[test]
    fn a_nameless_refusal_leaves_the_name_out_like_upstream() {
        assert_eq!(
            forbidden("roles", "", "no").message,
            "roles.rbac.authorization.k8s.io is forbidden: no"
        );
        assert_eq!(
            forbidden("roles", "r", "no").message,
            "roles.rbac.authorization.k8s.io \"r\" is forbidden: no"
        );
    }
}
