//! Watch helpers: a raw watch stream of JSON events (to check exactly what a server sends) and a
//! bounded `next` for any stream. Every wait is bounded and names what it waited for.

use std::pin::Pin;
use std::time::Duration;

use futures::io::AsyncBufReadExt;
use futures::{Stream, StreamExt, TryStreamExt};
use http::Request;
use http_body_util::BodyExt;
use serde_json::Value;

use super::raw::Reply;

type Lines = Pin<Box<dyn Stream<Item = std::io::Result<String>> + Send>>;

/// An open `?watch=true` request, read one JSON event per line.
pub struct RawWatch {
    lines: Lines,
    path: String,
}

impl RawWatch {
    /// Opens a watch on `path` (which must carry `watch=true` and any other query parameters).
    ///
    /// # Errors
    /// The server's reply when it answered anything but 200.
    ///
    /// # Panics
    /// When the request cannot be sent.
    pub async fn try_open(client: &kube::Client, path: &str) -> Result<RawWatch, Reply> {
        let request = Request::get(path)
            .header(http::header::ACCEPT, "application/json")
            .body(kube::client::Body::empty())
            .unwrap_or_else(|err| panic!("bad watch request {path}: {err}"));
        let response = client
            .send(request)
            .await
            .unwrap_or_else(|err| panic!("watch {path} was not answered: {err}"));
        if response.status() != http::StatusCode::OK {
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map(|body| body.to_bytes())
                .unwrap_or_default();
            return Err(Reply {
                status,
                headers,
                text: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        let reader = response
            .into_body()
            .into_data_stream()
            .map_err(std::io::Error::other)
            .into_async_read();
        Ok(RawWatch {
            lines: Box::pin(reader.lines()),
            path: path.to_string(),
        })
    }

    /// Opens a watch on `path`, panicking when the server does not answer 200.
    pub async fn open(client: &kube::Client, path: &str) -> RawWatch {
        match RawWatch::try_open(client, path).await {
            Ok(watch) => watch,
            Err(reply) => panic!("watch {path} answered {}: {}", reply.status, reply.text),
        }
    }

    /// The next event, or `None` when the server closed the stream.
    ///
    /// # Panics
    /// When nothing arrives within `timeout`, or a line is not JSON.
    pub async fn next_or_end(&mut self, timeout: Duration, what: &str) -> Option<Value> {
        loop {
            let line = match tokio::time::timeout(timeout, self.lines.next()).await {
                Ok(Some(Ok(line))) => line,
                Ok(Some(Err(err))) => {
                    panic!("watch {} broke while waiting for {what}: {err}", self.path)
                }
                Ok(None) => return None,
                Err(_) => panic!(
                    "timed out after {timeout:?} waiting for {what} on watch {}",
                    self.path
                ),
            };
            if line.trim().is_empty() {
                continue;
            }
            return Some(serde_json::from_str(&line).unwrap_or_else(|err| {
                panic!(
                    "watch {} sent a line that is not JSON ({err}): {line}",
                    self.path
                )
            }));
        }
    }

    /// The next event.
    ///
    /// # Panics
    /// On timeout or when the stream ends first.
    pub async fn next(&mut self, timeout: Duration, what: &str) -> Value {
        match self.next_or_end(timeout, what).await {
            Some(event) => event,
            None => panic!("watch {} ended while waiting for {what}", self.path),
        }
    }

    /// The next event for which `wanted` holds, skipping others (e.g. bookmarks).
    ///
    /// # Panics
    /// When none arrives within `timeout` in total, or the stream ends first.
    pub async fn next_matching(
        &mut self,
        timeout: Duration,
        what: &str,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = self.next(left, what).await;
            if wanted(&event) {
                return event;
            }
        }
    }

    /// Waits until the server closes the stream, returning the events that came before.
    ///
    /// # Panics
    /// When the stream is still open after `timeout`.
    pub async fn until_end(&mut self, timeout: Duration, what: &str) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut events = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_or_end(left, what).await {
                Some(event) => events.push(event),
                None => return events,
            }
        }
    }
}

/// The `type` of a raw watch event (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`).
pub fn event_type(event: &Value) -> &str {
    event["type"].as_str().unwrap_or_default()
}

/// The `metadata.name` of a raw watch event's object.
pub fn event_name(event: &Value) -> &str {
    event["object"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
}

/// The next item of any stream within `timeout`.
///
/// # Panics
/// On timeout or when the stream ends, naming `what`.
pub async fn next_item<S>(stream: &mut S, timeout: Duration, what: &str) -> S::Item
where
    S: Stream + Unpin,
{
    match tokio::time::timeout(timeout, stream.next()).await {
        Ok(Some(item)) => item,
        Ok(None) => panic!("stream ended while waiting for {what}"),
        Err(_) => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}
