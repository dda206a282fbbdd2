//! What a List asks the cache for: all objects of a kind, narrowed by namespace, label selector and one
//! of the coordinator's indexes.

/// What to list: all of a kind, narrowed by namespace, label selector and one index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheQuery {
    namespace: Option<String>,
    label_selector: Option<String>,
    index: Option<(String, String)>,
}

impl CacheQuery {
    /// Everything of the kind, in every namespace.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only objects in `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// Only objects whose labels match `selector` (Kubernetes label selector syntax).
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }

    /// Only objects under `value` of the coordinator's index `name`: a built-in one (`namespace`,
    /// `owner-uid`, `node-name`) or one a controller of the fleet declared for the kind
    /// ([`Controller::index`](crate::Controller::index)).
    pub fn index(mut self, name: &str, value: &str) -> Self {
        self.index = Some((name.to_owned(), value.to_owned()));
        self
    }

    /// Objects whose controller ownerReference has `uid` (index `owner-uid`).
    pub fn owned_by(self, uid: &str) -> Self {
        self.index("owner-uid", uid)
    }

    /// The namespace the query is narrowed to, if any (for backends).
    pub fn namespace_filter(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The label selector the query is narrowed by, if any (for backends).
    pub fn label_filter(&self) -> Option<&str> {
        self.label_selector.as_deref()
    }

    /// The index name and value the query is narrowed by, if any (for backends).
    pub fn index_filter(&self) -> Option<(&str, &str)> {
        self.index
            .as_ref()
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_by_is_the_owner_uid_index_and_every_filter_reads_back() {
        let query = CacheQuery::all()
            .namespace("ns")
            .labels("app=x")
            .owned_by("u-1");
        assert_eq!(query.namespace_filter(), Some("ns"));
        assert_eq!(query.label_filter(), Some("app=x"));
        assert_eq!(query.index_filter(), Some(("owner-uid", "u-1")));
        assert_eq!(CacheQuery::all().index_filter(), None);
    }
}
