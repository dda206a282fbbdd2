//! The coordinator's own metrics (the workqueue's are in `queue::metrics`, under client-go's names).

use flotilla_common::{LogLimiter, Verdict};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label of per-controller series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// Controller name.
    pub controller: String,
}

/// Label of outcome series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// Controller name.
    pub controller: String,
    /// success, requeue_after or error.
    pub outcome: String,
}

/// Label of reason series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why.
    pub reason: String,
}

/// Label of per-worker series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkerLabel {
    /// Worker id.
    pub worker: String,
}

/// Label of client-go's leader-election series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ElectionLabel {
    /// The election's name: the fleet.
    pub name: String,
}

/// Metrics of the fleet core; cheap to clone.
#[derive(Clone, Default)]
pub struct FleetMetrics {
    /// Items sent to workers.
    pub assigned: Family<ControllerLabel, Counter>,
    /// Items reported done, by outcome.
    pub done: Family<OutcomeLabel, Counter>,
    /// Refused peer input, by reason (garbled message, unknown item, stale term, bad identity, …).
    pub bad_input: Family<ReasonLabel, Counter>,
    /// Items taken back from workers without a Done, by reason (lease expired, not held at reconnect).
    pub reclaimed: Family<ReasonLabel, Counter>,
    /// Shards that changed owner.
    pub shard_moves: Counter,
    /// Keys held for read-your-writes right now.
    pub ryw_holds: Gauge,
    /// Holds placed: a Done reported writes the cache had not shown yet.
    pub ryw_held: Counter,
    /// Holds released, by observing the writes or by the bound (those also count in `ryw_expired`).
    pub ryw_released: Counter,
    /// Holds released by the bound rather than by observing the writes.
    pub ryw_expired: Counter,
    /// 1 while this process leads.
    pub is_leader: Gauge,
    /// The current term (0 when following).
    pub term: Gauge,
    /// Terms this process started leading: leadership transitions to it.
    pub terms_started: Counter,
    /// client-go's `leader_election_master_status{name}`: 1 while leading the fleet `name`.
    pub master_status: Family<ElectionLabel, Gauge>,
    /// Items each worker holds now (sent, no Done yet); the leader's view, updated every dispatcher tick.
    pub worker_in_flight: Family<WorkerLabel, Gauge>,
    /// Credits each worker has granted that the leader has not spent yet (what it may still be sent).
    pub worker_credits: Family<WorkerLabel, Gauge>,
    /// Terms this process led that ended, by why: `shutdown`, `lease_lost`, `error` (an etcd or
    /// dispatcher error), `panic` (the dispatcher task panicked), `ended`.
    pub terms_ended: Family<ReasonLabel, Counter>,
    /// Keys routed to a worker but not yet sent, plus keys parked on moving or unowned shards.
    pub backlog: Gauge,
    /// Controllers retired because no live worker ran them.
    pub retired: Counter,
    /// Write intents of traced reconciles the leader did not link, by why: `garbled` (unreadable),
    /// `unknown_resource` (no informer watches it), `table_full` (the oldest made room), `expired`
    /// (no watch event on the object within the bound).
    pub write_intents_dropped: Family<ReasonLabel, Counter>,
    /// Which refusals get a log line (shared by every clone).
    pub log_limiter: LogLimiter,
}

impl FleetMetrics {
    /// Registers every family in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "flotilla_dispatch_assigned",
            "Items sent to workers",
            m.assigned.clone(),
        );
        registry.register(
            "flotilla_dispatch_done",
            "Items reported done, by outcome",
            m.done.clone(),
        );
        registry.register(
            "flotilla_bad_input",
            "Refused peer input, by reason",
            m.bad_input.clone(),
        );
        registry.register(
            "flotilla_dispatch_reclaimed",
            "Items taken back from workers without a Done, by reason",
            m.reclaimed.clone(),
        );
        registry.register(
            "flotilla_shard_moves",
            "Shards that changed owner",
            m.shard_moves.clone(),
        );
        registry.register(
            "flotilla_read_your_writes_holds",
            "Keys held until their writes are observed",
            m.ryw_holds.clone(),
        );
        registry.register(
            "flotilla_read_your_writes_held",
            "Keys held until their writes are observed (holds placed)",
            m.ryw_held.clone(),
        );
        registry.register(
            "flotilla_read_your_writes_released",
            "Read-your-writes holds released, by observation or by the time bound",
            m.ryw_released.clone(),
        );
        registry.register(
            "flotilla_read_your_writes_expired",
            "Read-your-writes holds released by the time bound",
            m.ryw_expired.clone(),
        );
        registry.register(
            "flotilla_is_leader",
            "1 while this coordinator leads",
            m.is_leader.clone(),
        );
        registry.register(
            "flotilla_leader_term",
            "The term this coordinator leads",
            m.term.clone(),
        );
        registry.register(
            "flotilla_leader_terms_started",
            "Terms this coordinator started leading (leadership transitions to it)",
            m.terms_started.clone(),
        );
        registry.register(
            // client-go's name, so kube-controller-manager's leader-election panels apply.
            "leader_election_master_status",
            "1 while this coordinator leads the election `name` (the fleet), 0 otherwise",
            m.master_status.clone(),
        );
        registry.register(
            "flotilla_dispatch_in_flight",
            "Items each worker holds (sent, not yet done), as the leader sees it",
            m.worker_in_flight.clone(),
        );
        registry.register(
            "flotilla_dispatch_credits",
            "Unspent credits each worker granted the leader",
            m.worker_credits.clone(),
        );
        registry.register(
            "flotilla_controllers_retired",
            "Controllers retired because no live worker ran them",
            m.retired.clone(),
        );
        registry.register(
            "flotilla_leader_terms_ended",
            "Terms this coordinator led that ended, by reason",
            m.terms_ended.clone(),
        );
        // Every reason from the start, so a failover alert has a series to compare against.
        for reason in ["shutdown", "lease_lost", "error", "panic", "ended"] {
            let _ = m.terms_ended.get_or_create(&ReasonLabel {
                reason: reason.into(),
            });
        }
        registry.register(
            "flotilla_trace_write_intents_dropped",
            "Write intents of traced reconciles not linked to a watch event, by reason",
            m.write_intents_dropped.clone(),
        );
        registry.register(
            "flotilla_dispatch_backlog",
            "Keys routed but not yet sent",
            m.backlog.clone(),
        );
        m
    }

    /// client-go's leader-election gauge of the fleet `fleet`.
    pub fn master_status(&self, fleet: &str) -> Gauge {
        self.master_status
            .get_or_create(&ElectionLabel {
                name: fleet.to_owned(),
            })
            .clone()
    }

    /// Counts `n` write intents dropped for `reason` (see [`FleetMetrics::write_intents_dropped`]).
    pub fn intents_dropped(&self, reason: &str, n: u64) {
        if n > 0 {
            self.write_intents_dropped
                .get_or_create(&ReasonLabel {
                    reason: reason.to_owned(),
                })
                .inc_by(n);
        }
    }

    /// Counts one refused input.
    pub fn bad(&self, reason: &str) {
        self.bad_by(reason, 1);
    }

    /// Counts `n` bad inputs of one reason.
    pub fn bad_by(&self, reason: &str, n: usize) {
        self.bad_input
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc_by(n as u64);
    }

    /// Counts one refused input of `peer` (a worker id or an address) and says whether it deserves a log
    /// line: the count is exact, the lines are limited per peer and reason (see [`LogLimiter`]), so a
    /// peer cannot flood the log.
    pub fn refused(&self, peer: &str, reason: &str) -> Verdict {
        self.bad(reason);
        self.log_limiter
            .check(peer, reason, std::time::Instant::now())
    }
}
