//! The Kubernetes API rate limiter (`--kube-api-qps` / `--kube-api-burst`): one token bucket per
//! controller of the worker, shared by that controller's reconciles, as a tower layer that waits for a
//! token rather than failing. A request of a traced reconcile that had to wait gets a
//! `wait client_rate_limit` span under its `kube_api` span covering exactly the wait (client-go logs
//! "Waited for … due to client-side throttling" instead).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use flotilla_common::{TraceContext, in_exported_span, record_wait};
use parking_lot::Mutex;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// A token bucket in the shape of client-go's `flowcontrol` limiter: `qps` tokens per second, at most
/// `burst` saved up. Callers reserve a token and wait until it is theirs, so waiters are served in the
/// order they arrived and none is refused.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
    /// Where each reservation's wait is observed (`rest_client_rate_limiter_duration_seconds`).
    waits: Option<Histogram>,
}

#[derive(Debug)]
struct BucketState {
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. `qps <= 0` means unlimited.
    pub(crate) fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: f64::from(qps),
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                last: Instant::now(),
            }),
            waits: None,
        }
    }

    /// The bucket observing every reservation's wait (0 for a token taken at once) in `waits`, as
    /// client-go's limiter observes `rest_client_rate_limiter_duration_seconds`.
    pub(crate) fn observed(mut self, waits: Histogram) -> Self {
        self.waits = Some(waits);
        self
    }

    /// Takes one token and says how long to wait before using it (`None`: use it now).
    pub(crate) fn reserve(&self) -> Option<Duration> {
        let wait = self.take();
        if let Some(waits) = &self.waits {
            waits.observe(wait.map_or(0.0, |w| w.as_secs_f64()));
        }
        wait
    }

    fn take(&self) -> Option<Duration> {
        if self.qps <= 0.0 {
            return None;
        }
        let now = Instant::now();
        let mut state = self.state.lock();
        let elapsed = now.saturating_duration_since(state.last).as_secs_f64();
        state.last = now;
        state.tokens = (state.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        (state.tokens < 0.0).then(|| Duration::from_secs_f64(-state.tokens / self.qps))
    }
}

/// Wraps a service so every request first takes a token from the bucket.
#[derive(Clone)]
pub(crate) struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
}

impl RateLimitLayer {
    pub(crate) fn new(bucket: Arc<TokenBucket>) -> Self {
        Self { bucket }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
        }
    }
}

/// The service of [`RateLimitLayer`].
#[derive(Clone)]
pub(crate) struct RateLimited<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R> + Clone + Send + 'static,
    S::Future: Send,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness of the inner service is awaited after the token, on the clone that sends.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        let wait = self.bucket.reserve();
        let inner = self.inner.clone();
        // The wait is traced under the request's span, current here (the `kube_api` layer is above).
        let traced = wait.filter(|w| !w.is_zero()).and_then(|_| traced_request());
        Box::pin(async move {
            if let Some(wait) = wait {
                let start = SystemTime::now();
                tokio::time::sleep(wait).await;
                if let Some(parent) = &traced {
                    record_wait(parent, "client_rate_limit", start, SystemTime::now(), []);
                }
            }
            inner.oneshot(request).await
        })
    }
}

/// The context of the current span when it is an exported request span (a traced reconcile's call).
fn traced_request() -> Option<TraceContext> {
    if !in_exported_span() {
        return None;
    }
    TraceContext::of_span(&tracing::Span::current())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_lets_a_burst_through_without_waiting() {
        let bucket = TokenBucket::new(10.0, 3);
        assert_eq!(bucket.reserve(), None);
        assert_eq!(bucket.reserve(), None);
        assert_eq!(bucket.reserve(), None);
        assert_eq!(bucket.reserve(), Some(Duration::from_millis(100)));
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_queue_up_one_interval_apart() {
        let bucket = TokenBucket::new(10.0, 1);
        assert_eq!(bucket.reserve(), None);
        let first = bucket.reserve().unwrap();
        let second = bucket.reserve().unwrap();
        assert!(
            (first.as_secs_f64() - 0.1).abs() < 1e-9,
            "first wait {first:?}"
        );
        assert!(
            (second.as_secs_f64() - 0.2).abs() < 1e-9,
            "second wait {second:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_refills_with_time_up_to_the_burst() {
        let bucket = TokenBucket::new(10.0, 2);
        bucket.reserve();
        bucket.reserve();
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(bucket.reserve(), None);
        assert_eq!(bucket.reserve(), None);
        assert!(
            bucket.reserve().is_some(),
            "the refill must stop at the burst"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_reservation_s_wait_is_observed_including_the_ones_that_do_not_wait() {
        let waits = Histogram::new([0.05, 0.15]);
        let bucket = TokenBucket::new(10.0, 1).observed(waits.clone());
        assert_eq!(bucket.reserve(), None);
        assert!(bucket.reserve().is_some());
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("waits", "", waits);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("waits_count 2"), "{text}");
        assert!(text.contains(r#"waits_bucket{le="0.05"} 1"#), "{text}");
        assert!(text.contains(r#"waits_bucket{le="0.15"} 2"#), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_qps_means_unlimited() {
        let bucket = TokenBucket::new(0.0, 1);
        for _ in 0..100 {
            assert_eq!(bucket.reserve(), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_limited_service_waits_for_its_token_instead_of_failing() {
        let bucket = Arc::new(TokenBucket::new(2.0, 1));
        let service =
            tower::service_fn(|x: u32| async move { Ok::<_, std::convert::Infallible>(x) });
        let mut limited = RateLimitLayer::new(bucket).layer(service);
        let start = Instant::now();
        assert_eq!(limited.call(1).await, Ok(1));
        assert_eq!(limited.call(2).await, Ok(2));
        assert_eq!(start.elapsed(), Duration::from_millis(500));
    }
}
