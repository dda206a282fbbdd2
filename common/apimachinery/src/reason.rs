//! Why a reconcile runs: the fleet's counterpart of kube-rs's `ReconcileReason`. The coordinator records
//! it when a key enters its workqueue, sends it with the item, and the worker hands it to the reconcile
//! in its `Request` and puts it on the reconcile's span.

use std::fmt;

/// Why a key runs. When several causes coalesce into one queued key, it is the first: the cause that
/// made the key need a run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Reason {
    /// A watch event (add, update or delete) on an object queued the key: the primary object itself,
    /// or a related object mapped to it (an owned pod, a selected pod, a referencing object).
    ObjectChanged {
        /// The object's resource, as [`crate::ResourceKind`]'s display: `apps/v1/replicasets`.
        kind: String,
        /// The object's key: `namespace/name`, or `name` when cluster-scoped.
        key: String,
    },
    /// The last reconcile asked to run again after a delay.
    RequeueAfter,
    /// The last reconcile failed; this is a retry after the rate limiter's backoff.
    Retry,
    /// The controller's periodic resync.
    Resync,
    /// The leader's initial list: every key runs once when a term's caches have synced, on a fresh
    /// fleet and after a failover alike (a key a worker still held from the earlier leader runs once
    /// that worker reported it finished).
    InitialList,
    /// Taken back from a worker that was lost or whose stream broke, and run elsewhere or again.
    Handover,
    /// Enqueued on request (the admin API or a test).
    Requested,
    /// Not said: a peer that predates reasons, or an unknown value from a newer one.
    #[default]
    Unknown,
}

impl Reason {
    /// A short stable name for logs, span fields and metric labels: `object_changed`, `requeue_after`,
    /// `retry`, `resync`, `initial_list`, `handover`, `requested`, `unknown`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::ObjectChanged { .. } => "object_changed",
            Self::RequeueAfter => "requeue_after",
            Self::Retry => "retry",
            Self::Resync => "resync",
            Self::InitialList => "initial_list",
            Self::Handover => "handover",
            Self::Requested => "requested",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ObjectChanged { kind, key } => write!(f, "object_changed {kind} {key}"),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_change_names_the_object_and_other_reasons_their_name() {
        let changed = Reason::ObjectChanged {
            kind: "v1/pods".into(),
            key: "default/web-1".into(),
        };
        assert_eq!(changed.to_string(), "object_changed v1/pods default/web-1");
        assert_eq!(changed.name(), "object_changed");
        assert_eq!(Reason::Retry.to_string(), "retry");
        assert_eq!(Reason::default(), Reason::Unknown);
    }
}
