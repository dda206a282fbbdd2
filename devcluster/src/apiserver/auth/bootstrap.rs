//! The default RBAC policy kube-apiserver creates at start (`plugin/pkg/auth/authorizer/rbac/
//! bootstrappolicy`), the part devcluster needs: `cluster-admin` for `system:masters`,
//! `system:discovery` and `system:basic-user` for every authenticated user, and
//! `system:public-info-viewer` for everyone. Created when missing, never overwritten.

use serde_json::{Value, json};

use super::super::objects::{self, Target};
use super::super::query::Query;
use super::super::state::ApiState;
use super::super::status::ApiError;
use super::user::{AUTHENTICATED, MASTERS, UNAUTHENTICATED};

/// The paths `system:discovery` grants.
const DISCOVERY_URLS: &[&str] = &[
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/openapi",
    "/openapi/*",
    "/readyz",
    "/version",
    "/version/",
];
/// The paths `system:public-info-viewer` grants.
const PUBLIC_INFO_URLS: &[&str] = &["/healthz", "/livez", "/readyz", "/version", "/version/"];

fn metadata(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": metadata(name), "rules": rules})
}

fn binding(name: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": metadata(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": subjects})
}

/// The bootstrap ClusterRoles and their ClusterRoleBindings, as upstream names and fills them.
fn policy() -> (Vec<Value>, Vec<Value>) {
    let roles = vec![
        cluster_role(
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]),
        ),
        cluster_role(
            "system:discovery",
            json!([{"nonResourceURLs": DISCOVERY_URLS, "verbs": ["get"]}]),
        ),
        cluster_role(
            "system:public-info-viewer",
            json!([{"nonResourceURLs": PUBLIC_INFO_URLS, "verbs": ["get"]}]),
        ),
        cluster_role(
            "system:basic-user",
            json!([
                {"apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                 "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"],
                 "verbs": ["create"]},
            ]),
        ),
    ];
    let bindings = vec![
        binding("cluster-admin", &[MASTERS]),
        binding("system:discovery", &[AUTHENTICATED]),
        binding(
            "system:public-info-viewer",
            &[AUTHENTICATED, UNAUTHENTICATED],
        ),
        binding("system:basic-user", &[AUTHENTICATED]),
    ];
    (roles, bindings)
}

/// Creates the bootstrap ClusterRoles and ClusterRoleBindings that do not exist yet.
///
/// # Errors
/// etcd failures.
pub async fn bootstrap_policy(st: &ApiState) -> Result<(), ApiError> {
    let (roles, bindings) = policy();
    for (resource, objects) in [("clusterroles", roles), ("clusterrolebindings", bindings)] {
        let Some(info) = st
            .registry
            .lookup("rbac.authorization.k8s.io", "v1", resource)
        else {
            continue;
        };
        for object in objects {
            let t = Target::new(
                info.clone(),
                None,
                None,
                Query::default(),
                "kube-apiserver".into(),
            );
            let body = serde_json::to_vec(&object).unwrap_or_default();
            match objects::create(st, &t, &body).await {
                Ok(_) => {}
                Err(e) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bootstrap_binding_names_a_bootstrap_role() {
        let (roles, bindings) = policy();
        for b in &bindings {
            assert!(
                roles
                    .iter()
                    .any(|r| r["metadata"]["name"] == b["roleRef"]["name"]),
                "{b}"
            );
        }
    }
}
