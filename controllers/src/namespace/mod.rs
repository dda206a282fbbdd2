//! The `namespace` controller: a deleted namespace (deletionTimestamp set, `kubernetes` still in
//! `spec.finalizers`) has all its content deleted, the progress reported in its status conditions, and
//! is then finalized so the API server removes it (upstream `pkg/controller/namespace`).
//!
//! It lists and deletes through the API, not the fleet's cache: it must reach every namespaced kind the
//! server serves, custom resources included, not just the kinds someone keeps an informer for.

mod conditions;
mod content;
mod discovery;
mod finalize;
mod reconcile;
mod tally;

use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::Namespace;

use flotilla_sdk::Controller;

/// kube-controller-manager's `--namespace-sync-period`: every namespace is looked at again this
/// often, so a deletion that stalled on something nobody announces (a discovery failure that went away)
/// still finishes.
pub const SYNC_PERIOD: Duration = Duration::from_secs(5 * 60);

/// The controller, named `name` (the registry's `namespace`), as the worker runs it: keys are
/// namespaces; it needs no informer besides theirs.
pub fn controller(name: &str) -> Controller<Namespace> {
    Controller::<Namespace>::new(name)
        .resync(SYNC_PERIOD)
        .reconcile(reconcile::reconcile)
}
