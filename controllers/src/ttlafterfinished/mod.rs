//! The `ttl-after-finished` controller: deletes a finished Job (Complete or Failed)
//! `spec.ttlSecondsAfterFinished` seconds after it finished (upstream
//! `pkg/controller/ttlafterfinished`). Keys are Jobs; a Job not yet expired is requeued for exactly the
//! time left (the fleet's AddAfter), never polled. Like upstream it writes no Events.

mod expiry;
mod reconcile;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::batch::v1::Job;

/// The controller, named `name` (the registry's `ttl-after-finished`), as the worker runs it: every
/// Job event reconciles that Job (the reconcile skips those without a TTL or not finished, which
/// upstream's event handlers filter out).
pub fn controller(name: &str) -> Controller<Job> {
    Controller::<Job>::new(name).reconcile(reconcile::reconcile)
}
