//! Who may read the leader's cache, and what: the dispatcher publishes its live workers (id and lease)
//! and the kinds its controllers declared; the Cache service checks every request against that view.
//! Reads never start informers, so a client cannot make the leader watch (and hand out) a kind the
//! fleet does not use, such as Secrets.

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
    /// No controller of the fleet declared the kind (as its primary, owned, mapped, prefetched or
    /// watched kind, or over the owner graph).
    #[error("{0} is not a kind any controller of this fleet declared")]
    UndeclaredKind(ResourceKind),
}

/// The view one term's dispatcher publishes; cheap to clone (clones share it).
#[derive(Clone, Default, Debug)]
pub struct CacheAccess {
    inner: Arc<RwLock<Allowed>>,
}

#[derive(Default, Debug)]
struct Allowed {
    /// Worker id → the lease it registered on.
    workers: HashMap<String, i64>,
    kinds: HashSet<ResourceKind>,
}

impl CacheAccess {
    /// Whether `worker` on `lease` may read `kind`.
    ///
    /// # Errors
    /// [`AccessDenied`] saying which check failed (the worker first).
    pub fn check(&self, worker: &str, lease: i64, kind: &ResourceKind) -> Result<(), AccessDenied> {
        let allowed = self.inner.read();
        if allowed.workers.get(worker) != Some(&lease) {
            return Err(AccessDenied::UnknownWorker {
                worker: worker.chars().take(64).collect(),
                lease,
            });
        }
        if !allowed.kinds.contains(kind) {
            return Err(AccessDenied::UndeclaredKind(kind.clone()));
        }
        Ok(())
    }

    /// Replaces the view: the leader's dispatcher calls it whenever workers or controllers change.
    pub fn publish(&self, workers: HashMap<String, i64>, kinds: HashSet<ResourceKind>) {
        *self.inner.write() = Allowed { workers, kinds };
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

    #[test]
    fn only_a_registered_worker_on_its_own_lease_reads_only_declared_kinds() {
        let access = CacheAccess::default();
        assert!(matches!(
            access.check("w0", 7, &pods()),
            Err(AccessDenied::UnknownWorker { .. })
        ));
        access.publish(
            HashMap::from([("w0".to_owned(), 7)]),
            HashSet::from([pods()]),
        );
        assert_eq!(access.check("w0", 7, &pods()), Ok(()));
        assert!(matches!(
            access.check("w0", 8, &pods()),
            Err(AccessDenied::UnknownWorker { .. })
        ));
        assert!(matches!(
            access.check("ghost", 7, &pods()),
            Err(AccessDenied::UnknownWorker { .. })
        ));
        assert_eq!(
            access.check("w0", 7, &secrets()),
            Err(AccessDenied::UndeclaredKind(secrets()))
        );
    }
}
