//! The fleet's [`ResourceKind`] of a typed Kubernetes resource, scope included.

use flotilla_apimachinery::ResourceKind;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::Resource;

/// Whether a resource scope puts objects in namespaces; implemented for the scopes typed resources
/// carry (`k8s_openapi` types and `#[derive(CustomResource)]` types alike).
pub trait KindScope {
    /// `true` for namespaced resources.
    const NAMESPACED: bool;
}

impl KindScope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl KindScope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// The kind of `K`, from its group, version, kind, plural and scope.
pub fn kind_of<K>() -> ResourceKind
where
    K: Resource<DynamicType = ()>,
    K::Scope: KindScope,
{
    ResourceKind::new(
        &K::group(&()),
        &K::version(&()),
        &K::kind(&()),
        &K::plural(&()),
        K::Scope::NAMESPACED,
    )
}

/// Whether `candidate` names the same resource as `kind` (group, version and plural; the kind name and
/// scope follow from those).
pub(crate) fn same_resource(kind: &ResourceKind, candidate: &ResourceKind) -> bool {
    kind.group == candidate.group
        && kind.version == candidate.version
        && kind.plural == candidate.plural
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Node};

    use super::*;

    #[test]
    fn a_configmap_is_a_namespaced_core_kind() {
        assert_eq!(
            kind_of::<ConfigMap>(),
            ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)
        );
    }

    #[test]
    fn a_node_is_cluster_scoped() {
        assert!(!kind_of::<Node>().namespaced);
    }
}
