//! What a controller declares to the fleet: its primary kind, how events of other kinds map to its
//! keys, what ships with each item, what it reads from the cache and how often it resyncs. The SDK's
//! own types; the worker runtime turns them into the protocol's `ControllerSpec` at its edge.

use std::time::Duration;

use flotilla_apimachinery::ResourceKind;

/// A controller's declaration, built by [`crate::Controller`] and read by the runtime through
/// [`crate::DynController::spec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerSpec {
    /// Unique in the fleet, like kube-controller-manager's (`replicaset`).
    pub name: String,
    /// The kind whose `namespace/name` keys the controller reconciles; `None` for an owner-graph
    /// controller (see [`crate::Controller::owner_graph`]).
    pub primary: Option<ResourceKind>,
    /// How events of related kinds become keys of this controller.
    pub mappings: Vec<Mapping>,
    /// Kinds whose objects controlled by the primary object ship with each item.
    pub prefetch_owned: Vec<ResourceKind>,
    /// Kinds the reconcile reads through the cache: the coordinator keeps informers for them and waits
    /// for their sync before dispatching.
    pub reads: Vec<ResourceKind>,
    /// Reconcile every key again this often; `None` for never.
    pub resync: Option<Duration>,
}

impl ControllerSpec {
    /// A spec named `name` with primary kind `primary` and nothing else declared.
    pub fn new(name: &str, primary: Option<ResourceKind>) -> Self {
        Self {
            name: name.to_owned(),
            primary,
            mappings: Vec::new(),
            prefetch_owned: Vec::new(),
            reads: Vec::new(),
            resync: None,
        }
    }

    /// Whether the controller works on the ownerReference graph of every kind (no primary kind).
    pub fn owner_graph(&self) -> bool {
        self.primary.is_none()
    }

    /// Every kind the spec names (primary, mapped, prefetched, read), duplicates included: what the
    /// runtime uses to name the kinds of a reconcile's writes.
    pub fn kinds(&self) -> impl Iterator<Item = &ResourceKind> + '_ {
        self.primary
            .iter()
            .chain(self.mappings.iter().map(|m| &m.kind))
            .chain(&self.prefetch_owned)
            .chain(&self.reads)
    }
}

/// How events of one related kind become keys of a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The kind whose events are mapped.
    pub kind: ResourceKind,
    /// How an object of that kind names the keys.
    pub rule: MappingRule,
}

/// The rule of a [`Mapping`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappingRule {
    /// The object's controller ownerReference, if it is of the primary kind.
    Owner,
    /// Every primary object in the same namespace whose label selector at `selector_path` (a map of
    /// labels or a `LabelSelector`) matches the object's labels.
    Selector {
        /// Dotted path of the selector in the primary object, e.g. `spec.selector`.
        selector_path: String,
    },
    /// The primary object (same namespace) named by the object's `field_path`.
    Field {
        /// Dotted path in the related object, e.g. `metadata.name`.
        field_path: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_lists_every_declared_kind_primary_first() {
        let pod = ResourceKind::new("", "v1", "Pod", "pods", true);
        let rs = ResourceKind::new("apps", "v1", "ReplicaSet", "replicasets", true);
        let mut spec = ControllerSpec::new("replicaset", Some(rs.clone()));
        spec.mappings.push(Mapping {
            kind: pod.clone(),
            rule: MappingRule::Owner,
        });
        spec.reads.push(pod.clone());
        let kinds: Vec<_> = spec.kinds().cloned().collect();
        assert_eq!(kinds, [rs, pod.clone(), pod]);
        assert!(!spec.owner_graph());
    }
}
