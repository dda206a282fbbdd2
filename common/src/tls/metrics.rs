//! How many certificate reloads failed, and why: `flotilla_tls_reload_failures_total{reason}`.
//!
//! One family per process, shared by every reloading certificate it holds (a coordinator has one, a
//! worker one per connector): a process-wide handle spares threading a metrics argument through each
//! `ServerTls::load` / `ClientTls::load`. Reloads count whether or not the family is registered.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Label of the failures.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabel {
    /// `not_regular_file` (a FIFO, a device…), `timed_out` (the files could not be read within
    /// `RELOAD_TIMEOUT`) or `invalid` (unreadable, not PEM, a key that does not fit).
    pub(super) reason: &'static str,
}

/// The process's reload failures.
pub(super) static RELOAD_FAILURES: LazyLock<Family<ReasonLabel, Counter>> =
    LazyLock::new(Family::default);

/// Counts one failed reload.
pub(super) fn reload_failed(reason: &'static str) {
    RELOAD_FAILURES.get_or_create(&ReasonLabel { reason }).inc();
}

/// Registers `flotilla_tls_reload_failures_total{reason}` in `registry`. Call it once per registry.
pub fn register_tls_metrics(registry: &mut Registry) {
    registry.register(
        "flotilla_tls_reload_failures",
        "Certificate reloads that failed (the previous certificate stays in use), by reason",
        RELOAD_FAILURES.clone(),
    );
}
