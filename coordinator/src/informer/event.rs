//! What an informer tells its subscriber, after its store has applied the change.

use std::sync::Arc;

use flotilla_common::ResourceKind;

use super::CachedObject;

/// A change of one kind's cache. The store already holds the new state when the event is sent.
#[derive(Debug, Clone)]
pub enum InformerEvent {
    /// An object was added (`old` is `None`) or updated.
    Applied {
        /// The cached object before the change, if there was one.
        old: Option<Arc<CachedObject>>,
        /// The object now in the cache.
        new: Arc<CachedObject>,
    },
    /// An object left the cache.
    Deleted {
        /// The last state of the object: from the delete event, or the cached state when
        /// `final_state_unknown`.
        old: Arc<CachedObject>,
        /// The object was found missing at a relist (client-go's `DeletedFinalStateUnknown`): the
        /// delete itself was not observed, and `old` may be stale.
        final_state_unknown: bool,
    },
    /// The kind's cache holds a complete list: sent after the first list and after every relist.
    Synced {
        /// The kind that synced.
        kind: ResourceKind,
    },
}

impl InformerEvent {
    /// The kind the event is about.
    pub fn kind(&self) -> &ResourceKind {
        match self {
            Self::Applied { new, .. } => &new.kind,
            Self::Deleted { old, .. } => &old.kind,
            Self::Synced { kind } => kind,
        }
    }
}
