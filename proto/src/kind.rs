//! The protocol's `ResourceKind` mapped to and from the shared vocabulary's, at the edge: nothing past
//! the gRPC services handles the generated type.

use flotilla_apimachinery::ResourceKind;

impl From<crate::ResourceKind> for ResourceKind {
    fn from(k: crate::ResourceKind) -> Self {
        Self {
            group: k.group,
            version: k.version,
            kind: k.kind,
            plural: k.plural,
            namespaced: k.namespaced,
        }
    }
}

impl From<&ResourceKind> for crate::ResourceKind {
    fn from(k: &ResourceKind) -> Self {
        Self {
            group: k.group.clone(),
            version: k.version.clone(),
            kind: k.kind.clone(),
            plural: k.plural.clone(),
            namespaced: k.namespaced,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_survives_the_round_trip_through_the_wire() {
        let kind = ResourceKind::new("apps", "v1", "ReplicaSet", "replicasets", true);
        let wire = crate::ResourceKind::from(&kind);
        assert_eq!(wire.plural, "replicasets");
        assert_eq!(ResourceKind::from(wire), kind);
    }
}
