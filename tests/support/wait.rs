//! Bounded waits that fail with a message naming what was awaited.

use std::future::Future;
use std::time::Duration;

/// How often [`wait_for`] asks again.
const POLL: Duration = Duration::from_millis(25);

/// Calls `check` until it returns `Some`, at most for `timeout`; panics naming `what` otherwise.
///
/// Use it for state that no watch event announces (e.g. "the namespace is gone"); where an event can
/// be awaited, prefer the watch helpers.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Awaits `future` for at most `timeout`; panics naming `what` otherwise.
pub async fn within<T>(timeout: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(timeout, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}
