//! What the built-in controllers take besides their concurrency: kube-controller-manager's flags of
//! the same names, which `flotilla worker` passes on through [`crate::Builtin::controller_with`].

use std::time::Duration;

use crate::cronjob::{ClockError, REAL_MINUTE, ScheduleClock};
use crate::podgc::DEFAULT_TERMINATED_POD_GC_THRESHOLD;

/// Settings of the built-in controllers, each named and defaulted like the kube-controller-manager
/// flag it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// `--terminated-pod-gc-threshold` (default 12500): how many terminated pods may exist before the
    /// `podgc` controller deletes the oldest; 0 or less keeps them all, as upstream.
    pub terminated_pod_gc_threshold: i32,
    /// `--cronjob-minute` (default 60s; hidden, for tests only, no kube-controller-manager
    /// counterpart): how long one schedule minute of the `cronjob` controller lasts, so end-to-end
    /// tests see minute-grained schedules fire within seconds. At the default the controller runs
    /// on the wall clock, exactly as upstream.
    pub cronjob_minute: Duration,
}

/// Why settings are refused at start-up.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// `--cronjob-minute` is outside 1ms ..= 60s.
    #[error("invalid --cronjob-minute")]
    CronjobMinute(#[source] ClockError),
}

impl Settings {
    /// Checks the settings once, at start-up, so a bad flag stops the worker instead of being
    /// replaced by a default later.
    ///
    /// # Errors
    /// [`SettingsError`] naming the first bad flag.
    pub fn validate(&self) -> Result<(), SettingsError> {
        ScheduleClock::with_minute(self.cronjob_minute).map_err(SettingsError::CronjobMinute)?;
        Ok(())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            terminated_pod_gc_threshold: DEFAULT_TERMINATED_POD_GC_THRESHOLD,
            cronjob_minute: REAL_MINUTE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_a_zero_cronjob_minute_is_not() {
        assert_eq!(Settings::default().validate(), Ok(()));
        let zero = Settings {
            cronjob_minute: Duration::ZERO,
            ..Settings::default()
        };
        assert!(matches!(
            zero.validate(),
            Err(SettingsError::CronjobMinute(_))
        ));
    }
}
