//! Who a request comes from, as upstream's `user.Info`: a name, a uid and groups.

use serde::Serialize;

/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The group that bypasses authorization (upstream's privileged group).
pub const MASTERS: &str = "system:masters";

/// An authenticated (or anonymous) user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    /// The user name (`system:serviceaccount:<ns>:<name>` for a ServiceAccount).
    pub name: String,
    /// The uid (a ServiceAccount's uid; empty when unknown).
    pub uid: String,
    /// Groups, `system:authenticated` included for every authenticated user.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user from a token file line: its groups plus `system:authenticated`, as upstream adds it.
    pub fn authenticated(name: &str, uid: &str, groups: &[String]) -> Self {
        let mut groups = groups.to_vec();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        UserInfo {
            name: name.to_owned(),
            uid: uid.to_owned(),
            groups,
        }
    }

    /// The user of a ServiceAccount's token: `system:serviceaccount:<ns>:<name>` in
    /// `system:serviceaccounts`, `system:serviceaccounts:<ns>` and `system:authenticated`.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        UserInfo {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            uid: uid.to_owned(),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.to_owned(),
            ],
        }
    }

    /// An unauthenticated request when anonymous requests are authorized (RBAC mode).
    pub fn anonymous() -> Self {
        UserInfo {
            name: "system:anonymous".to_owned(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.to_owned()],
        }
    }

    /// The administrator: requests without a token when authorization is off, and the kubeconfig's
    /// token when it is on.
    pub fn admin() -> Self {
        UserInfo {
            name: "system:admin".to_owned(),
            uid: String::new(),
            groups: vec![MASTERS.to_owned(), AUTHENTICATED.to_owned()],
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}
