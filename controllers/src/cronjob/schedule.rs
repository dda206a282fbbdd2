//! A CronJob's schedule as upstream's `cron.ParseStandard` reads it: five fields (minute, hour, day
//! of month, month, day of week), the `@yearly` … `@hourly` macros and `@every <duration>`, in
//! `spec.timeZone` (UTC when unset) or in a `TZ=`/`CRON_TZ=` prefix, which upstream still honours
//! (with a warning Event) on CronJobs created before kube-apiserver started refusing it.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Why a schedule or a time zone cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    /// `spec.timeZone` (or a `TZ=` prefix) names no zone of the IANA database.
    #[error("unknown time zone {0}")]
    UnknownTimeZone(String),
    /// Not five fields, an unknown macro, or a field croner refuses.
    #[error("{0}")]
    Unparseable(String),
}

/// A parsed schedule: the instants it fires at, in schedule time (see [`super::clock`]).
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// Five fields evaluated on the wall clock of a zone.
    Cron { cron: Box<Cron>, zone: Tz },
    /// `@every <duration>`: a fixed period, in whole seconds (at least one), from any instant.
    Every(i64),
}

/// The zone `spec.timeZone` names; UTC when unset (upstream uses kube-controller-manager's local
/// zone, which its images set to UTC).
///
/// # Errors
/// [`ScheduleError::UnknownTimeZone`].
pub fn zone(name: Option<&str>) -> Result<Tz, ScheduleError> {
    match name {
        None | Some("") => Ok(Tz::UTC),
        Some(name) => {
            Tz::from_str(name).map_err(|_| ScheduleError::UnknownTimeZone(name.to_owned()))
        }
    }
}

/// Whether the schedule carries a `TZ=`/`CRON_TZ=` prefix (upstream's test: it contains "TZ"),
/// which earns an `UnsupportedSchedule` warning.
pub fn has_zone_prefix(schedule: &str) -> bool {
    schedule.contains("TZ")
}

impl Schedule {
    /// Parses `schedule` to be evaluated in `default_zone` unless it names its own.
    ///
    /// # Errors
    /// [`ScheduleError`] for an unknown prefix zone or an unparseable schedule.
    pub fn parse(schedule: &str, default_zone: Tz) -> Result<Self, ScheduleError> {
        let schedule = schedule.trim();
        let (zone, spec) = match schedule
            .strip_prefix("CRON_TZ=")
            .or_else(|| schedule.strip_prefix("TZ="))
        {
            Some(rest) => {
                let (name, spec) = rest.split_once(char::is_whitespace).ok_or_else(|| {
                    ScheduleError::Unparseable(format!("missing spec after timezone: {schedule}"))
                })?;
                (zone(Some(name))?, spec.trim())
            }
            None => (default_zone, schedule),
        };
        if let Some(period) = spec.strip_prefix("@every ") {
            return every(period.trim());
        }
        let fields = match spec {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            macro_ if macro_.starts_with('@') => {
                return Err(ScheduleError::Unparseable(format!(
                    "unrecognized descriptor: {macro_}"
                )));
            }
            fields => fields,
        };
        let parts: Vec<&str> = fields.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(ScheduleError::Unparseable(format!(
                "expected exactly 5 fields, found {}: {fields}",
                parts.len()
            )));
        }
        // robfig/cron (upstream's parser) requires both the day of month and the day of week to
        // match when either starts with `*` or `?` (`*/2` too), and either one otherwise; croner
        // ORs them unless told to AND, and treats only a bare `*` as a wildcard.
        let star = |field: &str| field.starts_with('*') || field.starts_with('?');
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .dom_and_dow(star(parts[2]) || star(parts[4]))
            .build()
            .parse(fields)
            .map_err(|err| ScheduleError::Unparseable(err.to_string()))?;
        Ok(Self {
            kind: Kind::Cron {
                cron: Box::new(cron),
                zone,
            },
        })
    }

    /// The first instant the schedule fires strictly after `after` (whole seconds, as robfig's
    /// `Next`); `None` when it never fires again (e.g. `0 0 30 2 *`).
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        let whole = Timestamp::from_second(after.as_second()).ok()?;
        match &self.kind {
            Kind::Every(period) => whole.checked_add(SignedDuration::from_secs(*period)).ok(),
            Kind::Cron { cron, zone } => {
                let utc: DateTime<Utc> = DateTime::from_timestamp(whole.as_second(), 0)?;
                let local = zone.from_utc_datetime(&utc.naive_utc());
                let next = cron.find_next_occurrence(&local, false).ok()?;
                Timestamp::from_second(next.timestamp()).ok()
            }
        }
    }
}

/// `@every <duration>` in Go's duration syntax (`90s`, `1h30m`, `500ms`), rounded to whole
/// seconds and at least one, as robfig's `Every`.
fn every(period: &str) -> Result<Schedule, ScheduleError> {
    let bad = || ScheduleError::Unparseable(format!("failed to parse duration @every {period}"));
    let mut nanos: f64 = 0.0;
    let mut rest = period;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(number_end);
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        nanos += value * scale;
        rest = tail;
    }
    // robfig truncates below a second to one second and keeps whole seconds otherwise.
    let secs = ((nanos / 1e9).trunc() as i64).max(1);
    Ok(Schedule {
        kind: Kind::Every(secs),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

    fn next(schedule: &str, zone_name: Option<&str>, after: &str) -> Timestamp {
        Schedule::parse(schedule, zone(zone_name).unwrap())
            .unwrap()
            .next(t(after))
            .unwrap()
    }

    #[test]
    fn every_minute_fires_at_the_next_whole_minute_strictly_after() {
        assert_eq!(
            next("*/1 * * * *", None, "2026-11-26T10:05:33Z"),
            t("2026-11-26T10:06:00Z")
        );
        assert_eq!(
            next("*/1 * * * *", None, "2026-11-26T10:06:00Z"),
            t("2026-11-26T10:07:00Z")
        );
        assert_eq!(
            next("*/1 * * * *", None, "2026-11-26T10:06:00.5Z"),
            t("2026-11-26T10:07:00Z")
        );
    }

    #[test]
    fn the_macros_mean_what_robfig_cron_makes_of_them() {
        let after = "2026-11-26T10:05:33Z"; // a Thursday
        assert_eq!(next("@hourly", None, after), t("2026-11-26T11:00:00Z"));
        assert_eq!(next("@daily", None, after), t("2026-11-27T00:00:00Z"));
        assert_eq!(next("@midnight", None, after), t("2026-11-27T00:00:00Z"));
        assert_eq!(next("@weekly", None, after), t("2026-11-29T00:00:00Z"));
        assert_eq!(next("@monthly", None, after), t("2026-12-01T00:00:00Z"));
        assert_eq!(next("@yearly", None, after), t("2027-01-01T00:00:00Z"));
        assert_eq!(next("@annually", None, after), t("2027-01-01T00:00:00Z"));
        assert_eq!(next("@every 90s", None, after), t("2026-11-26T10:07:03Z"));
    }

    #[test]
    fn a_time_zone_moves_the_wall_clock_the_fields_are_read_on() {
        // 09:00 in Berlin is 08:00 UTC in winter.
        assert_eq!(
            next("0 9 * * *", Some("Europe/Berlin"), "2026-11-26T10:05:33Z"),
            t("2026-11-27T08:00:00Z")
        );
        assert_eq!(
            next(
                "0 9 * * *",
                Some("America/New_York"),
                "2026-11-26T10:05:33Z"
            ),
            t("2026-11-26T14:00:00Z")
        );
    }

    #[test]
    fn a_tz_prefix_names_the_zone_and_wins_over_the_default() {
        assert!(has_zone_prefix("CRON_TZ=Asia/Tokyo 0 9 * * *"));
        assert!(!has_zone_prefix("0 9 * * *"));
        for prefixed in ["CRON_TZ=Asia/Tokyo 0 9 * * *", "TZ=Asia/Tokyo 0 9 * * *"] {
            let schedule = Schedule::parse(prefixed, zone(Some("Europe/Berlin")).unwrap()).unwrap();
            assert_eq!(
                schedule.next(t("2026-11-26T10:05:33Z")).unwrap(),
                t("2026-11-27T00:00:00Z")
            );
        }
        assert_eq!(
            Schedule::parse("TZ=Mars/Olympus 0 9 * * *", Tz::UTC).unwrap_err(),
            ScheduleError::UnknownTimeZone("Mars/Olympus".into())
        );
    }

    #[test]
    fn unknown_zones_macros_and_field_counts_are_refused() {
        assert_eq!(
            zone(Some("Nowhere/City")).unwrap_err().to_string(),
            "unknown time zone Nowhere/City"
        );
        assert_eq!(zone(None).unwrap(), Tz::UTC);
        assert!(Schedule::parse("@fortnightly", Tz::UTC).is_err());
        assert!(Schedule::parse("* * * *", Tz::UTC).is_err());
        assert!(Schedule::parse("0 * * * * *", Tz::UTC).is_err());
        assert!(Schedule::parse("61 * * * *", Tz::UTC).is_err());
    }

    #[test]
    fn day_of_month_and_day_of_week_combine_as_in_robfig_cron() {
        // Both restricted: either matches (the 1st, or a Monday).
        assert_eq!(
            next("0 0 1 * 1", None, "2026-11-26T10:00:00Z"),
            t("2026-11-30T00:00:00Z")
        );
        // One starts with `*`: both must match (an odd day that is a Monday).
        assert_eq!(
            next("0 0 */2 * 1", None, "2026-11-26T10:00:00Z"),
            t("2026-12-07T00:00:00Z")
        );
    }

    #[test]
    fn a_schedule_that_never_fires_has_no_next_time() {
        let schedule = Schedule::parse("0 0 30 2 *", Tz::UTC).unwrap();
        assert_eq!(schedule.next(t("2026-11-26T10:00:00Z")), None);
    }
}
