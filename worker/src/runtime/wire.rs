//! The edge between the SDK's types and the protocol's: a controller's spec as Hello announces it, and
//! an outcome and its writes as Done reports them. Nothing past this file sees the SDK's types in
//! protocol form, and the SDK never sees the protocol.

use flotilla_proto as proto;
use flotilla_proto::spec as wire;
use flotilla_sdk::Action;
use flotilla_sdk::host::{ControllerSpec, Outcome, Write};

/// The spec sent in Hello, through the protocol crate's codec (the one the coordinator decodes with).
/// The SDK's `reads` are the protocol's `watches`; the rate limiter is left to the fleet's default.
pub(crate) fn spec(spec: &ControllerSpec) -> proto::ControllerSpec {
    proto::ControllerSpec::from(&wire::Spec {
        name: spec.name.clone(),
        primary: spec.primary.clone(),
        mappings: spec.mappings.clone(),
        prefetch_owned: spec.prefetch_owned.clone(),
        watches: spec.reads.clone(),
        resync: spec.resync,
        rate_limits: wire::RateLimits::default(),
        indexes: spec.indexes.clone(),
    })
}

/// One write as Done reports it.
pub(crate) fn write(w: &Write) -> proto::Write {
    w.into()
}

/// How one reconcile ended, as reported in `Done`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DoneOutcome {
    pub(crate) kind: proto::Outcome,
    pub(crate) requeue_after_ms: u64,
    pub(crate) error: String,
}

impl From<Outcome> for DoneOutcome {
    fn from(outcome: Outcome) -> Self {
        let error = outcome.error_message().unwrap_or_default().to_owned();
        match outcome.action().map(|a: Action| a.requeue_after()) {
            // No action: the key is retried with the fleet's rate limiter.
            None => Self {
                kind: proto::Outcome::Error,
                requeue_after_ms: 0,
                error,
            },
            Some(None) => Self {
                kind: proto::Outcome::Success,
                requeue_after_ms: 0,
                error,
            },
            Some(Some(after)) => Self {
                kind: proto::Outcome::RequeueAfter,
                requeue_after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
                error,
            },
        }
    }
}

impl DoneOutcome {
    /// The metric label of this outcome.
    pub(crate) fn label(&self) -> &'static str {
        match (self.kind, self.error.is_empty()) {
            (proto::Outcome::Success, true) => "success",
            (proto::Outcome::RequeueAfter, true) => "requeue_after",
            _ => "error",
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use flotilla_common::ResourceKind;
    use flotilla_sdk::host::{Mapping, MappingRule, WriteOp};

    use super::*;

    #[test]
    fn await_change_becomes_success_so_the_coordinator_forgets_the_key() {
        let outcome = DoneOutcome::from(Outcome::from_action(Action::await_change()));
        assert_eq!(outcome.kind, proto::Outcome::Success);
        assert_eq!(outcome.requeue_after_ms, 0);
        assert_eq!(outcome.label(), "success");
    }

    #[test]
    fn requeue_becomes_requeue_after_with_the_delay_in_milliseconds() {
        let outcome = DoneOutcome::from(Outcome::from_action(Action::requeue(
            Duration::from_millis(1500),
        )));
        assert_eq!(outcome.kind, proto::Outcome::RequeueAfter);
        assert_eq!(outcome.requeue_after_ms, 1500);
        assert_eq!(outcome.label(), "requeue_after");
    }

    #[test]
    fn an_error_becomes_error_with_its_text() {
        let outcome = DoneOutcome::from(Outcome::error("boom".into()));
        assert_eq!(outcome.kind, proto::Outcome::Error);
        assert_eq!(outcome.error, "boom");
        assert_eq!(outcome.label(), "error");
    }

    #[test]
    fn an_error_policy_requeue_keeps_the_error_text_and_counts_as_an_error() {
        let outcome = DoneOutcome::from(Outcome::from_policy(
            Action::requeue(Duration::from_secs(5)),
            "boom".into(),
        ));
        assert_eq!(outcome.kind, proto::Outcome::RequeueAfter);
        assert_eq!(outcome.requeue_after_ms, 5000);
        assert_eq!(outcome.error, "boom");
        assert_eq!(outcome.label(), "error");
    }

    #[test]
    fn a_spec_goes_on_the_wire_with_every_rule_and_whole_resync_seconds() {
        let pod = ResourceKind::new("", "v1", "Pod", "pods", true);
        let rs = ResourceKind::new("apps", "v1", "ReplicaSet", "replicasets", true);
        let mut sdk = ControllerSpec::new("replicaset", Some(rs.clone()));
        for rule in [
            MappingRule::Owner,
            MappingRule::Selector {
                selector_path: "spec.selector".into(),
            },
            MappingRule::Field {
                field_path: "metadata.name".into(),
                namespace_path: None,
            },
        ] {
            sdk.mappings.push(Mapping {
                kind: pod.clone(),
                rule,
            });
        }
        sdk.prefetch_owned.push(pod.clone());
        sdk.reads.push(pod.clone());
        sdk.resync = Some(Duration::from_millis(300));
        let wire = spec(&sdk);
        assert_eq!(wire.name, "replicaset");
        assert_eq!(wire.primary.map(ResourceKind::from), Some(rs));
        assert!(!wire.owner_graph);
        let rules: Vec<_> = wire
            .mappings
            .iter()
            .map(|m| m.rule.clone().unwrap())
            .collect();
        assert_eq!(
            rules,
            [
                proto::mapping::Rule::Owner(proto::OwnerRule {}),
                proto::mapping::Rule::Selector(proto::SelectorRule {
                    selector_path: "spec.selector".into()
                }),
                proto::mapping::Rule::Field(proto::FieldRule {
                    field_path: "metadata.name".into(),
                    namespace_path: String::new(),
                }),
            ]
        );
        assert_eq!(wire.prefetch_owned.len(), 1);
        assert_eq!(wire.watches.len(), 1);
        assert_eq!(wire.resync_seconds, 1);
        assert!(spec(&ControllerSpec::new("gc", None)).owner_graph);
    }

    #[test]
    fn fan_out_cross_scope_field_rules_and_named_indexes_go_on_the_wire() {
        let node = ResourceKind::new("", "v1", "Node", "nodes", false);
        let pv = ResourceKind::new("", "v1", "PersistentVolume", "persistentvolumes", false);
        let pvc = ResourceKind::new(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
        );
        let mut sdk = ControllerSpec::new("claims", Some(pvc.clone()));
        sdk.mappings.push(Mapping {
            kind: node,
            rule: MappingRule::FanOut,
        });
        sdk.mappings.push(Mapping {
            kind: pv.clone(),
            rule: MappingRule::Field {
                field_path: "spec.claimRef.name".into(),
                namespace_path: Some("spec.claimRef.namespace".into()),
            },
        });
        sdk.indexes.push(flotilla_sdk::host::IndexSpec {
            kind: pvc.clone(),
            name: "by-volume".into(),
            field_path: "spec.volumeName".into(),
        });
        let wire = spec(&sdk);
        let rules: Vec<_> = wire
            .mappings
            .iter()
            .map(|m| m.rule.clone().unwrap())
            .collect();
        assert_eq!(
            rules,
            [
                proto::mapping::Rule::FanOut(proto::FanOutRule {}),
                proto::mapping::Rule::Field(proto::FieldRule {
                    field_path: "spec.claimRef.name".into(),
                    namespace_path: "spec.claimRef.namespace".into(),
                }),
            ]
        );
        assert_eq!(
            wire.indexes,
            [proto::IndexSpec {
                kind: Some((&pvc).into()),
                name: "by-volume".into(),
                field_path: "spec.volumeName".into(),
            }]
        );
    }

    #[test]
    fn a_write_goes_on_the_wire_with_its_kind_key_version_and_operation() {
        let w = Write {
            kind: ResourceKind::new("", "v1", "ConfigMap", "configmaps", true),
            key: "ns/c".into(),
            resource_version: "7".into(),
            op: WriteOp::Delete,
        };
        let wire = write(&w);
        assert_eq!(wire.op(), proto::WriteOp::Delete);
        assert_eq!(
            (wire.key.as_str(), wire.resource_version.as_str()),
            ("ns/c", "7")
        );
        assert_eq!(wire.kind.unwrap().kind, "ConfigMap");
    }
}
