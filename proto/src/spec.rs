//! A controller's spec in both directions between the wire (`ControllerSpec`) and [`Spec`], the one
//! codec the worker (announcing its controllers in Hello) and the coordinator (reading Hellos, storing
//! specs in etcd) share, so the two cannot name or translate a field differently.
//!
//! [`Spec`] has the wire's fields under the wire's names, in domain types (kinds, durations, options
//! for "unset"). Decoding checks only structure (every kind and rule present); what a coordinator
//! accepts (names, bounds, paths) is its own policy, checked on the decoded [`Spec`]. Its mappings
//! and indexes are `flotilla-apimachinery`'s types, the ones the SDK declares, re-exported here.

use std::time::Duration;

use flotilla_apimachinery::ResourceKind;
pub use flotilla_apimachinery::{IndexSpec, Mapping, MappingRule};

use crate::mapping::Rule;

/// A controller's spec as it travels: what every worker running the controller must announce alike.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Unique in the fleet, like kube-controller-manager's (`replicaset`).
    pub name: String,
    /// The kind whose `namespace/name` keys the controller reconciles; `None` for an owner-graph
    /// controller (the wire's `owner_graph`, whose `primary` is then ignored).
    pub primary: Option<ResourceKind>,
    /// How events of related kinds become keys.
    pub mappings: Vec<Mapping>,
    /// Kinds whose objects controlled by the primary object ship with each item.
    pub prefetch_owned: Vec<ResourceKind>,
    /// Kinds the controller reads through the Cache service.
    pub watches: Vec<ResourceKind>,
    /// Period of the resync of every key; `None` for none. The wire counts whole seconds: a
    /// sub-second period goes out as one second, and a fraction of a second is dropped.
    pub resync: Option<Duration>,
    /// The workqueue rate limiter the controller asks for.
    pub rate_limits: RateLimits,
    /// Named indexes the controller lists by.
    pub indexes: Vec<IndexSpec>,
}

/// A controller's workqueue rate limiter as it travels; `None` (zero on the wire) asks for the fleet's
/// default, client-go's (5 ms, 1000 s, 10 qps, burst 100).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RateLimits {
    /// First per-item backoff; the wire counts milliseconds (sub-millisecond parts are dropped).
    pub backoff_base: Option<Duration>,
    /// Longest per-item backoff; in milliseconds on the wire.
    pub backoff_max: Option<Duration>,
    /// Items per second of the overall bucket.
    pub bucket_qps: Option<f64>,
    /// Burst of the overall bucket.
    pub bucket_burst: Option<u32>,
}

/// Why a wire spec does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A field the spec cannot do without is unset; named as the coordinator reports it
    /// (`spec.primary`, `mapping.kind`, `mapping.rule`, `index.kind`).
    #[error("missing field {0}")]
    Missing(&'static str),
}

impl From<&Spec> for crate::ControllerSpec {
    fn from(spec: &Spec) -> Self {
        let limits = &spec.rate_limits;
        Self {
            name: spec.name.clone(),
            primary: spec.primary.as_ref().map(Into::into),
            owner_graph: spec.primary.is_none(),
            mappings: spec.mappings.iter().map(Into::into).collect(),
            prefetch_owned: spec.prefetch_owned.iter().map(Into::into).collect(),
            watches: spec.watches.iter().map(Into::into).collect(),
            resync_seconds: spec.resync.map_or(0, |d| d.as_secs().max(1)),
            backoff_base_ms: limits.backoff_base.map_or(0, millis),
            backoff_max_ms: limits.backoff_max.map_or(0, millis),
            bucket_qps: limits.bucket_qps.unwrap_or(0.0),
            bucket_burst: limits.bucket_burst.unwrap_or(0),
            indexes: spec.indexes.iter().map(Into::into).collect(),
        }
    }
}

impl TryFrom<crate::ControllerSpec> for Spec {
    type Error = SpecError;

    /// # Errors
    /// [`SpecError::Missing`] for an unset primary kind (unless `owner_graph`), mapping kind, mapping
    /// rule or index kind.
    fn try_from(s: crate::ControllerSpec) -> Result<Self, SpecError> {
        let primary = if s.owner_graph {
            None
        } else {
            Some(kind(s.primary, "spec.primary")?)
        };
        Ok(Self {
            name: s.name,
            primary,
            mappings: s
                .mappings
                .into_iter()
                .map(Mapping::try_from)
                .collect::<Result<_, _>>()?,
            prefetch_owned: s.prefetch_owned.into_iter().map(Into::into).collect(),
            watches: s.watches.into_iter().map(Into::into).collect(),
            resync: (s.resync_seconds > 0).then(|| Duration::from_secs(s.resync_seconds)),
            rate_limits: RateLimits {
                backoff_base: (s.backoff_base_ms > 0)
                    .then(|| Duration::from_millis(s.backoff_base_ms)),
                backoff_max: (s.backoff_max_ms > 0)
                    .then(|| Duration::from_millis(s.backoff_max_ms)),
                // -0.0 too: zero asks for the default.
                bucket_qps: (s.bucket_qps != 0.0).then_some(s.bucket_qps),
                bucket_burst: (s.bucket_burst > 0).then_some(s.bucket_burst),
            },
            indexes: s
                .indexes
                .into_iter()
                .map(IndexSpec::try_from)
                .collect::<Result<_, _>>()?,
        })
    }
}

impl From<&Mapping> for crate::Mapping {
    fn from(m: &Mapping) -> Self {
        let rule = match &m.rule {
            MappingRule::Owner => Rule::Owner(crate::OwnerRule {}),
            MappingRule::Selector { selector_path } => Rule::Selector(crate::SelectorRule {
                selector_path: selector_path.clone(),
            }),
            MappingRule::Field {
                field_path,
                namespace_path,
            } => Rule::Field(crate::FieldRule {
                field_path: field_path.clone(),
                namespace_path: namespace_path.clone().unwrap_or_default(),
            }),
            MappingRule::FanOut => Rule::FanOut(crate::FanOutRule {}),
        };
        Self {
            kind: Some((&m.kind).into()),
            rule: Some(rule),
        }
    }
}

impl TryFrom<crate::Mapping> for Mapping {
    type Error = SpecError;

    fn try_from(m: crate::Mapping) -> Result<Self, SpecError> {
        // The rule first: a mapping without one is refused as such even when its kind is unset too.
        let rule = match m.rule.ok_or(SpecError::Missing("mapping.rule"))? {
            Rule::Owner(_) => MappingRule::Owner,
            Rule::Selector(r) => MappingRule::Selector {
                selector_path: r.selector_path,
            },
            Rule::Field(r) => MappingRule::Field {
                field_path: r.field_path,
                namespace_path: (!r.namespace_path.is_empty()).then_some(r.namespace_path),
            },
            Rule::FanOut(_) => MappingRule::FanOut,
        };
        Ok(Self {
            kind: kind(m.kind, "mapping.kind")?,
            rule,
        })
    }
}

impl From<&IndexSpec> for crate::IndexSpec {
    fn from(i: &IndexSpec) -> Self {
        Self {
            kind: Some((&i.kind).into()),
            name: i.name.clone(),
            field_path: i.field_path.clone(),
        }
    }
}

impl TryFrom<crate::IndexSpec> for IndexSpec {
    type Error = SpecError;

    fn try_from(i: crate::IndexSpec) -> Result<Self, SpecError> {
        Ok(Self {
            kind: kind(i.kind, "index.kind")?,
            name: i.name,
            field_path: i.field_path,
        })
    }
}

fn kind(k: Option<crate::ResourceKind>, field: &'static str) -> Result<ResourceKind, SpecError> {
    k.map(Into::into).ok_or(SpecError::Missing(field))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn kinds() -> impl Strategy<Value = ResourceKind> {
        ("[a-z]{0,5}", "v[1-3]", "[A-Z][a-z]{1,6}", any::<bool>()).prop_map(
            |(group, version, kind, namespaced)| {
                let plural = format!("{}s", kind.to_lowercase());
                ResourceKind::new(&group, &version, &kind, &plural, namespaced)
            },
        )
    }

    fn rules() -> impl Strategy<Value = MappingRule> {
        prop_oneof![
            Just(MappingRule::Owner),
            "[a-z.]{1,12}".prop_map(|selector_path| MappingRule::Selector { selector_path }),
            ("[a-z.]{1,12}", proptest::option::of("[a-z.]{1,12}")).prop_map(
                |(field_path, namespace_path)| MappingRule::Field {
                    field_path,
                    namespace_path,
                }
            ),
            Just(MappingRule::FanOut),
        ]
    }

    /// Specs as either side makes them: whole seconds of resync, whole milliseconds of backoff, and
    /// unset rather than zero for "the default".
    fn specs() -> impl Strategy<Value = Spec> {
        let limits = (
            proptest::option::of(1..1_000_000u64),
            proptest::option::of(1..1_000_000u64),
            proptest::option::of(0.01..1000.0f64),
            proptest::option::of(1..1000u32),
        )
            .prop_map(|(base, max, qps, burst)| RateLimits {
                backoff_base: base.map(Duration::from_millis),
                backoff_max: max.map(Duration::from_millis),
                bucket_qps: qps,
                bucket_burst: burst,
            });
        let index =
            (kinds(), "[a-z-]{1,8}", "[a-z.]{1,12}").prop_map(|(kind, name, field_path)| {
                IndexSpec {
                    kind,
                    name,
                    field_path,
                }
            });
        (
            "[a-z-]{1,12}",
            proptest::option::of(kinds()),
            proptest::collection::vec((kinds(), rules()), 0..4),
            proptest::collection::vec(kinds(), 0..3),
            proptest::collection::vec(kinds(), 0..3),
            proptest::option::of(1..86_400u64),
            limits,
            proptest::collection::vec(index, 0..3),
        )
            .prop_map(
                |(
                    name,
                    primary,
                    mappings,
                    prefetch_owned,
                    watches,
                    resync,
                    rate_limits,
                    indexes,
                )| {
                    Spec {
                        name,
                        primary,
                        mappings: mappings
                            .into_iter()
                            .map(|(kind, rule)| Mapping { kind, rule })
                            .collect(),
                        prefetch_owned,
                        watches,
                        resync: resync.map(Duration::from_secs),
                        rate_limits,
                        indexes,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn every_spec_survives_the_round_trip_through_the_wire(spec in specs()) {
            let wire = crate::ControllerSpec::from(&spec);
            prop_assert_eq!(wire.owner_graph, spec.primary.is_none());
            prop_assert_eq!(Spec::try_from(wire).unwrap(), spec);
        }
    }

    #[test]
    fn a_sub_second_resync_goes_out_as_one_second_and_fractions_are_dropped() {
        let mut spec = Spec::try_from(crate::ControllerSpec {
            owner_graph: true,
            ..Default::default()
        })
        .unwrap();
        spec.resync = Some(Duration::from_millis(300));
        assert_eq!(crate::ControllerSpec::from(&spec).resync_seconds, 1);
        spec.resync = Some(Duration::from_millis(2500));
        assert_eq!(crate::ControllerSpec::from(&spec).resync_seconds, 2);
    }

    #[test]
    fn an_owner_graph_spec_ignores_a_primary_kind_and_others_need_one() {
        let pods = ResourceKind::new("", "v1", "Pod", "pods", true);
        let wire = crate::ControllerSpec {
            name: "gc".into(),
            primary: Some((&pods).into()),
            owner_graph: true,
            ..Default::default()
        };
        assert_eq!(Spec::try_from(wire).unwrap().primary, None);
        let err = Spec::try_from(crate::ControllerSpec::default()).unwrap_err();
        assert_eq!(err, SpecError::Missing("spec.primary"));
    }

    #[test]
    fn a_mapping_or_index_without_its_kind_or_rule_is_refused_naming_the_field() {
        let pods = ResourceKind::new("", "v1", "Pod", "pods", true);
        let spec = |mappings, indexes| crate::ControllerSpec {
            owner_graph: true,
            mappings,
            indexes,
            ..Default::default()
        };
        let no_rule = crate::Mapping {
            kind: Some((&pods).into()),
            rule: None,
        };
        let no_kind = crate::Mapping {
            kind: None,
            rule: Some(Rule::Owner(crate::OwnerRule {})),
        };
        let index = crate::IndexSpec::default();
        for (wire, field) in [
            (spec(vec![no_rule], vec![]), "mapping.rule"),
            (spec(vec![no_kind], vec![]), "mapping.kind"),
            (spec(vec![], vec![index]), "index.kind"),
        ] {
            assert_eq!(Spec::try_from(wire), Err(SpecError::Missing(field)));
        }
    }

    #[test]
    fn zero_rate_limits_and_an_empty_namespace_path_mean_unset() {
        let wire = crate::ControllerSpec {
            owner_graph: true,
            bucket_qps: -0.0,
            mappings: vec![crate::Mapping {
                kind: Some((&ResourceKind::new("", "v1", "Pod", "pods", true)).into()),
                rule: Some(Rule::Field(crate::FieldRule {
                    field_path: "spec.nodeName".into(),
                    namespace_path: String::new(),
                })),
            }],
            ..Default::default()
        };
        let spec = Spec::try_from(wire).unwrap();
        assert_eq!(spec.rate_limits, RateLimits::default());
        assert_eq!(
            spec.mappings[0].rule,
            MappingRule::Field {
                field_path: "spec.nodeName".into(),
                namespace_path: None,
            }
        );
    }
}
