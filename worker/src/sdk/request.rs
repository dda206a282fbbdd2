//! One key to reconcile, with the object the coordinator's cache held for it.

use std::sync::Arc;

/// What a reconcile is asked to look at: the key and, unless it is gone, the primary object.
///
/// Like client-go's `sync(key)`, the reconcile must handle `object() == None`: the object was deleted
/// (or never existed) by the time the item was dispatched.
#[derive(Debug, Clone)]
pub struct Request<K> {
    pub(crate) key: String,
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
    pub(crate) object: Option<Arc<K>>,
    pub(crate) attempt: u32,
}

impl<K> Request<K> {
    /// The workqueue key: `namespace/name`, or `name` for cluster-scoped kinds.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The namespace part of the key.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The name part of the key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object as the coordinator's cache held it when dispatching; `None` when it is gone.
    pub fn object(&self) -> Option<&Arc<K>> {
        self.object.as_ref()
    }

    /// How many times this key failed in a row before this attempt (client-go's `NumRequeues`).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}
