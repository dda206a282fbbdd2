//! The leader's per-worker gauges (`flotilla_dispatch_in_flight{worker}`, `flotilla_dispatch_credits{worker}`),
//! refreshed on the dispatcher's periodic tick rather than on every send and Done, so the per-item path
//! stays free of label hashing.

use super::Dispatcher;
use crate::metrics::WorkerLabel;

impl Dispatcher {
    /// Sets both gauges for every worker this term knows and drops the series of workers it no longer
    /// knows. A scrape taken between the two steps may miss a departing worker's last value: the gauges
    /// are a view, never an input to a decision.
    pub(super) fn publish_worker_gauges(&self) {
        let metrics = &self.ctx.metrics;
        metrics.worker_in_flight.clear();
        metrics.worker_credits.clear();
        for w in self.membership.iter() {
            let label = WorkerLabel {
                worker: w.id.clone(),
            };
            metrics
                .worker_in_flight
                .get_or_create(&label)
                .set(i64::from(w.in_flight_total()));
            let credits: u64 = w.credits.values().map(|c| u64::from(*c)).sum();
            metrics
                .worker_credits
                .get_or_create(&label)
                .set(i64::try_from(credits).unwrap_or(i64::MAX));
        }
    }
}
