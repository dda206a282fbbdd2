//! Whether a due start time is acted on (upstream `syncCronJob` after `nextScheduleTime`): too late
//! for `startingDeadlineSeconds`, already started, held back by `concurrencyPolicy: Forbid`, or
//! started (replacing the active Jobs under `Replace`). A pure function.

use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

/// `spec.concurrencyPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Runs may overlap (the default).
    Allow,
    /// A run is skipped while another is active.
    Forbid,
    /// The active runs are deleted to make way for the new one.
    Replace,
}

impl Concurrency {
    /// The policy `spec.concurrencyPolicy` names; anything but `Forbid` and `Replace` allows, as
    /// upstream (kube-apiserver refuses other values anyway).
    pub fn from_spec(policy: Option<&str>) -> Self {
        match policy {
            Some("Forbid") => Self::Forbid,
            Some("Replace") => Self::Replace,
            _ => Self::Allow,
        }
    }
}

/// What the CronJob's state says about the start time that is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The start time.
    pub scheduled: Timestamp,
    /// Schedule time now.
    pub now: Timestamp,
    /// `spec.startingDeadlineSeconds`.
    pub starting_deadline: Option<i64>,
    /// `spec.concurrencyPolicy`.
    pub concurrency: Concurrency,
    /// `status.lastScheduleTime`.
    pub last_scheduled: Option<Timestamp>,
    /// Whether `status.active` already names this start time's Job.
    pub job_active: bool,
    /// How many Jobs `status.active` lists.
    pub active: usize,
}

/// What to do about a due start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Later than `startingDeadlineSeconds` allows: a `MissSchedule` warning, no Job.
    TooLate,
    /// This start time's Job exists already: nothing.
    AlreadyStarted,
    /// `Forbid` with a Job active: a `JobAlreadyActive` Event, no Job; the run starts late once the
    /// active Job finishes, if the deadline still allows.
    Forbidden,
    /// Start the Job, deleting the active ones first when `replace`.
    Start {
        /// `Replace` with Jobs active.
        replace: bool,
    },
}

/// The decision on `due`, in upstream's order: deadline, already started, Forbid, Replace.
pub fn decide(due: &Due) -> Decision {
    if let Some(deadline) = due.starting_deadline {
        let limit = due
            .scheduled
            .checked_add(SignedDuration::from_secs(deadline))
            .unwrap_or(Timestamp::MAX);
        if limit < due.now {
            return Decision::TooLate;
        }
    }
    if due.job_active || due.last_scheduled == Some(due.scheduled) {
        return Decision::AlreadyStarted;
    }
    match due.concurrency {
        Concurrency::Forbid if due.active > 0 => Decision::Forbidden,
        Concurrency::Replace => Decision::Start {
            replace: due.active > 0,
        },
        _ => Decision::Start { replace: false },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn due(concurrency: Concurrency, active: usize) -> Due {
        Due {
            scheduled: t(0),
            now: t(5),
            starting_deadline: None,
            concurrency,
            last_scheduled: Some(t(-60)),
            job_active: false,
            active,
        }
    }

    #[test]
    fn allow_starts_whatever_is_active() {
        let start = Decision::Start { replace: false };
        assert_eq!(decide(&due(Concurrency::Allow, 0)), start);
        assert_eq!(decide(&due(Concurrency::Allow, 3)), start);
    }

    #[test]
    fn forbid_holds_back_while_a_job_is_active_and_starts_once_none_is() {
        assert_eq!(decide(&due(Concurrency::Forbid, 1)), Decision::Forbidden);
        assert_eq!(
            decide(&due(Concurrency::Forbid, 0)),
            Decision::Start { replace: false }
        );
    }

    #[test]
    fn replace_deletes_the_active_jobs_only_when_there_are_some() {
        assert_eq!(
            decide(&due(Concurrency::Replace, 2)),
            Decision::Start { replace: true }
        );
        assert_eq!(
            decide(&due(Concurrency::Replace, 0)),
            Decision::Start { replace: false }
        );
    }

    #[test]
    fn a_start_time_already_recorded_or_with_its_job_active_is_not_started_twice() {
        let mut recorded = due(Concurrency::Allow, 0);
        recorded.last_scheduled = Some(t(0));
        assert_eq!(decide(&recorded), Decision::AlreadyStarted);
        let mut active = due(Concurrency::Allow, 1);
        active.job_active = true;
        assert_eq!(decide(&active), Decision::AlreadyStarted);
    }

    #[test]
    fn a_start_later_than_the_starting_deadline_is_missed_even_under_forbid() {
        let mut late = due(Concurrency::Forbid, 1);
        late.starting_deadline = Some(4);
        assert_eq!(decide(&late), Decision::TooLate);
        late.starting_deadline = Some(5);
        assert_eq!(
            decide(&late),
            Decision::Forbidden,
            "exactly at the deadline is in time"
        );
    }

    #[test]
    fn unknown_policies_allow_as_upstream() {
        assert_eq!(Concurrency::from_spec(None), Concurrency::Allow);
        assert_eq!(Concurrency::from_spec(Some("Forbid")), Concurrency::Forbid);
        assert_eq!(
            Concurrency::from_spec(Some("Replace")),
            Concurrency::Replace
        );
        assert_eq!(
            Concurrency::from_spec(Some("Sometimes")),
            Concurrency::Allow
        );
    }
}
