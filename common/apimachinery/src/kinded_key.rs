//! Kinded keys: the keys of a controller whose items span every kind (an owner-graph controller, the
//! garbage collector's shape), `<group>/<version>/<plural>/<namespace>/<name>`. The group is empty for
//! the core group and the namespace for cluster-scoped objects; no part may contain `/`, which
//! Kubernetes names, namespaces, groups, versions and plurals never do, so the key splits back
//! unambiguously.

use crate::ResourceKind;

/// The parts of a kinded key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindedKey<'a> {
    /// API group; empty for the core group.
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// Resource (plural).
    pub plural: &'a str,
    /// Namespace; `None` for cluster-scoped objects.
    pub namespace: Option<&'a str>,
    /// Object name.
    pub name: &'a str,
}

impl<'a> KindedKey<'a> {
    /// Splits a kinded key; `None` when `key` does not have five parts or lacks a version, plural or
    /// name.
    pub fn parse(key: &'a str) -> Option<Self> {
        let mut parts = key.splitn(5, '/');
        let group = parts.next()?;
        let version = parts.next()?;
        let plural = parts.next()?;
        let namespace = parts.next()?;
        let name = parts.next()?;
        if version.is_empty() || plural.is_empty() || name.is_empty() || name.contains('/') {
            return None;
        }
        Some(Self {
            group,
            version,
            plural,
            namespace: (!namespace.is_empty()).then_some(namespace),
            name,
        })
    }

    /// Whether the key names an object of `kind` (group, version and plural).
    pub fn is_of(&self, kind: &ResourceKind) -> bool {
        self.group == kind.group && self.version == kind.version && self.plural == kind.plural
    }
}

impl ResourceKind {
    /// The kinded key of an object of this kind (the namespace is dropped for cluster-scoped kinds).
    pub fn kinded_key(&self, namespace: Option<&str>, name: &str) -> String {
        let namespace = namespace.filter(|_| self.namespaced).unwrap_or_default();
        format!(
            "{}/{}/{}/{namespace}/{name}",
            self.group, self.version, self.plural
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kinded_key_splits_back_into_its_parts() {
        let rs = ResourceKind::new("apps", "v1", "ReplicaSet", "replicasets", true);
        let key = rs.kinded_key(Some("team-a"), "web-5d8f");
        assert_eq!(key, "apps/v1/replicasets/team-a/web-5d8f");
        let parsed = KindedKey::parse(&key).unwrap();
        assert!(parsed.is_of(&rs));
        assert_eq!(parsed.namespace, Some("team-a"));
        assert_eq!(parsed.name, "web-5d8f");
    }

    #[test]
    fn core_and_cluster_scoped_parts_are_empty() {
        let node = ResourceKind::new("", "v1", "Node", "nodes", false);
        let key = node.kinded_key(Some("ignored"), "n1");
        assert_eq!(key, "/v1/nodes//n1");
        let parsed = KindedKey::parse(&key).unwrap();
        assert_eq!(parsed.group, "");
        assert_eq!(parsed.namespace, None);
        assert!(parsed.is_of(&node));
    }

    #[test]
    fn a_plain_key_is_not_a_kinded_key() {
        assert_eq!(KindedKey::parse("team-a/web"), None);
        assert_eq!(KindedKey::parse("apps/v1/replicasets/ns/a/b"), None);
        assert_eq!(KindedKey::parse("apps//replicasets/ns/a"), None);
    }
}
