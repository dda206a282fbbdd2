//! The hook in devcluster's request path: authenticates a request, serves the TokenRequest API
//! and the self-review APIs, authorizes the request (RBAC mode), runs the ownerReferences admission
//! check, and records each decision.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::super::http::MAX_BODY;
use super::super::protobuf;
use super::super::query::Query;
use super::super::state::ApiState;
use super::super::status::ApiError;
use super::attributes::Attributes;
use super::decisions::{Decision, DecisionLog};
use super::owner_references::admit_owner_references;
use super::rbac::{Verdict, authorize};
use super::responses::{forbidden, unauthorized};
use super::self_review::{SelfReview, self_review};
use super::token_file::parse_token_file;
use super::token_request::token_request;
use super::tokens::{Authenticated, Tokens};
use super::user::UserInfo;
use super::{AuthConfig, AuthError, AuthorizationMode};

/// A server's authentication and authorization state.
#[derive(Debug)]
pub struct Auth {
    mode: AuthorizationMode,
    tokens: Tokens,
    decisions: DecisionLog,
}

/// What the gate made of a request.
pub enum Admitted {
    /// Serve it (its body buffered when the gate had to read it).
    Request(Request),
    /// The gate answered it (TokenRequest, SelfSubjectAccessReview, SelfSubjectReview).
    Answered(Response),
}

impl Auth {
    /// The state for `config`: reads the token file and, in RBAC mode, makes the admin token.
    ///
    /// # Errors
    /// The token file cannot be read or parsed.
    pub fn new(config: &AuthConfig) -> Result<Self, AuthError> {
        let static_tokens = match &config.token_auth_file {
            Some(path) => parse_token_file(path)?,
            None => Vec::new(),
        };
        Ok(Auth {
            mode: config.authorization_mode,
            tokens: Tokens::new(config.authorization_mode, static_tokens),
            decisions: DecisionLog::default(),
        })
    }

    /// How requests are authorized.
    pub fn mode(&self) -> AuthorizationMode {
        self.mode
    }

    /// The admin token for the kubeconfig devcluster writes (RBAC mode only).
    pub fn admin_token(&self) -> Option<&str> {
        self.tokens.admin_token()
    }

    /// Every authorization decision recorded so far (RBAC mode only), oldest first.
    pub fn decisions(&self) -> Vec<Decision> {
        self.decisions.snapshot()
    }

    /// Authorizes `attrs` for `user` and records the decision; everything is allowed (and nothing
    /// recorded) unless in RBAC mode.
    ///
    /// # Errors
    /// etcd failures.
    pub async fn check(
        &self,
        st: &ApiState,
        user: &UserInfo,
        attrs: &Attributes,
    ) -> Result<Verdict, ApiError> {
        if self.mode != AuthorizationMode::Rbac {
            return Ok(Verdict {
                allowed: true,
                rules: Vec::new(),
                reason: String::new(),
            });
        }
        let verdict = authorize(st, user, attrs).await?;
        self.decisions.record(Decision {
            user: user.name.clone(),
            groups: user.groups.clone(),
            attributes: attrs.clone(),
            allowed: verdict.allowed,
            rules: verdict.rules.clone(),
            reason: verdict.reason.clone(),
        });
        Ok(verdict)
    }

    /// Lets `req` through, answers it, or refuses it: 401 for an unknown bearer token, 403 when RBAC
    /// or the ownerReferences check denies it.
    ///
    /// # Errors
    /// The refusal to send, as a Status.
    pub async fn admit(&self, st: &ApiState, mut req: Request) -> Result<Admitted, ApiError> {
        let user = match self.tokens.authenticate(st, req.headers()).await {
            Authenticated::User(user) => user,
            Authenticated::Unauthorized => return Err(unauthorized()),
        };
        // The storage layer needs the user too: RBAC objects are checked for escalation there.
        req.extensions_mut().insert(user.clone());
        let query = Query::parse(req.uri().query());
        let attrs = Attributes::of(req.method(), req.uri().path(), &query);
        let verdict = self.check(st, &user, &attrs).await?;
        if !verdict.allowed {
            return Err(forbidden(&user.name, &attrs, &verdict.reason));
        }
        let is_token_request = attrs.resource_request
            && req.method() == Method::POST
            && attrs.api_group.is_empty()
            && attrs.resource == "serviceaccounts"
            && attrs.subresource == "token"
            && !attrs.namespace.is_empty();
        let checks_owners = self.mode == AuthorizationMode::Rbac
            && attrs.resource_request
            && attrs.subresource.is_empty()
            && matches!(attrs.verb.as_str(), "create" | "update" | "patch");
        let review = SelfReview::of(&attrs);
        if !is_token_request && !checks_owners && review.is_none() {
            return Ok(Admitted::Request(req));
        }
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_BODY)
            .await
            .map_err(|_| ApiError::too_large(MAX_BODY))?;
        // kubectl sends these bodies as protobuf: decode them into the JSON they stand for.
        let protobuf_kind = if is_token_request {
            Some(("authentication.k8s.io/v1", "TokenRequest"))
        } else if review == Some(SelfReview::Access) {
            Some(("authorization.k8s.io/v1", "SelfSubjectAccessReview"))
        } else {
            None
        };
        let is_protobuf = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim() == protobuf::MEDIA_TYPE);
        let bytes = match protobuf_kind {
            Some((api_version, kind)) if is_protobuf => {
                protobuf::to_json(&bytes, api_version, kind)
                    .map_err(|e| {
                        ApiError::bad_request(format!(
                            "the object provided is unrecognized (must be of type {kind}): {e}"
                        ))
                    })?
                    .into()
            }
            _ => bytes,
        };
        let answer = if is_token_request {
            Some(token_request(st, &self.tokens, &attrs.namespace, &attrs.name, &bytes).await?)
        } else if let Some(review) = review {
            Some(self_review(st, self.mode, &user, review, &bytes).await?)
        } else {
            None
        };
        if let Some(v) = answer {
            let mut r = (
                StatusCode::CREATED,
                serde_json::to_vec(&v).unwrap_or_default(),
            )
                .into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r.headers_mut().insert(
                header::CACHE_CONTROL,
                http::HeaderValue::from_static("no-cache, private"),
            );
            return Ok(Admitted::Answered(r));
        }
        admit_owner_references(st, self, &user, &attrs, &bytes).await?;
        Ok(Admitted::Request(Request::from_parts(
            parts,
            Body::from(bytes),
        )))
    }
}
