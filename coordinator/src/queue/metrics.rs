//! The workqueue's Prometheus metrics under client-go's names and `name` label, so its dashboards work as-is.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The label every workqueue metric carries: `name` = the controller (client-go's label).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

/// client-go's latency buckets: 10 ns … 10 s, ×10 apart.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

/// The metric families of all workqueues of a process. Register them once, then take one [`QueueMetrics`] per
/// queue with [`QueueMetricsFamilies::for_queue`].
#[derive(Debug, Clone)]
pub struct QueueMetricsFamilies {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    retries: Family<QueueLabels, Counter>,
    unfinished_work: Family<QueueLabels, FloatGauge>,
    longest_running: Family<QueueLabels, FloatGauge>,
}

impl Default for QueueMetricsFamilies {
    /// Families that are not registered anywhere: the metrics still count, nobody scrapes them (tests).
    fn default() -> Self {
        Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(latency_histogram),
            work_duration: Family::new_with_constructor(latency_histogram),
            retries: Family::default(),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
        }
    }
}

impl QueueMetricsFamilies {
    /// Creates the families and registers them in `registry`.
    ///
    /// Pass the root registry (no prefix): a prefix would change client-go's names and break its dashboards.
    /// Call it once per registry; a second call registers the names twice.
    pub fn register(registry: &mut Registry) -> Self {
        let families = Self::default();
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            families.depth.clone(),
        );
        // prometheus-client appends `_total` to counters, giving client-go's `workqueue_adds_total`.
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            families.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            families.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            families.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            families.retries.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by \
             work_duration. Large values indicate stuck threads",
            families.unfinished_work.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            families.longest_running.clone(),
        );
        families
    }

    /// The metrics of the queue called `name` (the controller name). Asking twice for one name gives handles
    /// to the same series.
    pub fn for_queue(&self, name: &str) -> QueueMetrics {
        let labels = QueueLabels {
            name: name.to_owned(),
        };
        QueueMetrics {
            depth: self.depth.get_or_create(&labels).clone(),
            adds: self.adds.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            unfinished_work: self.unfinished_work.get_or_create(&labels).clone(),
            longest_running: self.longest_running.get_or_create(&labels).clone(),
        }
    }
}

/// Handles to one queue's series; cloning is cheap (shared atomics).
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    pub(super) depth: Gauge,
    pub(super) adds: Counter,
    pub(super) queue_duration: Histogram,
    pub(super) work_duration: Histogram,
    pub(super) retries: Counter,
    pub(super) unfinished_work: FloatGauge,
    pub(super) longest_running: FloatGauge,
}

impl QueueMetrics {
    /// Metrics that go nowhere, for a queue nobody scrapes (tests, tools).
    pub fn unregistered(name: &str) -> Self {
        QueueMetricsFamilies::default().for_queue(name)
    }

    /// Current value of `workqueue_depth`.
    pub fn depth(&self) -> i64 {
        self.depth.get()
    }

    /// Current value of `workqueue_adds_total`.
    pub fn adds(&self) -> u64 {
        self.adds.get()
    }

    /// Current value of `workqueue_retries_total`.
    pub fn retries(&self) -> u64 {
        self.retries.get()
    }

    /// Current value of `workqueue_unfinished_work_seconds`.
    pub fn unfinished_work_seconds(&self) -> f64 {
        self.unfinished_work.get()
    }

    /// Current value of `workqueue_longest_running_processor_seconds`.
    pub fn longest_running_processor_seconds(&self) -> f64 {
        self.longest_running.get()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn exposed(registry: &Registry) -> String {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn the_registry_exposes_client_go_metric_names_labelled_by_queue_name() {
        let mut registry = Registry::default();
        let families = QueueMetricsFamilies::register(&mut registry);
        let metrics = families.for_queue("replicaset");
        metrics.adds.inc();
        metrics.retries.inc();
        metrics.depth.set(3);
        metrics.queue_duration.observe(0.5);
        metrics.work_duration.observe(0.05);
        metrics.unfinished_work.set(1.5);
        metrics.longest_running.set(1.0);
        let text = exposed(&registry);
        for line in [
            "workqueue_depth{name=\"replicaset\"} 3",
            "workqueue_adds_total{name=\"replicaset\"} 1",
            "workqueue_retries_total{name=\"replicaset\"} 1",
            "workqueue_queue_duration_seconds_count{name=\"replicaset\"} 1",
            "workqueue_queue_duration_seconds_bucket{le=\"1.0\",name=\"replicaset\"} 1",
            "workqueue_work_duration_seconds_count{name=\"replicaset\"} 1",
            "workqueue_unfinished_work_seconds{name=\"replicaset\"} 1.5",
            "workqueue_longest_running_processor_seconds{name=\"replicaset\"} 1.0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }

    #[test]
    fn latency_buckets_run_from_ten_nanoseconds_to_ten_seconds() {
        let mut registry = Registry::default();
        let families = QueueMetricsFamilies::register(&mut registry);
        families.for_queue("job").work_duration.observe(1.0);
        let text = exposed(&registry);
        let bounds: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("workqueue_work_duration_seconds_bucket"))
            .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(bounds.len(), 11, "{bounds:?}");
        assert_eq!(bounds.first(), Some(&"1e-8"), "{bounds:?}");
        assert_eq!(bounds[9], "10.0", "{bounds:?}");
        assert_eq!(bounds[10], "+Inf");
    }

    #[test]
    fn two_handles_for_one_queue_share_their_series() {
        let families = QueueMetricsFamilies::default();
        families.for_queue("job").adds.inc();
        families.for_queue("job").adds.inc();
        assert_eq!(families.for_queue("job").adds(), 2);
        assert_eq!(families.for_queue("cronjob").adds(), 0);
    }
}
