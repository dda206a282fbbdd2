//! One object a reconcile wrote, as the worker notes it and the coordinator holds the key for it
//! (read-your-writes). One type for both roles: the SDK's recording client makes it, the protocol crate
//! carries it, the coordinator's expectations read it.

use crate::ResourceKind;

/// What kind of write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOp {
    /// A POST that made an object.
    Create,
    /// A PUT or PATCH of an object or one of its subresources.
    Update,
    /// A DELETE (which may only have set a deletionTimestamp).
    Delete,
}

/// One object a reconcile wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The object's kind; its kind name is never empty (the coordinator matches kinds by name too).
    pub kind: ResourceKind,
    /// The object's key: `namespace/name`, or `name` when cluster-scoped.
    pub key: String,
    /// The resourceVersion the API server answered with, opaque as the API's contract says; empty
    /// when the answer did not carry one (a delete answered with a `Status`).
    pub resource_version: String,
    /// What the write did.
    pub op: WriteOp,
}

impl Write {
    /// The resourceVersion as an etcd revision, which it is in every etcd-backed API server; `None`
    /// when it is empty or not a number, so cannot be compared with what a cache has observed.
    pub fn revision(&self) -> Option<u64> {
        self.resource_version.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(resource_version: &str) -> Write {
        Write {
            kind: ResourceKind::new("", "v1", "ConfigMap", "configmaps", true),
            key: "ns/a".into(),
            resource_version: resource_version.into(),
            op: WriteOp::Update,
        }
    }

    #[test]
    fn a_numeric_resource_version_is_a_revision_and_anything_else_is_none() {
        assert_eq!(write("42").revision(), Some(42));
        assert_eq!(write("").revision(), None);
        assert_eq!(write("abc").revision(), None);
        assert_eq!(write("-1").revision(), None);
    }
}
