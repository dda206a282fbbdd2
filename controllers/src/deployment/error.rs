//! The errors of one Deployment sync; each is retried with the fleet's rate limiter.

use super::super::controller_ref::ClaimError;
use flotilla_sdk::kube;
use flotilla_sdk::{CacheError, ContextError};

/// Errors of one sync.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Deployment from the cache lacks a uid, namespace or template.
    #[error("deployment {0} lacks a uid, namespace or template")]
    Incomplete(String),
    /// The owned ReplicaSets shipped with the item are unreadable.
    #[error("cannot read prefetched replicasets")]
    Prefetched(#[source] ContextError),
    /// Adopting or releasing a ReplicaSet failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The pods of old ReplicaSets could not be listed (Recreate).
    #[error("cannot list the pods of old replicasets")]
    Pods(#[source] CacheError),
    /// Creating the new ReplicaSet failed.
    #[error("cannot create replicaset {name}")]
    Create {
        /// The ReplicaSet.
        name: String,
        /// Why.
        source: kube::Error,
    },
    /// The new ReplicaSet's name is taken by one with another template; the collision count was
    /// raised, so the retry uses another name.
    #[error("replicaset {0} exists with another template (hash collision); collisionCount raised")]
    Collision(String),
    /// Updating the new ReplicaSet's annotations or minReadySeconds failed.
    #[error("cannot update replicaset {name}")]
    Update {
        /// The ReplicaSet.
        name: String,
        /// Why.
        source: kube::Error,
    },
    /// Scaling a ReplicaSet failed.
    #[error("cannot scale replicaset {name}")]
    Scale {
        /// The ReplicaSet.
        name: String,
        /// Why.
        source: kube::Error,
    },
    /// Deleting an old ReplicaSet failed.
    #[error("cannot delete replicaset {name}")]
    Delete {
        /// The ReplicaSet.
        name: String,
        /// Why.
        source: kube::Error,
    },
    /// Writing the status (or the revision annotation) failed.
    #[error("cannot update the deployment status")]
    Status(#[source] kube::Error),
}
