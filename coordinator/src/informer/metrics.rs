//! The informers' Prometheus metrics, labelled by kind (`group/version/plural`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    kind: String,
    event: &'static str,
}

/// The metric families of every informer of a process.
#[derive(Debug, Clone, Default)]
pub(crate) struct InformerMetrics {
    errors: Family<KindLabel, Counter>,
    lists: Family<KindLabel, Counter>,
    relists: Family<KindLabel, Counter>,
    watches: Family<KindLabel, Counter>,
    events: Family<EventLabels, Counter>,
    objects: Family<KindLabel, Gauge>,
}

impl InformerMetrics {
    /// Creates the families and registers them in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        // prometheus-client appends `_total` to counters.
        registry.register(
            "flotilla_informer_errors",
            "List/watch failures and objects that could not be cached, per kind",
            metrics.errors.clone(),
        );
        registry.register(
            "flotilla_informer_lists",
            "Lists started (the first and every relist; one per namespace when listed per namespace), per kind",
            metrics.lists.clone(),
        );
        registry.register(
            "flotilla_informer_relists",
            "Lists after the first (410 Gone, a namespace joining the scope), per kind",
            metrics.relists.clone(),
        );
        registry.register(
            "flotilla_informer_watches",
            "Watches started from a completed list, per kind (a watch kube-rs resumes from its last \
             resourceVersion without relisting is not counted)",
            metrics.watches.clone(),
        );
        registry.register(
            "flotilla_informer_events",
            "Cache changes sent to the dispatcher, per kind and event (applied, deleted, synced)",
            metrics.events.clone(),
        );
        registry.register(
            "flotilla_informer_objects",
            "Objects in the cache, per kind",
            metrics.objects.clone(),
        );
        metrics
    }

    pub(crate) fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// A list of `kind` started; `relist` when the part had listed before.
    pub(crate) fn list(&self, kind: &str, relist: bool) {
        let label = KindLabel {
            kind: kind.to_owned(),
        };
        self.lists.get_or_create(&label).inc();
        // Created at the first list, so a kind that never relisted shows 0 rather than nothing.
        let relists = self.relists.get_or_create(&label);
        if relist {
            relists.inc();
        }
    }

    /// A watch of `kind` started from a completed list.
    pub(crate) fn watch(&self, kind: &str) {
        self.watches
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .inc();
    }

    pub(crate) fn event(&self, kind: &str, event: &'static str) {
        self.events
            .get_or_create(&EventLabels {
                kind: kind.to_owned(),
                event,
            })
            .inc();
    }

    pub(crate) fn objects(&self, kind: &str, n: usize) {
        self.objects
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    #[cfg(test)]
    pub(crate) fn errors_of(&self, kind: &str) -> u64 {
        self.errors
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .get()
    }
}
