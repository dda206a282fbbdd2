//! What a controller declares about kinds other than its primary: how events of a related kind become
//! its keys ([`Mapping`], [`MappingRule`]) and the named indexes it lists by ([`IndexSpec`]). One
//! definition for the SDK (which declares them), the protocol crate (which carries them in Hello and
//! stores them in etcd) and the coordinator (which routes events by them).

use crate::ResourceKind;

/// How events of one related kind become keys of a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The kind whose events are mapped.
    pub kind: ResourceKind,
    /// How an object of that kind names the keys.
    pub rule: MappingRule,
}

/// The rule of a [`Mapping`]; the protocol documents each too (`fleet.proto`, `Mapping`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappingRule {
    /// The object's controller ownerReference, if it is of the primary kind. A cluster-scoped primary
    /// may own objects of any scope; a namespaced primary owns only objects of its namespace.
    Owner,
    /// Every primary object in the same namespace whose label selector at `selector_path` (a map of
    /// labels or a `LabelSelector`) matches the object's labels.
    Selector {
        /// Dotted path of the selector in the primary object, e.g. `spec.selector`.
        selector_path: String,
    },
    /// The primary object named by the object's `field_path`, in the namespace at `namespace_path`
    /// (by default the object's own; ignored for a cluster-scoped primary).
    Field {
        /// Dotted path of the primary's name in the related object, e.g. `metadata.name`.
        field_path: String,
        /// Dotted path of the primary's namespace in the related object (e.g.
        /// `spec.claimRef.namespace`); `None` (empty on the wire): the related object's own
        /// namespace, so nothing when it is cluster-scoped and the primary is namespaced.
        namespace_path: Option<String>,
    },
    /// Every primary object: an event on any object of the kind concerns them all (a Node → every
    /// DaemonSet).
    FanOut,
}

/// A named index of the cache (client-go's `AddIndexers`): the objects of `kind` by the string at
/// `field_path`, which a reconcile lists by `name` and a value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IndexSpec {
    /// The kind indexed.
    pub kind: ResourceKind,
    /// The index's name: a DNS-1123 label, not one of the built-in indexes (`namespace`,
    /// `owner-uid`, `node-name`); the coordinator refuses a spec that breaks this.
    pub name: String,
    /// Dotted path of the indexed string, e.g. `spec.volumeName`; objects without a non-empty string
    /// there are not in the index.
    pub field_path: String,
}
