//! Controller specs as stored in etcd (`controllers/<name>`): the protocol's `ControllerSpec`, encoded.

use flotilla_proto as proto;
use prost::Message;

use super::messages::{ControllerSpec, MappingRule, Primary};

/// Encodes a spec for etcd.
pub fn encode(spec: &ControllerSpec) -> Vec<u8> {
    let mappings = spec
        .mappings
        .iter()
        .map(|m| proto::Mapping {
            kind: Some((&m.kind).into()),
            rule: Some(match &m.rule {
                MappingRule::Owner => proto::mapping::Rule::Owner(proto::OwnerRule {}),
                MappingRule::Selector(path) => {
                    proto::mapping::Rule::Selector(proto::SelectorRule {
                        selector_path: path.clone(),
                    })
                }
                MappingRule::Field {
                    name_path,
                    namespace_path,
                } => proto::mapping::Rule::Field(proto::FieldRule {
                    field_path: name_path.clone(),
                    namespace_path: namespace_path.clone().unwrap_or_default(),
                }),
                MappingRule::FanOut => proto::mapping::Rule::FanOut(proto::FanOutRule {}),
            }),
        })
        .collect();
    let indexes = spec
        .indexes
        .iter()
        .map(|i| proto::IndexSpec {
            kind: Some((&i.kind).into()),
            name: i.name.clone(),
            field_path: i.field_path.clone(),
        })
        .collect();
    let limiter = spec.rate_limiter;
    let (primary, owner_graph) = match &spec.primary {
        Primary::Kind(kind) => (Some(kind.into()), false),
        Primary::OwnerGraph => (None, true),
    };
    proto::ControllerSpec {
        name: spec.name.clone(),
        primary,
        owner_graph,
        mappings,
        prefetch_owned: spec.prefetch_owned.iter().map(Into::into).collect(),
        watches: spec.watches.iter().map(Into::into).collect(),
        resync_seconds: spec.resync.map_or(0, |d| d.as_secs()),
        backoff_base_ms: u64::try_from(limiter.backoff.base_delay.as_millis()).unwrap_or(u64::MAX),
        backoff_max_ms: u64::try_from(limiter.backoff.max_delay.as_millis()).unwrap_or(u64::MAX),
        bucket_qps: limiter.bucket.qps,
        bucket_burst: limiter.bucket.burst,
        indexes,
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use flotilla_common::ResourceKind;

    use super::*;
    use crate::fleet::messages::Mapping;

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
                        name_path: "spec.claimRef.name".into(),
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
