//! The dispatcher's own view of the protocol: what workers say, as validated domain types. The gRPC edge
//! (`dispatch_service`) converts protocol messages into these and refuses what does not convert.

use std::time::Duration;

use flotilla_common::ResourceKind;
use flotilla_proto as proto;

use crate::queue::{BucketConfig, ControllerRateLimiterConfig, ExponentialBackoffConfig};

/// A worker's first message on a stream.
#[derive(Debug, Clone)]
pub struct Hello {
    pub worker_id: String,
    pub lease_id: i64,
    pub controllers: Vec<(ControllerSpec, u32)>,
    pub known_term: u64,
    pub held: Vec<Held>,
}

/// An item a worker still runs, possibly from an earlier leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub controller: String,
    pub key: String,
    pub shard: u32,
    pub item_id: u64,
    pub term: u64,
}

/// How events of a related kind become keys of a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappingRule {
    /// The object's controller ownerReference, when it names the primary kind.
    Owner,
    /// Primary objects in the same namespace whose selector at this path matches the object's labels.
    Selector(String),
    /// The primary object named by the value at this path, in the same namespace.
    Field(String),
}

/// A related kind and its rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub kind: ResourceKind,
    pub rule: MappingRule,
}

/// What a controller's keys name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Primary {
    /// `namespace/name` keys of one kind.
    Kind(ResourceKind),
    /// Kinded keys over the ownerReference graph of every deletable resource (the protocol's
    /// `owner_graph`; see `super::owner_graph`).
    OwnerGraph,
}

/// What a controller needs from the coordinator; every worker running it must send the same spec.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerSpec {
    pub name: String,
    pub primary: Primary,
    pub mappings: Vec<Mapping>,
    pub prefetch_owned: Vec<ResourceKind>,
    pub watches: Vec<ResourceKind>,
    pub resync: Option<Duration>,
    pub rate_limiter: ControllerRateLimiterConfig,
}

impl ControllerSpec {
    /// Every kind the controller names, so needs an informer for; dispatch waits until all of them
    /// synced. An owner-graph controller's discovered kinds are not among them.
    pub fn kinds(&self) -> Vec<ResourceKind> {
        let mut kinds = match &self.primary {
            Primary::Kind(kind) => vec![kind.clone()],
            Primary::OwnerGraph => Vec::new(),
        };
        kinds.extend(self.mappings.iter().map(|m| m.kind.clone()));
        kinds.extend(self.prefetch_owned.iter().cloned());
        kinds.extend(self.watches.iter().cloned());
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

/// How a reconcile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Forget the key.
    Success,
    /// Forget failures, run again after the delay.
    RequeueAfter(Duration),
    /// Retry with the controller's rate limiter.
    Error,
}

/// What a reconcile wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOp {
    Create,
    Update,
    Delete,
}

/// An object a reconcile wrote, for read-your-writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub kind: ResourceKind,
    pub key: String,
    /// The resourceVersion the API server returned; `None` for a delete that returned a Status.
    pub resource_version: Option<u64>,
    pub op: WriteOp,
}

/// A finished item.
#[derive(Debug, Clone)]
pub struct Done {
    pub item_id: u64,
    pub term: u64,
    pub outcome: Outcome,
    pub writes: Vec<Write>,
    /// Writes left out because they did not convert: they get no read-your-writes hold, but the item
    /// still finishes (holding it until the worker reconnects would stall the key for nothing).
    pub invalid_writes: Vec<ConvertError>,
    pub error: String,
}

/// Why a peer's message was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    #[error("missing field {0}")]
    Missing(&'static str),
    #[error("invalid field {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn kind(k: Option<proto::ResourceKind>, field: &'static str) -> Result<ResourceKind, ConvertError> {
    let k: ResourceKind = k.ok_or(ConvertError::Missing(field))?.into();
    k.validate()
        .map_err(|reason| ConvertError::Invalid { field, reason })?;
    Ok(k)
}

impl TryFrom<proto::ControllerSpec> for ControllerSpec {
    type Error = ConvertError;

    fn try_from(s: proto::ControllerSpec) -> Result<Self, ConvertError> {
        if s.name.is_empty() || s.name.len() > 253 {
            return Err(ConvertError::Invalid {
                field: "spec.name",
                reason: "must be 1 to 253 characters".into(),
            });
        }
        let mut mappings = Vec::with_capacity(s.mappings.len());
        for m in s.mappings {
            let rule = match m.rule {
                Some(proto::mapping::Rule::Owner(_)) => MappingRule::Owner,
                Some(proto::mapping::Rule::Selector(r)) if !r.selector_path.is_empty() => {
                    MappingRule::Selector(r.selector_path)
                }
                Some(proto::mapping::Rule::Field(r)) if !r.field_path.is_empty() => {
                    MappingRule::Field(r.field_path)
                }
                _ => return Err(ConvertError::Missing("mapping.rule")),
            };
            mappings.push(Mapping {
                kind: kind(m.kind, "mapping.kind")?,
                rule,
            });
        }
        let defaults = ControllerRateLimiterConfig::default();
        let rate_limiter = ControllerRateLimiterConfig {
            backoff: ExponentialBackoffConfig {
                base_delay: nonzero_ms(s.backoff_base_ms).unwrap_or(defaults.backoff.base_delay),
                max_delay: nonzero_ms(s.backoff_max_ms).unwrap_or(defaults.backoff.max_delay),
            },
            bucket: BucketConfig {
                qps: if s.bucket_qps > 0.0 {
                    s.bucket_qps
                } else {
                    defaults.bucket.qps
                },
                burst: if s.bucket_burst > 0 {
                    s.bucket_burst
                } else {
                    defaults.bucket.burst
                },
            },
        };
        rate_limiter.validate().map_err(|e| ConvertError::Invalid {
            field: "spec.rate_limiter",
            reason: e.to_string(),
        })?;
        Ok(Self {
            name: s.name,
            primary: if s.owner_graph {
                Primary::OwnerGraph
            } else {
                Primary::Kind(kind(s.primary, "spec.primary")?)
            },
            mappings,
            prefetch_owned: s
                .prefetch_owned
                .into_iter()
                .map(|k| kind(Some(k), "spec.prefetch_owned"))
                .collect::<Result<_, _>>()?,
            watches: s
                .watches
                .into_iter()
                .map(|k| kind(Some(k), "spec.watches"))
                .collect::<Result<_, _>>()?,
            resync: (s.resync_seconds > 0).then(|| Duration::from_secs(s.resync_seconds)),
            rate_limiter,
        })
    }
}

fn nonzero_ms(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

impl TryFrom<proto::Hello> for Hello {
    type Error = ConvertError;

    fn try_from(h: proto::Hello) -> Result<Self, ConvertError> {
        if h.worker_id.is_empty() {
            return Err(ConvertError::Missing("hello.worker_id"));
        }
        let controllers = h
            .controllers
            .into_iter()
            .map(|c| {
                let spec = ControllerSpec::try_from(
                    c.spec.ok_or(ConvertError::Missing("controllers.spec"))?,
                )?;
                if c.concurrency == 0 {
                    return Err(ConvertError::Invalid {
                        field: "controllers.concurrency",
                        reason: format!("controller {} has concurrency 0", spec.name),
                    });
                }
                Ok((spec, c.concurrency))
            })
            .collect::<Result<_, _>>()?;
        let held = h
            .held
            .into_iter()
            .map(|i| Held {
                controller: i.controller,
                key: i.key,
                shard: i.shard,
                item_id: i.item_id,
                term: i.term,
            })
            .collect();
        Ok(Self {
            worker_id: h.worker_id,
            lease_id: h.lease_id,
            controllers,
            known_term: h.known_term,
            held,
        })
    }
}

impl TryFrom<proto::Done> for Done {
    type Error = ConvertError;

    fn try_from(d: proto::Done) -> Result<Self, ConvertError> {
        let outcome = match proto::Outcome::try_from(d.outcome) {
            Ok(proto::Outcome::Success) => Outcome::Success,
            Ok(proto::Outcome::RequeueAfter) => {
                Outcome::RequeueAfter(Duration::from_millis(d.requeue_after_ms))
            }
            Ok(proto::Outcome::Error) => Outcome::Error,
            _ => {
                return Err(ConvertError::Invalid {
                    field: "done.outcome",
                    reason: format!("unknown outcome {}", d.outcome),
                });
            }
        };
        let (writes, invalid_writes): (Vec<_>, Vec<_>) = d
            .writes
            .into_iter()
            .map(|w| {
                let op = match proto::WriteOp::try_from(w.op) {
                    Ok(proto::WriteOp::Create) => WriteOp::Create,
                    Ok(proto::WriteOp::Update) => WriteOp::Update,
                    Ok(proto::WriteOp::Delete) => WriteOp::Delete,
                    _ => {
                        return Err(ConvertError::Invalid {
                            field: "write.op",
                            reason: format!("unknown op {}", w.op),
                        });
                    }
                };
                // resourceVersions are opaque by contract but etcd revisions in every etcd-backed API
                // server; one that is not a number cannot be compared, so it gets no read-your-writes
                // hold (the write is still applied, only not waited for).
                let resource_version = w.resource_version.parse().ok();
                Ok(Write {
                    kind: kind(w.kind, "write.kind")?,
                    key: w.key,
                    resource_version,
                    op,
                })
            })
            .partition(Result::is_ok);
        Ok(Self {
            item_id: d.item_id,
            term: d.term,
            outcome,
            writes: writes.into_iter().filter_map(Result::ok).collect(),
            invalid_writes: invalid_writes.into_iter().filter_map(Result::err).collect(),
            error: d.error,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_done_with_an_unreadable_write_still_finishes_and_names_the_write() {
        let write = |kind: &str| proto::Write {
            kind: Some(proto::ResourceKind {
                group: String::new(),
                version: "v1".into(),
                kind: kind.into(),
                plural: "configmaps".into(),
                namespaced: true,
            }),
            key: "ns/a".into(),
            resource_version: "7".into(),
            op: proto::WriteOp::Update.into(),
        };
        let done = Done::try_from(proto::Done {
            item_id: 3,
            term: 1,
            outcome: proto::Outcome::Success.into(),
            writes: vec![write("ConfigMap"), write("")],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(done.writes.len(), 1);
        assert_eq!(done.writes[0].resource_version, Some(7));
        assert_eq!(done.invalid_writes.len(), 1);
    }

    #[test]
    fn a_done_with_an_unknown_outcome_is_refused() {
        let refused = Done::try_from(proto::Done {
            outcome: 99,
            ..Default::default()
        });
        assert!(refused.is_err());
    }
}
