//! `maxSurge` / `maxUnavailable` of a rolling update resolved to pod counts (upstream
//! `GetScaledValueFromIntOrPercent` and `ResolveFenceposts`).

use flotilla_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Errors of resolving an int-or-percent value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FencepostError {
    /// A string value that is not `<integer>%`.
    #[error("invalid value for IntOrString: {0:?} is not a percentage")]
    NotAPercentage(String),
}

/// `value` as a count of `total`: an integer as it is, a percentage of `total` rounded up or down.
///
/// # Errors
/// [`FencepostError::NotAPercentage`] for a string that is not `<integer>%` (validation rejects those).
pub fn scaled_value(
    value: &IntOrString,
    total: i32,
    round_up: bool,
) -> Result<i32, FencepostError> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let percent: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| FencepostError::NotAPercentage(s.clone()))?;
            let product = percent * i64::from(total);
            let mut scaled = product.div_euclid(100);
            if round_up && product.rem_euclid(100) != 0 {
                scaled += 1;
            }
            Ok(i32::try_from(scaled).unwrap_or(if scaled < 0 { i32::MIN } else { i32::MAX }))
        }
    }
}

/// `(maxSurge, maxUnavailable)` as pod counts for `desired` replicas: surge rounds up, unavailability
/// rounds down, and when both come out 0 one pod may be unavailable, or no rollout could ever proceed.
///
/// # Errors
/// [`FencepostError`] when either value is malformed.
pub fn resolve(
    max_surge: &IntOrString,
    max_unavailable: &IntOrString,
    desired: i32,
) -> Result<(i32, i32), FencepostError> {
    let surge = scaled_value(max_surge, desired, true)?;
    let unavailable = scaled_value(max_unavailable, desired, false)?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    #[test]
    fn integers_are_taken_as_they_are() {
        assert_eq!(
            resolve(&IntOrString::Int(3), &IntOrString::Int(2), 10),
            Ok((3, 2))
        );
    }

    #[test]
    fn surge_percentages_round_up_and_unavailable_percentages_round_down() {
        // 25% of 5 is 1.25: surge 2, unavailable 1.
        assert_eq!(resolve(&pct("25%"), &pct("25%"), 5), Ok((2, 1)));
        // 25% of 10 is 2.5.
        assert_eq!(resolve(&pct("25%"), &pct("25%"), 10), Ok((3, 2)));
        assert_eq!(resolve(&pct("100%"), &pct("0%"), 7), Ok((7, 0)));
        assert_eq!(scaled_value(&pct("33%"), 3, false), Ok(0));
        assert_eq!(scaled_value(&pct("33%"), 3, true), Ok(1));
    }

    #[test]
    fn both_zero_lets_one_pod_be_unavailable() {
        assert_eq!(
            resolve(&IntOrString::Int(0), &IntOrString::Int(0), 4),
            Ok((0, 1))
        );
        // 25% of 2 rounds down to 0 unavailable, but surge rounds up to 1: no override.
        assert_eq!(resolve(&pct("25%"), &pct("25%"), 2), Ok((1, 0)));
        // No surge, and 10% of 3 rounds down to no unavailability.
        assert_eq!(resolve(&pct("0%"), &pct("10%"), 3), Ok((0, 1)));
    }

    #[test]
    fn a_string_that_is_not_a_percentage_is_an_error() {
        assert!(matches!(
            scaled_value(&pct("3"), 10, true),
            Err(FencepostError::NotAPercentage(_))
        ));
        assert!(scaled_value(&pct("x%"), 10, true).is_err());
    }
}
