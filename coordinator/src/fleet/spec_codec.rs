//! Controller specs as stored in etcd (`controllers/<name>`): the protocol's `ControllerSpec`, encoded with
//! the protocol crate's codec (`flotilla_proto::spec`), the one the workers' Hellos are made with.

use flotilla_proto as proto;
use prost::Message;

use super::messages::{ControllerSpec, Primary};

/// Encodes a spec for etcd. What it decodes to again is `ControllerSpec::try_from` the decoded message.
pub fn encode(spec: &ControllerSpec) -> Vec<u8> {
    proto::ControllerSpec::from(&to_wire(spec)).encode_to_vec()
}

/// The spec in the codec's terms: the resolved rate limiter goes out in full, so a later leader need
/// not know which parts were defaults.
fn to_wire(spec: &ControllerSpec) -> proto::spec::Spec {
    let limiter = spec.rate_limiter;
    proto::spec::Spec {
        name: spec.name.clone(),
        primary: match &spec.primary {
            Primary::Kind(kind) => Some(kind.clone()),
            Primary::OwnerGraph => None,
        },
        mappings: spec.mappings.clone(),
        prefetch_owned: spec.prefetch_owned.clone(),
        watches: spec.watches.clone(),
        resync: spec.resync,
        rate_limits: proto::spec::RateLimits {
            backoff_base: Some(limiter.backoff.base_delay),
            backoff_max: Some(limiter.backoff.max_delay),
            bucket_qps: Some(limiter.bucket.qps),
            bucket_burst: Some(limiter.bucket.burst),
        },
        indexes: spec.indexes.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use flotilla_common::ResourceKind;

    use super::*;
    use crate::fleet::messages::{Mapping, MappingRule};

    #[test]
    fn a_spec_survives_the_round_trip_through_etcd() {
        let spec = ControllerSpec {
            name: "replicaset".into(),
            primary: Primary::Kind(ResourceKind::new(
                "apps",
                "v1",
                "ReplicaSet",
                "replicasets",
                true,
            )),
            mappings: vec![Mapping {
                kind: ResourceKind::new("", "v1", "Pod", "pods", true),
                rule: MappingRule::Owner,
            }],
            prefetch_owned: vec![ResourceKind::new("", "v1", "Pod", "pods", true)],
            watches: vec![],
            resync: Some(Duration::from_secs(30)),
            rate_limiter: Default::default(),
            indexes: vec![],
        };
        let decoded = proto::ControllerSpec::decode(encode(&spec).as_slice()).unwrap();
        assert_eq!(ControllerSpec::try_from(decoded).unwrap(), spec);
    }

    #[test]
    fn an_owner_graph_spec_survives_the_round_trip_without_a_primary_kind() {
        let spec = ControllerSpec {
            name: "garbagecollector".into(),
            primary: Primary::OwnerGraph,
            mappings: vec![],
            prefetch_owned: vec![],
            watches: vec![],
            resync: None,
            rate_limiter: Default::default(),
            indexes: vec![],
        };
        let encoded = proto::ControllerSpec::decode(encode(&spec).as_slice()).unwrap();
        assert!(encoded.primary.is_none() && encoded.owner_graph);
        assert_eq!(ControllerSpec::try_from(encoded).unwrap(), spec);
    }

    #[test]
    fn fan_out_cross_scope_field_rules_and_named_indexes_survive_the_round_trip() {
        let pvc = ResourceKind::new(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
        );
        let pv = ResourceKind::new("", "v1", "PersistentVolume", "persistentvolumes", false);
        let node = ResourceKind::new("", "v1", "Node", "nodes", false);
        let spec = ControllerSpec {
            name: "claims".into(),
            primary: Primary::Kind(pvc.clone()),
            mappings: vec![
                Mapping {
                    kind: pv,
                    rule: MappingRule::Field {
                        field_path: "spec.claimRef.name".into(),
                        namespace_path: Some("spec.claimRef.namespace".into()),
                    },
                },
                Mapping {
                    kind: node,
                    rule: MappingRule::FanOut,
                },
            ],
            prefetch_owned: vec![],
            watches: vec![],
            resync: None,
            rate_limiter: Default::default(),
            indexes: vec![crate::informer::IndexSpec {
                kind: pvc,
                name: "by-volume".into(),
                field_path: "spec.volumeName".into(),
            }],
        };
        let decoded = proto::ControllerSpec::decode(encode(&spec).as_slice()).unwrap();
        assert_eq!(ControllerSpec::try_from(decoded).unwrap(), spec);
    }
}
