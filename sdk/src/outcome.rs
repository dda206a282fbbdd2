//! How one run of a controller on an item ended, in the SDK's terms; the runtime turns it into the
//! protocol's `Done` at its edge.

use crate::action::Action;

/// How one reconcile ended: what the fleet should do with the key next, and the error text if it
/// failed.
///
/// | reconcile | [`action`](Self::action) | [`error`](Self::error) |
/// | --- | --- | --- |
/// | `Ok(action)` | `Some(action)` | `None` |
/// | `Err` without an error policy, or an undecodable item | `None`: retry with the fleet's rate limiter | `Some` |
/// | `Err` with an error policy that chose `action` | `Some(action)` | `Some` |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    action: Option<Action>,
    error: Option<String>,
}

impl Outcome {
    /// `Ok(action)` of the reconcile function.
    pub fn from_action(action: Action) -> Self {
        Self {
            action: Some(action),
            error: None,
        }
    }

    /// A failed reconcile without an error policy: a rate-limited retry (client-go's
    /// `AddRateLimited`).
    pub fn error(message: String) -> Self {
        Self {
            action: None,
            error: Some(message),
        }
    }

    /// A failed reconcile whose error policy chose `action`; the error text stays for logs and
    /// metrics.
    pub fn from_policy(action: Action, message: String) -> Self {
        Self {
            action: Some(action),
            error: Some(message),
        }
    }

    /// What the fleet does with the key next; `None` means a rate-limited retry.
    pub fn action(&self) -> Option<Action> {
        self.action
    }

    /// Why the reconcile failed (its error and sources, `: `-joined); `None` when it succeeded.
    pub fn error_message(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_error_without_a_policy_leaves_the_key_to_the_rate_limiter() {
        let outcome = Outcome::error("boom".into());
        assert_eq!(outcome.action(), None);
        assert_eq!(outcome.error_message(), Some("boom"));
    }

    #[test]
    fn an_error_policy_keeps_both_its_action_and_the_error_text() {
        let action = Action::requeue(Duration::from_secs(5));
        let outcome = Outcome::from_policy(action, "boom".into());
        assert_eq!(outcome.action(), Some(action));
        assert_eq!(outcome.error_message(), Some("boom"));
    }
}
