//! Who may read the leader's cache, and what: the dispatcher publishes each live worker (id and lease)
//! with the kinds its own accepted controllers declared; the Cache service checks every request against
//! that view. A worker reads only what it could have been sent anyway, so one worker declaring a
//! controller of Secrets opens them to that worker alone, not to the fleet. Reads never start informers,
//! so a client cannot make the leader watch (and hand out) a kind the fleet does not use.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use flotilla_common::ResourceKind;
use parking_lot::RwLock;

/// Why a cache read was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessDenied {
    /// The caller is not a worker that said Hello to this leader on the lease it names (or its lease is
    /// gone).
    #[error("worker {worker:?} with lease {lease:x} has no live registration with this leader")]
    UnknownWorker {
        /// The worker id the request named, cut to 64 characters.
        worker: String,
        /// The lease the request named.
        lease: i64,
    },
    /// None of the caller's own accepted controllers declared the kind (as its primary, owned, mapped,
    /// prefetched, watched or indexed kind), and none of them runs over the owner graph.
    #[error("{0} is not a kind any controller of this worker declared")]
    UndeclaredKind(ResourceKind),
}

/// What one worker may read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReads {
    /// The lease it registered on: a request naming another lease is an impostor or a past
    /// incarnation.
    pub lease: i64,
    /// Every kind its accepted controllers declared.
    pub kinds: HashSet<ResourceKind>,
    /// Whether one of its controllers runs over the owner graph (the garbage collector): it may read
    /// every kind the leader informs, since the graph's discovery covers every deletable resource
    /// (kube-controller-manager's garbage collector reads `*/*` too). Decided per request against the
    /// informers rather than a published list: discovery runs on its own period, so a list would lag.
    pub owner_graph: bool,
}

/// The view one term's dispatcher publishes; cheap to clone (clones share it).
#[derive(Clone, Default, Debug)]
pub struct CacheAccess {
    /// Worker id → what it may read. Replaced whole on every publication.
    inner: Arc<RwLock<HashMap<String, WorkerReads>>>,
}

impl CacheAccess {
    /// Whether `worker` on `lease` may read `kind`; `informed` says whether the leader runs an informer
    /// of a kind (asked only for an owner-graph worker's kinds beyond its declared ones).
    ///
    /// # Errors
    /// [`AccessDenied`] saying which check failed (the worker first).
    pub fn check(
        &self,
        worker: &str,
        lease: i64,
        kind: &ResourceKind,
        informed: impl FnOnce(&ResourceKind) -> bool,
    ) -> Result<(), AccessDenied> {
        let allowed = self.inner.read();
        let Some(reads) = allowed.get(worker).filter(|r| r.lease == lease) else {
            return Err(AccessDenied::UnknownWorker {
                worker: worker.chars().take(64).collect(),
                lease,
            });
        };
        if reads.kinds.contains(kind) || (reads.owner_graph && informed(kind)) {
            return Ok(());
        }
        Err(AccessDenied::UndeclaredKind(kind.clone()))
    }

    /// Replaces the view: the leader's dispatcher calls it whenever workers or controllers change.
    pub fn publish(&self, workers: HashMap<String, WorkerReads>) {
        *self.inner.write() = workers;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> ResourceKind {
        ResourceKind::new("", "v1", "Secret", "secrets", true)
    }

    fn pods() -> ResourceKind {
        ResourceKind::new("", "v1", "Pod", "pods", true)
    }

    fn configmaps() -> ResourceKind {
        ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)
    }

    fn reads(lease: i64, kinds: &[ResourceKind], owner_graph: bool) -> WorkerReads {
        WorkerReads {
            lease,
            kinds: kinds.iter().cloned().collect(),
            owner_graph,
        }
    }

    fn never_informed(_: &ResourceKind) -> bool {
        false
    }

    #[test]
    fn only_a_registered_worker_on_its_own_lease_reads_only_declared_kinds() {
        let access = CacheAccess::default();
        assert!(matches!(
            access.check("w0", 7, &pods(), never_informed),
            Err(AccessDenied::UnknownWorker { .. })
        ));
        access.publish(HashMap::from([(
            "w0".to_owned(),
            reads(7, &[pods()], false),
        )]));
        assert_eq!(access.check("w0", 7, &pods(), never_informed), Ok(()));
        assert!(matches!(
            access.check("w0", 8, &pods(), never_informed),
            Err(AccessDenied::UnknownWorker { .. })
        ));
        assert!(matches!(
            access.check("ghost", 7, &pods(), never_informed),
            Err(AccessDenied::UnknownWorker { .. })
        ));
        assert_eq!(
            access.check("w0", 7, &secrets(), never_informed),
            Err(AccessDenied::UndeclaredKind(secrets()))
        );
    }

    /// Regression: a Cache read was allowed for any kind some controller of the fleet declared, so one
    /// worker declaring a controller of Secrets let every worker list them.
    #[test]
    fn a_kind_one_worker_declared_is_not_readable_by_another_worker() {
        let access = CacheAccess::default();
        access.publish(HashMap::from([
            ("a".to_owned(), reads(1, &[secrets()], false)),
            ("b".to_owned(), reads(2, &[configmaps()], false)),
        ]));
        assert_eq!(access.check("a", 1, &secrets(), never_informed), Ok(()));
        assert_eq!(access.check("b", 2, &configmaps(), never_informed), Ok(()));
        let denied = access
            .check("b", 2, &secrets(), never_informed)
            .unwrap_err();
        assert_eq!(
            denied.to_string(),
            "v1/secrets is not a kind any controller of this worker declared"
        );
        assert!(access.check("a", 1, &configmaps(), never_informed).is_err());
    }

    #[test]
    fn an_owner_graph_worker_reads_every_informed_kind_and_nothing_else() {
        let access = CacheAccess::default();
        access.publish(HashMap::from([
            ("gc".to_owned(), reads(3, &[], true)),
            ("b".to_owned(), reads(2, &[configmaps()], false)),
        ]));
        let informed = |kind: &ResourceKind| *kind == pods();
        assert_eq!(access.check("gc", 3, &pods(), informed), Ok(()));
        assert!(matches!(
            access.check("gc", 3, &secrets(), informed),
            Err(AccessDenied::UndeclaredKind(_))
        ));
        // Being informed is not enough for a worker without an owner-graph controller.
        assert!(access.check("b", 2, &pods(), informed).is_err());
    }
}
