//! The User-Agent of a Flotilla process's Kubernetes requests, in kube-controller-manager's shape
//! (`kube-controller-manager/<version> (<os>/<arch>) kubernetes/<commit>/<controller>`):
//! `flotilla/<version> (<os>/<arch>) <component>`, where the component is the role (`coordinator`) or a
//! worker's controller (`replicaset-controller`). The API server takes the part before the first `/`
//! as the field manager of what a request writes, so objects the fleet writes show `flotilla` in
//! `managedFields` (without a User-Agent they would show `unknown`), and audit logs name the process
//! and the controller.

use std::task::{Context, Poll};

use http::header::USER_AGENT;
use http::{HeaderValue, Request};
use tower::{Layer, Service};

/// The User-Agent of `component`'s requests. A component that is not a valid header value (a custom
/// controller's name with control characters) is left out rather than failing.
pub fn user_agent(component: &str) -> HeaderValue {
    let base = format!(
        "flotilla/{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    HeaderValue::from_str(&format!("{base} {component}"))
        .or_else(|_| HeaderValue::from_str(&base))
        .unwrap_or_else(|_| HeaderValue::from_static("flotilla"))
}

/// Sets the User-Agent of every request (replacing one already set).
#[derive(Clone, Debug)]
pub struct UserAgentLayer {
    value: HeaderValue,
}

impl UserAgentLayer {
    /// Requests of `component` (see [`user_agent`]).
    pub fn new(component: &str) -> Self {
        Self {
            value: user_agent(component),
        }
    }
}

impl<S> Layer<S> for UserAgentLayer {
    type Service = UserAgent<S>;

    fn layer(&self, inner: S) -> Self::Service {
        UserAgent {
            inner,
            value: self.value.clone(),
        }
    }
}

/// The service of [`UserAgentLayer`].
#[derive(Clone, Debug)]
pub struct UserAgent<S> {
    inner: S,
    value: HeaderValue,
}

impl<S, B> Service<Request<B>> for UserAgent<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        request.headers_mut().insert(USER_AGENT, self.value.clone());
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_manager_the_api_server_derives_is_flotilla() {
        let value = user_agent("replicaset-controller");
        let text = value.to_str().unwrap();
        assert_eq!(text.split('/').next(), Some("flotilla"));
        assert!(text.ends_with(") replicaset-controller"), "{text}");
    }

    #[test]
    fn a_component_that_is_no_header_value_is_left_out() {
        let value = user_agent("bad\ncomponent");
        assert!(value.to_str().unwrap().starts_with("flotilla/"));
        assert!(!value.to_str().unwrap().contains("bad"));
    }
}
