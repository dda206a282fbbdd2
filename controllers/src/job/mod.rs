//! The `job` controller (upstream `pkg/controller/job`): runs a Job's pods to `completions` successes
//! (NonIndexed or one per index when Indexed) at most `parallelism` at a time, counts every finished
//! pod exactly once through the `batch.kubernetes.io/job-tracking` finalizer, replaces failed pods
//! after an exponential backoff, and ends the Job Complete or Failed (`backoffLimit`,
//! `activeDeadlineSeconds`, a `podFailurePolicy` rule); `suspend` deletes its active pods.
//!
//! An Indexed Job may retry each index on its own (`backoffLimitPerIndex`, `maxFailedIndexes`) and
//! succeed early (`successPolicy`).
//!
//! A Job whose `spec.managedBy` names another controller is left to it, as upstream.

mod adoption;
mod backoff;
mod conditions;
mod failure_policy;
mod indexes;
mod manage;
mod names;
mod per_index;
mod pods;
mod reconcile;
mod spec;
mod status;
mod template;
mod tracking;
mod verdict;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
use flotilla_sdk::k8s_openapi::api::core::v1::Pod;

/// The controller named `name` (the registry's `job`), as the worker runs it: a Job's pods are
/// shipped with each item, and events of pods matching a Job's selector (orphans to adopt) enqueue
/// it too; the cache's pods are read to adopt orphans and to release a deleted Job's finalizers.
pub fn controller(name: &str) -> Controller<Job> {
    Controller::<Job>::new(name)
        .owns::<Pod>()
        .prefetch_owned::<Pod>()
        .watches_selector::<Pod>("spec.selector")
        .reads::<Pod>()
        .reconcile(reconcile::reconcile)
}
