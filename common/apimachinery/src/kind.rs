//! The fleet's name for a Kubernetes resource type (its mapping to and from the protocol lives in
//! `flotilla-proto`, at the edge).

use std::fmt;

/// A resource type as discovery names it: group, version, kind, plural and scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKind {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group.
    pub version: String,
    /// Kind, e.g. `ReplicaSet`.
    pub kind: String,
    /// Resource (plural), e.g. `replicasets`.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl ResourceKind {
    /// A kind from its parts.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }

    /// `apiVersion` as objects carry it: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kube-rs description of this kind, for dynamic clients.
    pub fn api_resource(&self) -> kube::core::ApiResource {
        kube::core::ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// The key of an object of this kind: `namespace/name`, or `name` when cluster-scoped.
    pub fn object_key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced && !ns.is_empty() => format!("{ns}/{name}"),
            _ => name.to_owned(),
        }
    }

    /// Checks that the kind names something; called on kinds that arrive from peers.
    ///
    /// # Errors
    /// A message naming the missing part.
    pub fn validate(&self) -> Result<(), String> {
        if self.version.is_empty() || self.kind.is_empty() || self.plural.is_empty() {
            return Err("resource kind lacks a version, kind or plural".into());
        }
        // Kinds become etcd keys, metric labels and URL paths: bounded as Kubernetes bounds them
        // (a group is a DNS subdomain, the rest are at most 63 characters), and never with a '/'.
        let too_long = self.group.len() > 253
            || self.version.len() > 63
            || self.kind.len() > 63
            || self.plural.len() > 63;
        let slash = [&self.group, &self.version, &self.kind, &self.plural]
            .iter()
            .any(|p| p.contains('/'));
        if too_long || slash {
            return Err(
                "resource kind has a part that is too long (group 253, others 63 characters) or contains '/'"
                    .into(),
            );
        }
        Ok(())
    }
}

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.plural)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.plural)
        }
    }
}

/// Splits an object key into namespace and name.
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}
