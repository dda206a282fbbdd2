//! Raw HTTP requests through a `kube::Client`, for tests that check status codes, headers and
//! `Status` bodies exactly as a server returns them.

use http::{HeaderMap, Method, Request};
use http_body_util::BodyExt;
use serde_json::Value;

/// A response: status code, headers and body text.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status code.
    pub status: u16,
    /// The response headers.
    pub headers: HeaderMap,
    /// The body as text.
    pub text: String,
}

impl Reply {
    /// The body parsed as JSON.
    ///
    /// # Panics
    /// When the body is not JSON (the panic shows the status and the body).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|err| {
            panic!(
                "response {} is not JSON ({err}): {}",
                self.status, self.text
            )
        })
    }

    /// The `Content-Type` header, or "".
    pub fn content_type(&self) -> &str {
        self.headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// Asserts the code and that the body is a `Status` with `reason`; returns the Status.
    ///
    /// # Panics
    /// When the code, kind or reason differ.
    #[track_caller]
    pub fn expect_status(&self, code: u16, reason: &str) -> Value {
        assert_eq!(
            self.status, code,
            "unexpected status code; body: {}",
            self.text
        );
        let body = self.json();
        assert_eq!(body["kind"], "Status", "not a Status: {body}");
        assert_eq!(body["apiVersion"], "v1", "Status apiVersion: {body}");
        assert_eq!(body["status"], "Failure", "Status.status: {body}");
        assert_eq!(body["reason"], reason, "Status.reason: {body}");
        assert_eq!(body["code"], code, "Status.code: {body}");
        body
    }

    /// Asserts a 2xx code; returns the body as JSON.
    ///
    /// # Panics
    /// When the code is not `code`.
    #[track_caller]
    pub fn expect_ok(&self, code: u16) -> Value {
        assert_eq!(
            self.status, code,
            "unexpected status code; body: {}",
            self.text
        );
        self.json()
    }
}

/// Sends `method path` with an optional body of `content_type`.
///
/// # Panics
/// When the request cannot be sent at all (connection refused, ...): that is never what a test checks.
pub async fn request(
    client: &kube::Client,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Reply {
    let mut builder = Request::builder().method(method.clone()).uri(path);
    if let Some(content_type) = content_type {
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    builder = builder.header(http::header::ACCEPT, "application/json");
    let request = builder
        .body(kube::client::Body::from(body))
        .unwrap_or_else(|err| panic!("bad test request {method} {path}: {err}"));
    let response = client
        .send(request)
        .await
        .unwrap_or_else(|err| panic!("{method} {path} was not answered: {err}"));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|err| panic!("{method} {path}: cannot read the body: {err}"))
        .to_bytes();
    Reply {
        status,
        headers,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// `GET path`.
pub async fn get(client: &kube::Client, path: &str) -> Reply {
    request(client, Method::GET, path, None, Vec::new()).await
}

/// `POST path` with a JSON body.
pub async fn post(client: &kube::Client, path: &str, body: &Value) -> Reply {
    request(
        client,
        Method::POST,
        path,
        Some("application/json"),
        body.to_string().into_bytes(),
    )
    .await
}

/// `PUT path` with a JSON body.
pub async fn put(client: &kube::Client, path: &str, body: &Value) -> Reply {
    request(
        client,
        Method::PUT,
        path,
        Some("application/json"),
        body.to_string().into_bytes(),
    )
    .await
}

/// `PATCH path` with `body` sent as `content_type` (e.g. `application/merge-patch+json`).
pub async fn patch(client: &kube::Client, path: &str, content_type: &str, body: &Value) -> Reply {
    request(
        client,
        Method::PATCH,
        path,
        Some(content_type),
        body.to_string().into_bytes(),
    )
    .await
}

/// `DELETE path`, with `DeleteOptions` as the body when given.
pub async fn delete(client: &kube::Client, path: &str, options: Option<&Value>) -> Reply {
    match options {
        Some(options) => {
            let body = options.to_string().into_bytes();
            request(client, Method::DELETE, path, Some("application/json"), body).await
        }
        None => request(client, Method::DELETE, path, None, Vec::new()).await,
    }
}
