//! How long the process's etcd lease renewals take, and how many fail: the early warning before a
//! [`Session`](super::Session) is declared lost (a worker fences itself, a leader steps down).
//!
//! One set per process, shared by every session it opens (a process holds one lease at a time, and opens
//! a new session only after the last was lost): a process-wide handle spares threading a metrics argument
//! through each `Session::start`. Sessions count whether or not the families are registered.

use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The families every session of the process counts into.
pub(super) struct SessionMetrics {
    /// Seconds from sending a keep-alive to etcd's answer, for renewals that got one.
    pub(super) renew_duration: Histogram,
    /// Renewals that failed or timed out (the session retries until its renew deadline).
    pub(super) renew_failures: Counter,
}

/// The process's session metrics.
pub(super) static SESSION_METRICS: LazyLock<SessionMetrics> = LazyLock::new(|| SessionMetrics {
    // 1 ms to about 4 s: a healthy etcd answers in milliseconds, the renew deadline is seconds.
    renew_duration: Histogram::new(exponential_buckets(0.001, 2.0, 13)),
    renew_failures: Counter::default(),
});

/// Registers the lease metrics in `registry`: `flotilla_lease_renew_duration_seconds` and
/// `flotilla_lease_renew_failures_total`. Call it once per registry.
pub fn register_session_metrics(registry: &mut Registry) {
    registry.register(
        "flotilla_lease_renew_duration_seconds",
        "Seconds an etcd lease keep-alive took to be answered",
        SESSION_METRICS.renew_duration.clone(),
    );
    registry.register(
        "flotilla_lease_renew_failures",
        "etcd lease keep-alives that failed or timed out",
        SESSION_METRICS.renew_failures.clone(),
    );
}
