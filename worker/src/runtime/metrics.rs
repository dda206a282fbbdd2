//! The worker's Prometheus metrics: reconciles by controller and outcome, reconcile duration, items in
//! flight, refused items, fencing events, leader connection state, Kubernetes API requests and the time
//! requests wait for the rate limiter.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use flotilla_common::RequestCounter;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    controller: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

type HistogramFamily = Family<ControllerLabels, Histogram, fn() -> Histogram>;

/// client-go's rate-limiter buckets for `rest_client_rate_limiter_duration_seconds`: 5 ms to 60 s.
fn rate_limiter_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
    ])
}

fn duration_histogram() -> Histogram {
    // 1 ms to about 30 s: no-op reconciles sit at the bottom, slow API calls at the top.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Handles to the worker's metrics; cheap to clone.
#[derive(Clone)]
pub(crate) struct Metrics {
    reconciles: Family<OutcomeLabels, Counter>,
    duration: HistogramFamily,
    errors: Family<ControllerLabels, Counter>,
    rate_limiter_wait: HistogramFamily,
    in_flight: Family<ControllerLabels, Gauge>,
    refused: Family<ReasonLabels, Counter>,
    fenced: Counter,
    connected: Gauge,
    stream_breaks: Counter,
    registrations_rewritten: Counter,
    api_requests: RequestCounter,
    write_intents_dropped: Counter,
}

impl Metrics {
    /// Registers the metrics in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            reconciles: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            errors: Family::default(),
            rate_limiter_wait: Family::new_with_constructor(rate_limiter_histogram),
            in_flight: Family::default(),
            refused: Family::default(),
            fenced: Counter::default(),
            connected: Gauge::default(),
            stream_breaks: Counter::default(),
            registrations_rewritten: Counter::default(),
            api_requests: RequestCounter::default(),
            write_intents_dropped: Counter::default(),
        };
        registry.register(
            "flotilla_worker_reconciles",
            "Reconciles finished, by controller and outcome (success, requeue_after, error)",
            metrics.reconciles.clone(),
        );
        registry.register(
            "flotilla_worker_reconcile_duration_seconds",
            "How long reconciles took, by controller",
            metrics.duration.clone(),
        );
        registry.register(
            "flotilla_worker_reconcile_errors",
            "Reconciles that returned an error, by controller (the outcome=\"error\" reconciles, for alerts)",
            metrics.errors.clone(),
        );
        registry.register(
            // client-go's name; labelled by the controller whose budget (--kube-api-qps/--kube-api-burst)
            // the request waited for (`events` for the Events' budget), where client-go labels by host
            // and verb: here the bucket, not the verb, decides the wait.
            "rest_client_rate_limiter_duration_seconds",
            "Seconds Kubernetes API requests waited for the client-side rate limiter, by controller",
            metrics.rate_limiter_wait.clone(),
        );
        registry.register(
            "flotilla_worker_reconciles_in_flight",
            "Reconciles running now, by controller",
            metrics.in_flight.clone(),
        );
        registry.register(
            "flotilla_worker_refused_items",
            "Assigned items refused without running (stale_term, unknown_controller, shutting_down)",
            metrics.refused.clone(),
        );
        registry.register(
            "flotilla_worker_fenced",
            "Times the worker lost its lease and cancelled everything it ran",
            metrics.fenced.clone(),
        );
        registry.register(
            "flotilla_worker_leader_connected",
            "1 while the worker has a welcomed stream to the leader",
            metrics.connected.clone(),
        );
        registry.register(
            "flotilla_worker_stream_breaks",
            "Times a stream to the leader failed to open or broke (a worker breaking in a loop is not ready)",
            metrics.stream_breaks.clone(),
        );
        registry.register(
            "flotilla_worker_registrations_rewritten",
            "Times the worker's registration was found deleted from etcd while its lease lived, and written again",
            metrics.registrations_rewritten.clone(),
        );
        registry.register(
            "flotilla_worker_write_intents_dropped",
            "Write intents of traced reconciles dropped because too many waited to be sent to the leader (their writes' echoes are not linked)",
            metrics.write_intents_dropped.clone(),
        );
        metrics.api_requests.register(registry);
        metrics
    }

    /// The counter of write intents dropped by the worker's intent queue.
    pub(crate) fn write_intents_dropped(&self) -> Counter {
        self.write_intents_dropped.clone()
    }

    /// The metrics of one controller, looked up once so that an item costs no label hashing.
    pub(crate) fn controller(&self, controller: &str) -> ControllerMetrics {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        let outcome = |outcome: &str| {
            let labels = OutcomeLabels {
                controller: controller.to_owned(),
                outcome: outcome.to_owned(),
            };
            self.reconciles.get_or_create(&labels).clone()
        };
        ControllerMetrics {
            in_flight: self.in_flight.get_or_create(&labels).clone(),
            duration: self.duration.get_or_create(&labels).clone(),
            success: outcome("success"),
            requeue_after: outcome("requeue_after"),
            error: outcome("error"),
            errors: self.errors.get_or_create(&labels).clone(),
        }
    }

    /// The histogram of rate-limiter waits of the budget `controller` (or `events`), created now so the
    /// series shows before the first request.
    pub(crate) fn rate_limiter_wait(&self, controller: &str) -> Histogram {
        self.rate_limiter_wait
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .clone()
    }

    /// The counter the Kubernetes client stack counts its requests into.
    pub(crate) fn api_requests(&self) -> RequestCounter {
        self.api_requests.clone()
    }

    pub(crate) fn refused(&self, reason: &str) {
        self.refused
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub(crate) fn fenced(&self) {
        self.fenced.inc();
    }

    pub(crate) fn stream_broke(&self) {
        self.stream_breaks.inc();
    }

    pub(crate) fn registration_rewritten(&self) {
        self.registrations_rewritten.inc();
    }

    pub(crate) fn set_connected(&self, connected: bool) {
        self.connected.set(i64::from(connected));
    }
}

/// The metrics of one controller.
#[derive(Clone)]
pub(crate) struct ControllerMetrics {
    in_flight: Gauge,
    duration: Histogram,
    success: Counter,
    requeue_after: Counter,
    error: Counter,
    errors: Counter,
}

impl ControllerMetrics {
    pub(crate) fn started(&self) {
        self.in_flight.inc();
    }

    /// A reconcile ended (`outcome` = None: it was cancelled, and only leaves the in-flight gauge).
    pub(crate) fn finished(&self, outcome: Option<&str>, seconds: f64) {
        self.in_flight.dec();
        let counter = match outcome {
            None => return,
            Some("success") => &self.success,
            Some("requeue_after") => &self.requeue_after,
            Some(_) => {
                self.errors.inc();
                &self.error
            }
        };
        counter.inc();
        self.duration.observe(seconds);
    }
}
