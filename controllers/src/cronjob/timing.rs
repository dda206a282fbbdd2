//! When a CronJob should have started last and when it starts next (upstream
//! `mostRecentScheduleTime`, `nextScheduleTime`, `nextScheduleTimeDuration`): pure functions of the
//! schedule, the CronJob's creation and last schedule times and the time now, all in schedule time.

use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::schedule::Schedule;

/// More missed start times than this earn a `TooManyMissedTimes` warning (upstream's "somewhat
/// arbitrarily picked 100, as more than 80, but less than lots"); only the latest is started.
pub const MANY_MISSED: i64 = 100;

/// Added to each requeue so the key comes back just after the scheduled instant, never just
/// before it (upstream's `nextScheduleDelta`).
pub const NEXT_SCHEDULE_DELTA: SignedDuration = SignedDuration::from_millis(100);

/// Why the schedule cannot be followed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingError {
    /// Two consecutive start times less than a second apart: a schedule that the cron library
    /// accepted but that cannot fire (upstream's guard against e.g. `59 23 31 2 *`).
    #[error("time difference between two schedules is less than 1 second")]
    TooFrequent,
}

/// What the CronJob's fields that the timing depends on say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    /// `metadata.creationTimestamp`.
    pub created: Timestamp,
    /// `status.lastScheduleTime`.
    pub last_scheduled: Option<Timestamp>,
    /// `spec.startingDeadlineSeconds`.
    pub starting_deadline: Option<i64>,
}

/// How many start times passed unmet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    /// None.
    None,
    /// Some, up to [`MANY_MISSED`].
    Few,
    /// More than [`MANY_MISSED`] (roughly how many).
    Many(i64),
}

/// The most recent unmet start time and how many were missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recent {
    /// The instant counting starts from: the last schedule, else the creation, moved up to
    /// `now - startingDeadlineSeconds` when asked.
    pub earliest: Timestamp,
    /// The latest start time after `earliest` and not after now, if any.
    pub most_recent: Option<Timestamp>,
    /// How many start times passed since `earliest`.
    pub missed: Missed,
}

/// Upstream's `mostRecentScheduleTime`: the latest start time in (earliest, now], counted without
/// walking every missed one (so a clock off by decades costs nothing).
///
/// # Errors
/// [`TimingError::TooFrequent`] for a schedule whose start times are less than a second apart.
pub fn most_recent(
    schedule: &Schedule,
    times: Times,
    now: Timestamp,
    include_deadline: bool,
) -> Result<Recent, TimingError> {
    let mut earliest = times.last_scheduled.unwrap_or(times.created);
    if include_deadline && let Some(deadline) = times.starting_deadline {
        let cutoff = now
            .checked_sub(SignedDuration::from_secs(deadline))
            .unwrap_or(Timestamp::MIN);
        if cutoff > earliest {
            earliest = cutoff;
        }
    }
    let none = |missed| Recent {
        earliest,
        most_recent: None,
        missed,
    };
    let Some(t1) = schedule.next(earliest) else {
        return Ok(none(Missed::None));
    };
    if now < t1 {
        return Ok(none(Missed::None));
    }
    let Some(t2) = schedule.next(t1) else {
        return Ok(Recent {
            earliest,
            most_recent: Some(t1),
            missed: Missed::None,
        });
    };
    if now < t2 {
        return Ok(Recent {
            earliest,
            most_recent: Some(t1),
            missed: Missed::None,
        });
    }
    let period = t2
        .duration_since(t1)
        .round(flotilla_sdk::k8s_openapi::jiff::Unit::Second);
    let period = period.map(|p| p.as_secs()).unwrap_or(0);
    if period < 1 {
        return Err(TimingError::TooFrequent);
    }
    // An estimate from the first interval, as upstream: exact for regular schedules, and the walk
    // below starts one period early to land right on irregular ones (`30 6-16/4 * * 1-5`).
    let elapsed = now.duration_since(t1).as_secs();
    let missed = elapsed / period + 1;
    let back = (missed - 2).saturating_mul(period);
    let mut most_recent = None;
    let mut cursor = t1
        .checked_add(SignedDuration::from_secs(back))
        .unwrap_or(t1);
    while let Some(t) = schedule.next(cursor) {
        if t > now {
            break;
        }
        most_recent = Some(t);
        cursor = t;
    }
    let missed = if missed > MANY_MISSED {
        Missed::Many(missed)
    } else {
        Missed::Few
    };
    Ok(Recent {
        earliest,
        most_recent,
        missed,
    })
}

/// Upstream's `nextScheduleTime`: the start time to act on now, if one is due (with the deadline
/// applied), and how many were missed on the way.
///
/// # Errors
/// [`TimingError`] as [`most_recent`].
pub fn due(
    schedule: &Schedule,
    times: Times,
    now: Timestamp,
) -> Result<(Option<Timestamp>, Missed), TimingError> {
    let recent = most_recent(schedule, times, now, true)?;
    match recent.most_recent {
        Some(t) if t <= now => Ok((Some(t), recent.missed)),
        _ => Ok((None, recent.missed)),
    }
}

/// Upstream's `nextScheduleTimeDuration`: how long from now (in schedule time) until the next
/// start time, plus [`NEXT_SCHEDULE_DELTA`]; `None` when the schedule never fires again.
pub fn until_next(schedule: &Schedule, times: Times, now: Timestamp) -> Option<SignedDuration> {
    let from = match most_recent(schedule, times, now, false) {
        Err(_) => now,
        Ok(Recent {
            most_recent: Some(t),
            ..
        }) => t,
        Ok(Recent {
            earliest,
            missed: Missed::None,
            ..
        }) => earliest,
        Ok(_) => now,
    };
    let next = schedule.next(from)?;
    Some(next.duration_since(now) + NEXT_SCHEDULE_DELTA)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use chrono_tz::Tz;

    use super::*;

    fn t(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

    fn every_minute() -> Schedule {
        Schedule::parse("*/1 * * * *", Tz::UTC).unwrap()
    }

    fn created(at: &str) -> Times {
        Times {
            created: t(at),
            last_scheduled: None,
            starting_deadline: None,
        }
    }

    #[test]
    fn nothing_is_due_before_the_first_start_time_after_creation() {
        let times = created("2026-11-26T10:05:33Z");
        let now = t("2026-11-26T10:05:59Z");
        assert_eq!(due(&every_minute(), times, now), Ok((None, Missed::None)));
        assert_eq!(
            until_next(&every_minute(), times, now),
            Some(SignedDuration::from_millis(1100))
        );
    }

    #[test]
    fn the_first_start_time_is_due_at_its_minute_and_the_next_is_a_minute_later() {
        let times = created("2026-11-26T10:05:33Z");
        let now = t("2026-11-26T10:06:00Z");
        assert_eq!(
            due(&every_minute(), times, now),
            Ok((Some(t("2026-11-26T10:06:00Z")), Missed::None))
        );
        assert_eq!(
            until_next(&every_minute(), times, now),
            Some(SignedDuration::from_millis(60_100))
        );
    }

    #[test]
    fn after_a_last_schedule_only_later_start_times_count() {
        let times = Times {
            last_scheduled: Some(t("2026-11-26T10:06:00Z")),
            ..created("2026-11-26T10:05:33Z")
        };
        let now = t("2026-11-26T10:06:30Z");
        assert_eq!(due(&every_minute(), times, now), Ok((None, Missed::None)));
        assert_eq!(
            until_next(&every_minute(), times, now),
            Some(SignedDuration::from_millis(30_100))
        );
    }

    #[test]
    fn a_few_missed_start_times_yield_only_the_latest() {
        let times = created("2026-11-26T10:00:00Z");
        let now = t("2026-11-26T10:05:30Z");
        assert_eq!(
            due(&every_minute(), times, now),
            Ok((Some(t("2026-11-26T10:05:00Z")), Missed::Few))
        );
    }

    #[test]
    fn more_than_a_hundred_missed_start_times_are_many_and_still_yield_the_latest() {
        let times = created("2026-11-26T10:00:00Z");
        let exactly_100 = t("2026-11-26T11:40:30Z");
        assert_eq!(
            due(&every_minute(), times, exactly_100),
            Ok((Some(t("2026-11-26T11:40:00Z")), Missed::Few))
        );
        let many = t("2026-11-26T11:41:30Z");
        assert_eq!(
            due(&every_minute(), times, many),
            Ok((Some(t("2026-11-26T11:41:00Z")), Missed::Many(101)))
        );
        let decades = t("2056-11-26T10:00:30Z");
        let (latest, missed) = due(&every_minute(), times, decades).unwrap();
        assert_eq!(latest, Some(t("2056-11-26T10:00:00Z")));
        assert!(
            matches!(missed, Missed::Many(n) if n > 15_000_000),
            "{missed:?}"
        );
    }

    #[test]
    fn the_starting_deadline_hides_start_times_older_than_it() {
        let hourly = Schedule::parse("@hourly", Tz::UTC).unwrap();
        let times = Times {
            starting_deadline: Some(600),
            ..created("2026-11-26T09:30:00Z")
        };
        // 10:00 is 20 minutes ago: beyond the deadline, nothing is due.
        let now = t("2026-11-26T10:20:00Z");
        assert_eq!(due(&hourly, times, now), Ok((None, Missed::None)));
        // 5 minutes late is within it.
        let now = t("2026-11-26T10:05:00Z");
        assert_eq!(
            due(&hourly, times, now),
            Ok((Some(t("2026-11-26T10:00:00Z")), Missed::None))
        );
        // Without the deadline the next requeue still aims at the next start time.
        assert_eq!(
            until_next(&hourly, times, t("2026-11-26T10:20:00Z")),
            Some(SignedDuration::from_secs(40 * 60) + NEXT_SCHEDULE_DELTA)
        );
    }

    #[test]
    fn irregular_schedules_land_on_their_true_latest_start_time() {
        let schedule = Schedule::parse("30 6-16/4 * * 1-5", Tz::UTC).unwrap();
        // Created on a Monday early morning; now Wednesday 12:00: the latest is Wed 10:30.
        let times = created("2026-11-23T00:00:00Z");
        let now = t("2026-11-25T12:00:00Z");
        let (latest, missed) = due(&schedule, times, now).unwrap();
        assert_eq!(latest, Some(t("2026-11-25T10:30:00Z")));
        assert_eq!(missed, Missed::Few);
    }
}
