//! What a reconcile asks the fleet to do with its key next.

use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn await_change_has_no_requeue_delay_and_requeue_keeps_its_delay() {
        assert_eq!(Action::await_change().requeue_after(), None);
        assert_eq!(
            Action::requeue(Duration::from_millis(1500)).requeue_after(),
            Some(Duration::from_millis(1500))
        );
    }
}
