//! The `cronjob` controller (upstream `pkg/controller/cronjob`, `cronjob_controllerv2.go` and
//! `utils.go`): starts a CronJob's Job at each time its schedule names (five cron fields or a macro,
//! in `spec.timeZone`), honouring `startingDeadlineSeconds`, `concurrencyPolicy` and `suspend`;
//! keeps `status.active`, `lastScheduleTime` and `lastSuccessfulTime` in line with the Jobs it
//! controls, and deletes the oldest finished Jobs beyond the history limits. A reconcile ends with
//! a requeue-after for the next start time (the fleet's AddAfter), never a poll; the Jobs it
//! controls are shipped with each item and their events enqueue it.
//!
//! # Test-only time compression
//!
//! Schedules are minute-grained, and end-to-end tests must not wait real minutes. The hidden
//! worker flag `--cronjob-minute <duration>` (default `60s`) sets how long one schedule minute lasts
//! (see [`ScheduleClock`]): at `1s`, `*/1 * * * *` fires every second. Everything the controller
//! writes is then in the sped-up schedule time (Job names, `lastScheduleTime`, the
//! scheduled-timestamp annotation), so it is for tests only. At the default the schedule clock is
//! the wall clock and production behaviour is exactly upstream's.

mod clock;
#[cfg(test)]
mod fuzz_tests;
mod jobs;
mod policy;
mod reconcile;
mod schedule;
mod timing;

use std::sync::Arc;

use flotilla_sdk::Controller;
use flotilla_sdk::k8s_openapi::api::batch::v1::{CronJob, Job};

pub use clock::{ClockError, REAL_MINUTE, ScheduleClock};

/// The controller, named `name` (the registry's `cronjob`), on `clock`, as the worker runs it: the
/// Jobs a CronJob controls are shipped with each item and their events enqueue it.
pub fn controller(name: &str, clock: ScheduleClock) -> Controller<CronJob> {
    let clock = Arc::new(clock);
    Controller::<CronJob>::new(name)
        .owns::<Job>()
        .prefetch_owned::<Job>()
        .reconcile(move |request, ctx| reconcile::reconcile(request, ctx, Arc::clone(&clock)))
}
