//! What a controller declares to the fleet: its primary kind, how events of other kinds map to its
//! keys, what ships with each item, what it reads from the cache and how often it resyncs. The
//! mappings and indexes are `flotilla-apimachinery`'s, the types the protocol carries; the worker
//! runtime turns the rest into the protocol's `ControllerSpec` at its edge.

use std::time::Duration;

use flotilla_apimachinery::ResourceKind;
pub use flotilla_apimachinery::{IndexSpec, Mapping, MappingRule};

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
    /// Named indexes of the cache the reconcile lists by (client-go's `AddIndexers`); their kinds get
    /// informers as [`reads`](Self::reads) do.
    pub indexes: Vec<IndexSpec>,
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
            indexes: Vec::new(),
        }
    }

    /// Whether the controller works on the ownerReference graph of every kind (no primary kind).
    pub fn owner_graph(&self) -> bool {
        self.primary.is_none()
    }

    /// Every kind the spec names (primary, mapped, prefetched, read, indexed), duplicates included:
    /// what the runtime uses to name the kinds of a reconcile's writes.
    pub fn kinds(&self) -> impl Iterator<Item = &ResourceKind> + '_ {
        self.primary
            .iter()
            .chain(self.mappings.iter().map(|m| &m.kind))
            .chain(&self.prefetch_owned)
            .chain(&self.reads)
            .chain(self.indexes.iter().map(|i| &i.kind))
    }
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

    #[test]
    fn an_indexed_kind_counts_among_the_declared_kinds() {
        let node = ResourceKind::new("", "v1", "Node", "nodes", false);
        let mut spec = ControllerSpec::new("leases", Some(node.clone()));
        let pvc = ResourceKind::new(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
        );
        spec.indexes.push(IndexSpec {
            kind: pvc.clone(),
            name: "by-volume".into(),
            field_path: "spec.volumeName".into(),
        });
        let kinds: Vec<_> = spec.kinds().cloned().collect();
        assert_eq!(kinds, [node, pvc]);
    }
}
