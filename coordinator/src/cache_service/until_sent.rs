//! Keeps a Cache answer's in-flight permit until the answer has left the process. tonic encodes a unary
//! answer after the handler returns and hyper hands it to HTTP/2 after that, so a permit dropped with
//! the handler would bound nothing; this service moves the permit the handler put in the response's
//! extensions into the response body. The body hands its bytes on in copied slices of [`SLICE_BYTES`]:
//! hyper takes the next slice only when HTTP/2 flow control has room, so the rest of the answer (and
//! the permit) stays here while a client reads slowly or not at all, and what HTTP/2 buffers beyond the
//! permit is a few slices per stream, never the whole answer.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;

use super::inflight::ListPermit;

/// Bytes handed to HTTP/2 at a time: h2's default DATA frame is 16 KiB, so a slice is two frames, and
/// copying it costs little next to encoding the answer.
const SLICE_BYTES: usize = 32 * 1024;

/// What the handler puts in the response's extensions (which take only `Clone` values): the one
/// permit, shared until this service takes it out.
#[derive(Clone, Debug)]
pub(super) struct SendPermit {
    /// Held, never read: dropping the last clone gives the room back.
    _permit: Arc<ListPermit>,
}

impl SendPermit {
    pub(super) fn new(permit: ListPermit) -> Self {
        Self {
            _permit: Arc::new(permit),
        }
    }
}

/// A gRPC service whose responses keep their [`SendPermit`] until sent (see the module docs).
#[derive(Clone, Debug)]
pub struct HoldUntilSent<S> {
    inner: S,
}

impl<S> HoldUntilSent<S> {
    pub(super) fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S: NamedService> NamedService for HoldUntilSent<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for HoldUntilSent<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let answered = self.inner.call(request);
        Box::pin(async move {
            let mut response = answered.await?;
            Ok(match response.extensions_mut().remove::<SendPermit>() {
                Some(permit) => response.map(|body| Body::new(PermitBody::new(body, permit))),
                None => response,
            })
        })
    }
}

/// A response body holding a permit until its last byte is handed on.
struct PermitBody {
    inner: Body,
    /// What is left of the DATA frame being handed on in slices.
    pending: Bytes,
    permit: Option<SendPermit>,
}

impl PermitBody {
    fn new(inner: Body, permit: SendPermit) -> Self {
        Self {
            inner,
            pending: Bytes::new(),
            permit: Some(permit),
        }
    }

    /// The next slice, copied so that HTTP/2's buffers never keep the whole answer's allocation alive
    /// once the permit is gone.
    fn slice(&mut self) -> Frame<Bytes> {
        let n = self.pending.len().min(SLICE_BYTES);
        let slice = Bytes::copy_from_slice(&self.pending[..n]);
        bytes::Buf::advance(&mut self.pending, n);
        if self.pending.is_empty() {
            // The answer's allocation goes now (the encoder yields one frame per message).
            self.pending = Bytes::new();
        }
        Frame::data(slice)
    }
}

impl HttpBody for PermitBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        if !self.pending.is_empty() {
            return Poll::Ready(Some(Ok(self.slice())));
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    self.pending = data;
                    if self.pending.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::new()))));
                    }
                    Poll::Ready(Some(Ok(self.slice())))
                }
                // Trailers come after every byte of the answer.
                Err(frame) => {
                    self.permit = None;
                    Poll::Ready(Some(Ok(frame)))
                }
            },
            Poll::Ready(None) => {
                self.permit = None;
                Poll::Ready(None)
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let pending = self.pending.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + pending);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + pending);
        }
        hint
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::super::inflight::{CacheListLimits, ListBudget};
    use super::*;

    async fn next_frame(body: &mut PermitBody) -> Option<Result<Frame<Bytes>, tonic::Status>> {
        std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
    }

    #[tokio::test]
    async fn the_permit_lives_until_the_last_slice_is_taken_and_the_bytes_arrive_whole() {
        let budget = ListBudget::new(CacheListLimits {
            total_bytes: 1024 * 1024,
            per_worker_bytes: 1024 * 1024,
            wait: Duration::ZERO,
        });
        let answer: String = (0..100_000u32)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let permit = budget.acquire("w0", answer.len()).await.unwrap();
        let held = budget.in_flight_bytes();
        assert!(held >= answer.len());
        let mut body = PermitBody::new(Body::new(answer.clone()), SendPermit::new(permit));
        let mut received = Vec::new();
        while let Some(frame) = next_frame(&mut body).await {
            let data = frame.unwrap().into_data().unwrap();
            assert!(data.len() <= SLICE_BYTES);
            if received.len() + data.len() < answer.len() {
                assert_eq!(
                    budget.in_flight_bytes(),
                    held,
                    "the permit is held while bytes remain"
                );
            }
            received.extend_from_slice(&data);
        }
        assert_eq!(received, answer.as_bytes());
        assert_eq!(budget.in_flight_bytes(), 0, "given back at the end");
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_gives_the_permit_back() {
        let budget = ListBudget::new(CacheListLimits::default());
        let permit = budget.acquire("w0", 200_000).await.unwrap();
        let mut body = PermitBody::new(Body::new("x".repeat(200_000)), SendPermit::new(permit));
        next_frame(&mut body).await.unwrap().unwrap();
        assert!(budget.in_flight_bytes() > 0);
        drop(body);
        assert_eq!(budget.in_flight_bytes(), 0);
    }
}
