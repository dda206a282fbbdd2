//! The cronjob controller's clock: the wall clock, and how long one schedule minute lasts. In
//! production a minute is a minute and schedule time is wall time; tests shorten the minute (the
//! hidden worker flag `--cronjob-minute`) so minute-grained schedules fire within seconds.

use std::time::Duration;

use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A real minute: production's length of a schedule minute.
pub const REAL_MINUTE: Duration = Duration::from_secs(60);

/// Why a schedule minute is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClockError {
    /// Shorter than a millisecond (zero included): schedule time would race ahead unboundedly.
    #[error("a schedule minute must last at least 1ms, not {0:?}")]
    TooShort(Duration),
    /// Longer than a real minute: nothing needs schedules slower than real time.
    #[error("a schedule minute must last at most 60s, not {0:?}")]
    TooLong(Duration),
}

/// The controller's view of time.
///
/// Schedule time is wall time sped up by `60s / minute`, measured from an anchor that never moves
/// for a CronJob (its `creationTimestamp`), so every reconcile on every worker maps the same wall
/// instant to the same schedule instant. Everything the controller computes and writes about a
/// schedule (`lastScheduleTime`, Job names, the scheduled-timestamp annotation,
/// `startingDeadlineSeconds`) is in schedule time; only the requeue delay is converted back to wall
/// time. With the real minute (the default) the mapping is the identity, and production behaves
/// exactly as upstream.
#[derive(Debug, Clone, Copy)]
pub struct ScheduleClock {
    /// The wall-clock length of one schedule minute; [`REAL_MINUTE`] unless a test shortened it.
    minute: Duration,
    /// The wall clock, injectable so the decisions can be tested at fixed instants.
    now: fn() -> Timestamp,
}

impl Default for ScheduleClock {
    fn default() -> Self {
        Self {
            minute: REAL_MINUTE,
            now: Timestamp::now,
        }
    }
}

impl ScheduleClock {
    /// A clock whose schedule minute lasts `minute` of wall time.
    ///
    /// # Errors
    /// [`ClockError`] outside 1 ms ..= 60 s.
    pub fn with_minute(minute: Duration) -> Result<Self, ClockError> {
        if minute < Duration::from_millis(1) {
            return Err(ClockError::TooShort(minute));
        }
        if minute > REAL_MINUTE {
            return Err(ClockError::TooLong(minute));
        }
        Ok(Self {
            minute,
            ..Self::default()
        })
    }

    /// The same clock reading the wall time from `now` (tests).
    #[cfg(test)]
    pub fn reading(self, now: fn() -> Timestamp) -> Self {
        Self { now, ..self }
    }

    /// Schedule time now, for a CronJob anchored at `anchor`.
    pub fn now(&self, anchor: Timestamp) -> Timestamp {
        self.schedule_time((self.now)(), anchor)
    }

    /// The schedule instant of the wall instant `wall`.
    pub fn schedule_time(&self, wall: Timestamp, anchor: Timestamp) -> Timestamp {
        if self.minute == REAL_MINUTE {
            return wall;
        }
        let elapsed = wall.as_nanosecond() - anchor.as_nanosecond();
        let scaled = elapsed * REAL_MINUTE.as_nanos() as i128 / self.minute.as_nanos() as i128;
        i64::try_from(scaled)
            .ok()
            .and_then(|nanos| anchor.checked_add(SignedDuration::from_nanos(nanos)).ok())
            .unwrap_or(if scaled > 0 {
                Timestamp::MAX
            } else {
                Timestamp::MIN
            })
    }

    /// The wall-clock delay of the schedule-time delay `delay` (negative delays are none).
    pub fn wall_delay(&self, delay: SignedDuration) -> Duration {
        let delay = Duration::try_from(delay).unwrap_or(Duration::ZERO);
        if self.minute == REAL_MINUTE {
            return delay;
        }
        let nanos = delay.as_nanos() * self.minute.as_nanos() / REAL_MINUTE.as_nanos();
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn the_real_minute_maps_wall_time_to_itself() {
        let clock = ScheduleClock::default();
        assert_eq!(clock.schedule_time(at(12345), at(0)), at(12345));
        assert_eq!(
            clock.wall_delay(SignedDuration::from_secs(90)),
            Duration::from_secs(90)
        );
    }

    #[test]
    fn a_one_second_minute_makes_each_wall_second_a_schedule_minute_from_the_anchor() {
        let clock = ScheduleClock::with_minute(Duration::from_secs(1)).unwrap();
        assert_eq!(clock.schedule_time(at(0), at(0)), at(0));
        assert_eq!(clock.schedule_time(at(3), at(0)), at(180));
        assert_eq!(
            clock.wall_delay(SignedDuration::from_secs(120)),
            Duration::from_secs(2)
        );
        assert_eq!(
            clock.wall_delay(SignedDuration::from_secs(-5)),
            Duration::ZERO,
            "past instants are due now"
        );
    }

    #[test]
    fn minutes_outside_a_millisecond_to_a_minute_are_refused() {
        assert_eq!(
            ScheduleClock::with_minute(Duration::ZERO).unwrap_err(),
            ClockError::TooShort(Duration::ZERO)
        );
        let long = Duration::from_secs(61);
        assert_eq!(
            ScheduleClock::with_minute(long).unwrap_err(),
            ClockError::TooLong(long)
        );
    }

    #[test]
    fn the_injected_wall_clock_is_the_one_read() {
        let clock = ScheduleClock::with_minute(Duration::from_millis(500))
            .unwrap()
            .reading(|| Timestamp::from_second(1_800_000_010).unwrap());
        assert_eq!(clock.now(at(0)), at(1200));
    }
}
