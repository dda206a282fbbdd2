//! The bearer tokens devcluster knows — the static token file's, the ServiceAccount tokens it issued
//! through the TokenRequest API, the kubeconfig's admin token — and authentication of a request.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use base64::Engine;
use parking_lot::Mutex;
use rand::RngCore;

use super::super::state::ApiState;
use super::AuthorizationMode;
use super::token_file::StaticToken;
use super::user::UserInfo;

/// A ServiceAccount token devcluster issued.
#[derive(Debug, Clone)]
struct Issued {
    namespace: String,
    name: String,
    /// The ServiceAccount's uid when the token was issued: a recreated account does not inherit it.
    uid: String,
    expires: SystemTime,
}

/// The outcome of authenticating a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authenticated {
    /// The request is from this user.
    User(UserInfo),
    /// A bearer token was sent that devcluster does not know (or that expired): 401.
    Unauthorized,
}

/// Every token devcluster accepts.
#[derive(Debug)]
pub struct Tokens {
    mode: AuthorizationMode,
    fixed: HashMap<String, UserInfo>,
    issued: Mutex<HashMap<String, Issued>>,
    admin: Option<String>,
}

impl Tokens {
    /// The tokens of a server in `mode` with the token file's `static_tokens`. In RBAC mode an admin
    /// token (user `system:admin` in `system:masters`) is made for the kubeconfig devcluster writes.
    pub fn new(mode: AuthorizationMode, static_tokens: Vec<StaticToken>) -> Self {
        let mut fixed: HashMap<String, UserInfo> = static_tokens
            .into_iter()
            .map(|t| (t.token, t.user))
            .collect();
        let admin = (mode == AuthorizationMode::Rbac).then(random_token);
        if let Some(token) = &admin {
            fixed.insert(token.clone(), UserInfo::admin());
        }
        Tokens {
            mode,
            fixed,
            issued: Mutex::default(),
            admin,
        }
    }

    /// The admin token for the kubeconfig (None when authorization is off: no token is needed).
    pub fn admin_token(&self) -> Option<&str> {
        self.admin.as_deref()
    }

    /// Issues a token for ServiceAccount `namespace/name` (uid `uid`) valid for `ttl`; returns it and
    /// its expiry.
    pub fn issue(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        ttl: Duration,
    ) -> (String, SystemTime) {
        let token = random_token();
        let expires = SystemTime::now() + ttl;
        let mut issued = self.issued.lock();
        let now = SystemTime::now();
        issued.retain(|_, t| t.expires > now);
        issued.insert(
            token.clone(),
            Issued {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                uid: uid.to_owned(),
                expires,
            },
        );
        (token, expires)
    }

    /// Who sent a request with `headers`: the owner of its bearer token; without one, the anonymous
    /// user in RBAC mode and the administrator otherwise. A ServiceAccount token authenticates only
    /// while it has not expired and its ServiceAccount exists with the uid it was issued for.
    pub async fn authenticate(&self, st: &ApiState, headers: &HeaderMap) -> Authenticated {
        let Some(token) = bearer(headers) else {
            return Authenticated::User(match self.mode {
                AuthorizationMode::Rbac => UserInfo::anonymous(),
                AuthorizationMode::AlwaysAllow => UserInfo::admin(),
            });
        };
        if let Some(user) = self.fixed.get(token) {
            return Authenticated::User(user.clone());
        }
        let issued = self.issued.lock().get(token).cloned();
        let Some(issued) = issued else {
            return Authenticated::Unauthorized;
        };
        if issued.expires <= SystemTime::now() {
            return Authenticated::Unauthorized;
        }
        let key = format!(
            "/registry/serviceaccounts/{}/{}",
            issued.namespace, issued.name
        );
        match st.storage.get(&key).await {
            Ok(Some(sa)) if sa.value["metadata"]["uid"] == issued.uid.as_str() => {
                Authenticated::User(UserInfo::service_account(
                    &issued.namespace,
                    &issued.name,
                    &issued.uid,
                ))
            }
            _ => Authenticated::Unauthorized,
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header; None without one (an empty token or
/// another scheme counts as none, as upstream's bearer authenticator ignores them).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// 32 random bytes, base64url: unguessable and safe in a header.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_scheme_with_a_token_counts() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert("authorization", "bearer  abc ".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert("authorization", "Bearer ".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }

    #[test]
    fn rbac_mode_makes_an_admin_token_and_always_allow_none() {
        assert!(
            Tokens::new(AuthorizationMode::Rbac, vec![])
                .admin_token()
                .is_some()
        );
        assert!(
            Tokens::new(AuthorizationMode::AlwaysAllow, vec![])
                .admin_token()
                .is_none()
        );
    }
}
