//! Humane durations for flags of every Flotilla binary: `100ms`, `1s`, `5m`, `1h`, `1m30s`, `0`.

use std::time::Duration;

/// Why a duration flag could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The text is empty.
    #[error("empty duration")]
    Empty,
    /// A number without a unit, or text that is not `<number><unit>...`.
    #[error("invalid duration {0:?}: expected e.g. 100ms, 1s, 5m, 1h or 1m30s")]
    Invalid(String),
    /// A unit other than ms, s, m, h.
    #[error("unknown unit {unit:?} in duration {text:?} (use ms, s, m or h)")]
    UnknownUnit {
        /// The whole flag value.
        text: String,
        /// The unit found.
        unit: String,
    },
    /// The value does not fit a `Duration`.
    #[error("duration {0:?} is too large")]
    TooLarge(String),
}

/// Parses a sequence of `<integer><unit>` parts (units `ms`, `s`, `m`, `h`) and sums them; `0` alone
/// is zero. Usable as a clap `value_parser`.
///
/// # Errors
/// [`DurationError`] naming the problem: empty text, a missing or unknown unit, or overflow.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(DurationError::Empty);
    }
    if trimmed == "0" {
        return Ok(Duration::ZERO);
    }
    let invalid = || DurationError::Invalid(text.to_string());
    let mut total = Duration::ZERO;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid());
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::TooLarge(text.to_string()))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Some(Duration::from_millis(number)),
            "s" => Some(Duration::from_secs(number)),
            "m" => number.checked_mul(60).map(Duration::from_secs),
            "h" => number.checked_mul(3600).map(Duration::from_secs),
            "" => return Err(invalid()),
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text.to_string(),
                    unit: other.to_string(),
                });
            }
        };
        total = part
            .and_then(|part| total.checked_add(part))
            .ok_or_else(|| DurationError::TooLarge(text.to_string()))?;
    }
    Ok(total)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn common_forms_are_understood() {
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn a_number_without_unit_or_with_an_unknown_unit_is_rejected() {
        assert!(matches!(
            parse_duration("10"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("ms"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("3d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        assert!(matches!(
            parse_duration("99999999999999999999s"),
            Err(DurationError::TooLarge(_))
        ));
        assert!(matches!(
            parse_duration("18446744073709551615h"),
            Err(DurationError::TooLarge(_))
        ));
    }
}
