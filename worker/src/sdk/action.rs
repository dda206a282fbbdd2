//! What a reconcile asks the fleet to do with its key next, and how that becomes a Done outcome.

use std::time::Duration;

use flotilla_proto as proto;

/// The result of a successful reconcile, as in `kube::runtime::controller::Action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Nothing more to do until something changes: the coordinator forgets the key's failures and
    /// reconciles it again on the next event (or periodic resync).
    pub fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// Reconcile the key again after `after` (client-go's `AddAfter`), failures forgotten.
    pub fn requeue(after: Duration) -> Self {
        Self {
            requeue_after: Some(after),
        }
    }

    /// The requeue delay, if any.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// How one reconcile ended, as reported in `Done`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) kind: proto::Outcome,
    pub(crate) requeue_after_ms: u64,
    pub(crate) error: String,
}

impl Outcome {
    /// `Ok(action)` of the reconcile function.
    pub(crate) fn from_action(action: Action) -> Self {
        match action.requeue_after {
            None => Self {
                kind: proto::Outcome::Success,
                requeue_after_ms: 0,
                error: String::new(),
            },
            Some(after) => Self {
                kind: proto::Outcome::RequeueAfter,
                requeue_after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
                error: String::new(),
            },
        }
    }

    /// A failed reconcile without an error policy: rate-limited retry.
    pub(crate) fn error(message: String) -> Self {
        Self {
            kind: proto::Outcome::Error,
            requeue_after_ms: 0,
            error: message,
        }
    }

    /// A failed reconcile whose error policy chose `action`; the error text stays for logs.
    pub(crate) fn from_policy(action: Action, message: String) -> Self {
        Self {
            error: message,
            ..Self::from_action(action)
        }
    }

    /// The metric label of this outcome.
    pub(crate) fn label(&self) -> &'static str {
        match (self.kind, self.error.is_empty()) {
            (proto::Outcome::Success, true) => "success",
            (proto::Outcome::RequeueAfter, true) => "requeue_after",
            _ => "error",
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn await_change_becomes_success_so_the_coordinator_forgets_the_key() {
        let outcome = Outcome::from_action(Action::await_change());
        assert_eq!(outcome.kind, proto::Outcome::Success);
        assert_eq!(outcome.requeue_after_ms, 0);
        assert_eq!(outcome.label(), "success");
    }

    #[test]
    fn requeue_becomes_requeue_after_with_the_delay_in_milliseconds() {
        let outcome = Outcome::from_action(Action::requeue(Duration::from_millis(1500)));
        assert_eq!(outcome.kind, proto::Outcome::RequeueAfter);
        assert_eq!(outcome.requeue_after_ms, 1500);
        assert_eq!(outcome.label(), "requeue_after");
    }

    #[test]
    fn an_error_becomes_error_with_its_text() {
        let outcome = Outcome::error("boom".into());
        assert_eq!(outcome.kind, proto::Outcome::Error);
        assert_eq!(outcome.error, "boom");
        assert_eq!(outcome.label(), "error");
    }

    #[test]
    fn an_error_policy_requeue_keeps_the_error_text_and_counts_as_an_error() {
        let outcome = Outcome::from_policy(Action::requeue(Duration::from_secs(5)), "boom".into());
        assert_eq!(outcome.kind, proto::Outcome::RequeueAfter);
        assert_eq!(outcome.requeue_after_ms, 5000);
        assert_eq!(outcome.error, "boom");
        assert_eq!(outcome.label(), "error");
    }
}
