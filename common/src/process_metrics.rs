//! The standard Prometheus process metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_open_fds`, …) under client_golang's names, so kube-controller-manager's dashboards and alerts
//! apply to a Flotilla process as they are.
//!
//! prometheus-client has no process collector. The values are read on each scrape by the `metrics-process`
//! crate (`procfs` on Linux, the platform APIs elsewhere; a port of client_golang's collector), used
//! without its `metrics` facade: this file only turns its snapshot into prometheus-client descriptors.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Registers the process collector in `registry` (the root registry: a prefix would change the standard
/// names). Call it once per registry.
pub fn register_process_metrics(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

/// Reads the running process's metrics on every scrape.
#[derive(Debug)]
struct ProcessCollector;

/// A gauge in whole units; a value the platform does not report is left out rather than shown as 0.
fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<u64>,
) -> Result<(), std::fmt::Error> {
    let Some(value) = value else { return Ok(()) };
    let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    gauge.encode(metric)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = metrics_process::collector::collect();
        if let Some(cpu) = m.cpu_seconds_total {
            let counter = ConstCounter::new(cpu);
            // prometheus-client appends `_total` to counters.
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            m.resident_memory_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            m.virtual_memory_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            m.open_fds,
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors (0: unlimited)",
            m.max_fds,
        )?;
        gauge(
            &mut encoder,
            "process_threads",
            "Number of OS threads in the process",
            m.threads,
        )?;
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            m.start_time_seconds,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_shows_this_process_s_cpu_memory_and_file_descriptors() {
        let mut registry = Registry::default();
        register_process_metrics(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_threads ",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(name)),
                "{name}missing:\n{text}"
            );
        }
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(rss > 0.0, "{text}");
    }
}
