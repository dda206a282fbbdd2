//! Whether this coordinator reaches the Kubernetes API, and the bound past which it must not lead
//! (`--kube-api-unreachable-timeout`).
//!
//! Upstream kube-controller-manager keeps its leader lease in the API server, so a leader cut from the
//! API loses its lease and stops. Ours is in etcd: a leader cut from the API keeps its lease while its
//! informers go stale, and would go on dispatching keys on a cache nobody updates. Stale informers miss
//! every event (so the fleet stops converging), and a read-your-writes hold released by its bound onto a
//! cache that never saw the writes lets the next reconcile create again. So the coordinator probes the
//! API through the informers' own client ([`ApiLink::start`]), and:
//!
//! - a leader whose API has not answered for the bound stops dispatching and resigns, so a standby
//!   that reaches the API leads (its informers list afresh, and see every write);
//! - a coordinator whose API does not answer does not campaign, so it cannot take the lease back;
//! - while the API is in doubt ([`ApiLink::in_doubt`], two missed probes) both say not ready;
//! - a read-your-writes hold expires only once the API has answered after the hold's deadline
//!   ([`ApiLink::expiry_horizon`]): a held key waits for a cache that can observe its writes rather than
//!   being dispatched onto one that cannot, whatever `--expectations-timeout` says.
//!
//! Any HTTP answer counts as contact (even an error status: the link works, and a sick API server is
//! not a partition). A probe that hangs (packets swallowed) is abandoned after half the bound and sent
//! again on a new connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

/// The link to the Kubernetes API as this process sees it; cheap to clone. The default is a link never
/// probed, which counts as always reachable (in-process tests and benchmarks that start no probe).
#[derive(Clone, Debug, Default)]
pub struct ApiLink {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    /// When the API last answered (or the probe started). Only the probe task writes it.
    last_contact: watch::Receiver<Instant>,
    /// `--kube-api-unreachable-timeout`.
    bound: Duration,
    /// How often the probe asks.
    period: Duration,
}

impl ApiLink {
    /// Probes the API through `client` every quarter of `bound` (at least 100 ms, at most 5 s) until
    /// `stop`, counting the API reachable from now until the first probe says otherwise.
    ///
    /// # Panics
    /// Outside a Tokio runtime (it spawns the probe task).
    pub fn start(client: kube::Client, bound: Duration, stop: CancellationToken) -> Self {
        let period = (bound / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        let (tx, rx) = watch::channel(Instant::now());
        tokio::spawn(
            probe(client, tx, period, (bound / 2).max(period), stop)
                .instrument(info_span!("api_probe")),
        );
        Self {
            inner: Some(Arc::new(Inner {
                last_contact: rx,
                bound,
                period,
            })),
        }
    }

    /// The latest deadline a read-your-writes hold may have to expire at `now`: `now`, or when the API
    /// last answered if that is earlier (a link never probed counts as answering now). A hold whose
    /// deadline passed while the API did not answer waits until it answers again.
    pub fn expiry_horizon(&self, now: Instant) -> Instant {
        self.inner
            .as_ref()
            .map_or(now, |i| (*i.last_contact.borrow()).min(now))
    }

    /// How long the API has not answered (zero for a link never probed).
    pub fn unreachable_for(&self) -> Duration {
        self.inner
            .as_ref()
            .map_or(Duration::ZERO, |i| i.last_contact.borrow().elapsed())
    }

    /// Whether two probes in a row went unanswered: the cache may be stale, so read-your-writes holds
    /// wait and `/readyz` says so.
    pub fn in_doubt(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| self.unreachable_for() > i.period * 2)
    }

    /// Whether the API has not answered for the bound: this coordinator must not lead.
    pub fn is_unreachable(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| self.unreachable_for() >= i.bound)
    }

    /// Resolves once the API has not answered for longer than the bound (at once if so already); never
    /// for a link never probed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn unreachable(&self) {
        let Some(inner) = &self.inner else {
            return std::future::pending().await;
        };
        let mut rx = inner.last_contact.clone();
        loop {
            let deadline = *rx.borrow_and_update() + inner.bound;
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    if self.is_unreachable() {
                        return;
                    }
                }
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The probe stopped (shutdown): nothing will ever count as contact again.
                        return std::future::pending().await;
                    }
                }
            }
        }
    }

    /// Waits until the API answers again (at once if it is not unreachable); false when `stop` fired
    /// first.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn reachable(&self, stop: &CancellationToken) -> bool {
        let Some(inner) = &self.inner else {
            return !stop.is_cancelled();
        };
        let mut rx = inner.last_contact.clone();
        while self.is_unreachable() {
            tokio::select! {
                biased;
                () = stop.cancelled() => return false,
                changed = rx.changed() => {
                    if changed.is_err() {
                        return false;
                    }
                }
            }
        }
        !stop.is_cancelled()
    }

    /// Why this coordinator is not ready because of its API link, prefixed by `role`; `None` while the
    /// link is not in doubt.
    pub fn not_ready_reason(&self, role: &str) -> Option<String> {
        self.in_doubt().then(|| {
            format!(
                "{role}; the Kubernetes API has not answered for {}s (--kube-api-unreachable-timeout {}s)",
                self.unreachable_for().as_secs(),
                self.inner.as_ref().map_or(0, |i| i.bound.as_secs())
            )
        })
    }
}

/// Asks the API for its core versions every `period`; every answer, even an error status, is contact.
async fn probe(
    client: kube::Client,
    contact: watch::Sender<Instant>,
    period: Duration,
    timeout: Duration,
    stop: CancellationToken,
) {
    let mut failing = false;
    loop {
        let started = Instant::now();
        let answered = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            answer = tokio::time::timeout(timeout, client.list_core_api_versions()) => match answer {
                Ok(Ok(_) | Err(kube::Error::Api(_))) => Ok(()),
                Ok(Err(err)) => Err(err.to_string()),
                Err(_) => Err(format!("no answer within {timeout:?}")),
            },
        };
        match answered {
            Ok(()) => {
                contact.send_replace(Instant::now());
                if std::mem::take(&mut failing) {
                    info!("the Kubernetes API answers again");
                }
            }
            Err(error) => {
                if !std::mem::replace(&mut failing, true) {
                    warn!(%error, "the Kubernetes API did not answer a probe");
                }
            }
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(started + period) => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn unreachable_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn a_link_never_probed_is_always_reachable() {
        let link = ApiLink::default();
        assert!(!link.in_doubt());
        assert!(!link.is_unreachable());
        assert!(link.reachable(&CancellationToken::new()).await);
        assert!(link.not_ready_reason("leading").is_none());
        let now = Instant::now();
        assert_eq!(link.expiry_horizon(now), now, "holds expire on time");
        let waited = tokio::time::timeout(Duration::from_millis(50), link.unreachable()).await;
        assert!(waited.is_err(), "never unreachable");
    }

    #[tokio::test]
    async fn an_api_that_refuses_connections_is_in_doubt_then_unreachable_within_the_bound() {
        let stop = CancellationToken::new();
        let bound = Duration::from_millis(800);
        // The link counts its bound from the moment it starts, so the clock starts before it does:
        // read after `start` returns, it would put the bound up to a scheduling delay late.
        let started = Instant::now();
        let link = ApiLink::start(unreachable_client(), bound, stop.clone());
        assert!(
            !link.is_unreachable(),
            "reachable until probes say otherwise"
        );
        tokio::time::timeout(Duration::from_secs(5), link.unreachable())
            .await
            .expect("unreachable within 5 s");
        let took = started.elapsed();
        assert!(took >= bound, "{took:?}");
        assert!(link.in_doubt());
        let now = Instant::now();
        assert!(
            link.expiry_horizon(now) + bound <= now,
            "no hold may expire past the last answer"
        );
        assert!(
            link.not_ready_reason("leading")
                .unwrap()
                .starts_with("leading; the Kubernetes API has not answered")
        );
        let stopped = CancellationToken::new();
        stopped.cancel();
        assert!(!link.reachable(&stopped).await);
        stop.cancel();
    }
}
