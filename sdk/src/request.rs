//! One key to reconcile, with the object the coordinator's cache held for it.

use std::sync::Arc;

use flotilla_apimachinery::Reason;

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
    pub(crate) reason: Reason,
}

impl<K> Request<K> {
    /// A request for `namespace/name` (`name` alone when `namespace` is `None`) whose object is gone,
    /// at attempt 0: what a unit test of a reconcile starts from. The runtime builds requests itself,
    /// from the items the coordinator assigns.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        let key = match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_owned(),
        };
        Self {
            key,
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            object: None,
            attempt: 0,
            reason: Reason::Unknown,
        }
    }

    /// The same request carrying `object` as the one the coordinator's cache held.
    pub fn with_object(mut self, object: K) -> Self {
        self.object = Some(Arc::new(object));
        self
    }

    /// The same request with `reason` as why it runs.
    pub fn with_reason(mut self, reason: Reason) -> Self {
        self.reason = reason;
        self
    }

    /// The same request at attempt `attempt` (the key failed that many times in a row before).
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

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

    /// Why the key runs: the watch event, requeue, retry, resync or handover that queued it (the first,
    /// when several coalesced). Informational: a reconcile must converge whatever the reason, as
    /// events can coalesce and a new leader lists everything again.
    pub fn reason(&self) -> &Reason {
        &self.reason
    }

    /// How many times this key failed in a row before this attempt (client-go's `NumRequeues`).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_request_is_keyed_like_the_workqueue_keys_it() {
        let namespaced = Request::<()>::new(Some("team-a"), "web").with_attempt(2);
        assert_eq!(namespaced.key(), "team-a/web");
        assert_eq!(namespaced.namespace(), Some("team-a"));
        assert_eq!(namespaced.attempt(), 2);
        assert_eq!(namespaced.reason(), &Reason::Unknown);
        assert!(namespaced.object().is_none());
        assert_eq!(
            namespaced.with_reason(Reason::Resync).reason(),
            &Reason::Resync
        );
        let cluster = Request::new(None, "node-1").with_object(7);
        assert_eq!(cluster.key(), "node-1");
        assert_eq!(cluster.object().map(|o| **o), Some(7));
    }
}
