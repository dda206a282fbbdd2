//! Fuzz target (`bolero::check!`) for CronJob schedules: `TZ=`/`CRON_TZ=` prefixes, macros,
//! `@every <duration>` and five-field specs (croner underneath), parsed and evaluated from an
//! arbitrary instant. Under `cargo test` it runs its corpus and a few hundred random inputs; under
//! `cargo bolero test` it runs coverage-guided (README: Tests).
//!
//! Contracts checked: no schedule or instant panics; the next firing is strictly after the instant
//! asked about, and the one after it strictly after that.

use chrono_tz::Tz;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

use super::schedule::{Schedule, has_zone_prefix, zone};

/// Seconds of 9999-12-31T00:00:00Z: instants are taken below it (jiff's range ends in year 9999).
const LAST_SECOND: u64 = 253_402_214_400;

#[test]
fn schedules() {
    bolero::check!()
        .with_iterations(300)
        .for_each(|bytes: &[u8]| {
            // Five bytes of instant, then the schedule; the zone is the schedule's first word when
            // it has a `/` (an IANA name), else UTC.
            let (instant, text) = bytes.split_at(bytes.len().min(5));
            let mut seconds = [0u8; 8];
            seconds[..instant.len()].copy_from_slice(instant);
            let seconds = u64::from_le_bytes(seconds) % LAST_SECOND;
            let Ok(text) = std::str::from_utf8(text) else {
                return;
            };
            let _ = has_zone_prefix(text);
            let default_zone = text
                .split_whitespace()
                .next()
                .filter(|w| w.contains('/'))
                .and_then(|w| zone(Some(w)).ok())
                .unwrap_or(Tz::UTC);
            let Ok(schedule) = Schedule::parse(text, default_zone) else {
                return;
            };
            let Ok(after) = Timestamp::from_second(i64::try_from(seconds).unwrap_or(0)) else {
                return;
            };
            let Some(next) = schedule.next(after) else {
                return;
            };
            assert!(next > after, "{text:?} from {after} fires at {next}");
            if let Some(then) = schedule.next(next) {
                assert!(then > next, "{text:?} from {next} fires at {then}");
            }
        });
}
