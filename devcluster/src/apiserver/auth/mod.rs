//! Authentication and authorization of devcluster's API requests, as kube-apiserver does them with
//! `--token-auth-file`, ServiceAccount tokens from the TokenRequest API and `--authorization-mode RBAC`.
//!
//! # Shape
//! * `user` — who a request comes from ([`UserInfo`]).
//! * `token_file` — the static token file (`token,user,uid,"group1,group2"`).
//! * `tokens` — the bearer tokens devcluster knows (static, issued ServiceAccount tokens, the
//!   kubeconfig's admin token) and authentication of a request.
//! * `token_request` — `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`.
//! * `self_review` — `SelfSubjectAccessReview` (`kubectl auth can-i`) and `SelfSubjectReview`
//!   (`kubectl auth whoami`), answered by the authorizer and the authenticator, never stored.
//! * `attributes` — an HTTP request as upstream's `RequestInfoFactory` sees it (verb, group, resource,
//!   subresource, namespace, name, or a non-resource path).
//! * `rbac` — upstream's RBAC authorizer over the stored Roles, ClusterRoles and bindings.
//! * `escalation` — upstream's RBAC escalation prevention: writing a role or binding that grants
//!   more than the writer holds needs `escalate` / `bind` (`policy_rules` compares the rules).
//! * `owner_references` — upstream's `OwnerReferencesPermissionEnforcement` admission, which is why a
//!   controller needs `update` on `<owners>/finalizers`.
//! * `bootstrap` — the default ClusterRoles and bindings upstream creates (`cluster-admin`,
//!   `system:discovery`, `system:public-info-viewer`, `system:basic-user`).
//! * `gate` — the hook in the request path: authenticate, TokenRequest, authorize, admit, record.
//! * `decisions` — the record of each authorization decision and every rule that allowed it, so tests
//!   can prove each rule of a role is needed.
//! * `responses` — upstream's 401 and 403 Status bodies.
//!
//! # Differences from upstream (on purpose)
//! * ServiceAccount tokens are opaque random strings devcluster remembers (in memory, so they end with
//!   the process), not signed JWTs; they expire after `expirationSeconds` and stop authenticating
//!   when their ServiceAccount is deleted or recreated, as bound tokens do. Audiences are recorded, not
//!   checked.
//! * The RBAC authorizer reads the Roles and bindings from etcd on every request instead of from
//!   informers, so a binding works from the moment its create returns (upstream takes a moment).
//! * Without `--authorization-mode RBAC`, requests without a token are today's admin path (user
//!   `system:admin` in `system:masters`), so the demo and every test keep working unchanged.
//! * `/flotilla/` routes are devcluster-only and not authorized.
//! * In RBAC mode the `OwnerReferencesPermissionEnforcement` admission check runs, which
//!   kube-apiserver runs only when `--enable-admission-plugins` names it (as hardened clusters do):
//!   a role that passes here passes there either way.
//! * Only JSON request bodies are looked into by that check (protobuf bodies pass it unchecked).
//! * A `SelfSubjectAccessReview`'s allowed reason names the binding and role (`RBAC: allowed by
//!   RoleBinding "b/ns" of Role "r"`) but not upstream's `to <subject>` tail; only the v1 review
//!   APIs are served, and neither is listed in discovery (kubectl calls them by path).
//!   `SubjectAccessReview` and `SelfSubjectRulesReview` are not served.

mod attributes;
mod bootstrap;
mod decisions;
mod escalation;
mod gate;
mod owner_references;
mod policy_rules;
mod rbac;
mod responses;
mod self_review;
mod token_file;
mod token_request;
mod tokens;
mod user;

use std::path::PathBuf;

pub use attributes::Attributes;
pub use bootstrap::bootstrap_policy;
pub use decisions::{Decision, RuleRef};
pub use escalation::admit_rbac_write;
pub use gate::{Admitted, Auth};
pub use user::UserInfo;

/// How requests are authorized (`--authorization-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Everything is allowed (today's devcluster, and the default so the demo needs no tokens).
    #[default]
    AlwaysAllow,
    /// Upstream's RBAC authorizer, behind the `system:masters` group's bypass.
    Rbac,
}

/// Authentication and authorization settings of a devcluster.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// How requests are authorized.
    pub authorization_mode: AuthorizationMode,
    /// A static token file in kube-apiserver's `--token-auth-file` CSV format.
    pub token_auth_file: Option<PathBuf>,
}

/// Failures of the authentication setup.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The token file could not be read.
    #[error("cannot read the token file {path}")]
    ReadTokenFile {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A line of the token file is malformed.
    #[error("token file {path}, line {line}: {reason}")]
    BadTokenLine {
        /// Path.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}
