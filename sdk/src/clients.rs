//! Where a reconcile's `kube::Client` comes from: the SDK declares it, the worker runtime implements it
//! with its rate-limited, write-recording HTTP stack, and a test supplies a client of its own.

use http::{Request, Response};
use kube::client::Body;

use crate::writes::WriteJournal;

/// The Kubernetes clients of one controller on one worker.
///
/// The runtime's implementation rate-limits every request with the worker's `--kube-api-qps` /
/// `--kube-api-burst` and makes the recording client note each accepted create, update, patch and
/// delete in the journal (read-your-writes). [`kube::Client`] implements it too, recording nothing:
/// what a unit test with a client of its own choice gets.
pub trait KubeClients: Send + Sync {
    /// A client for one reconcile. Every write the API server accepts through it must land in
    /// `journal` before the response reaches the caller; the context asks at most once per
    /// reconcile, on the first [`crate::Context::client`].
    fn recording_client(&self, journal: &WriteJournal) -> kube::Client;

    /// A client that records nothing, for Events: no key waits for them. Asked once per controller,
    /// on the first [`crate::Context::recorder`].
    fn plain_client(&self) -> kube::Client;
}

impl KubeClients for kube::Client {
    fn recording_client(&self, _journal: &WriteJournal) -> kube::Client {
        self.clone()
    }

    fn plain_client(&self) -> kube::Client {
        self.clone()
    }
}

/// The clients of a test context that was given none: every request fails at once with
/// [`NoApiServer`], so a reconcile that should not have called the API fails loudly.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoApi;

/// The error of every request of a test context without a client.
#[derive(Debug, thiserror::Error)]
#[error("this test context has no Kubernetes API (give it one with TestContext::client)")]
pub(crate) struct NoApiServer;

impl NoApi {
    fn client() -> kube::Client {
        let service = tower::service_fn(|_request: Request<Body>| async {
            Err::<Response<Body>, NoApiServer>(NoApiServer)
        });
        kube::Client::new(service, "default")
    }
}

impl KubeClients for NoApi {
    fn recording_client(&self, _journal: &WriteJournal) -> kube::Client {
        Self::client()
    }

    fn plain_client(&self) -> kube::Client {
        Self::client()
    }
}
