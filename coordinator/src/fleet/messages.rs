//! The dispatcher's own view of the protocol: what workers say, as validated domain types. The gRPC edge
//! (`dispatch_service`) converts protocol messages into these and refuses what does not convert.

use std::time::Duration;

use flotilla_common::{ResourceKind, TraceContext};
use flotilla_proto as proto;

use crate::informer::IndexSpec;
use crate::queue::{BucketConfig, ControllerRateLimiterConfig, ExponentialBackoffConfig};

/// What a peer may say, beyond which a message is refused (or, where refusing would stall a key, the
/// value is clamped). The same checks run on controller specs loaded from etcd, so a spec that slipped in
/// once cannot crash every later leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most a worker may advertise for one controller (`--max-controller-concurrency`). Default
    /// 10,000: far above any real `--concurrent-*-syncs`, low enough that sums over a worker's
    /// controllers cannot overflow and no advertisement can claim the fleet's shards.
    pub max_concurrency: u32,
    /// Most distinct kinds one Hello's controllers may name together (`--max-worker-kinds`). Each kind
    /// is an informer (a list and a watch on the API server, its objects in memory); every controller
    /// of kube-controller-manager together names about 50. Default 128: room for a worker running all
    /// of them and a few custom controllers, while a Hello naming thousands (the probe's 255
    /// controllers of 256 kinds each started 65,283 informers) is refused before anything starts.
    pub max_kinds: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_concurrency: 10_000,
            max_kinds: 128,
        }
    }
}

/// Longest key: a kinded key is `<group>/<version>/<plural>/<namespace>/<name>`, at most
/// 253 + 63 + 63 + 63 + 253 characters and four slashes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Resync periods outside this range are refused: below it a controller would spin the queue, above it
/// a resync is meaningless (and `now + period` must not overflow).
pub const RESYNC_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(24 * 3600);
/// A requeue further out than this is clamped to it (and counted): refusing the Done would hold the key.
/// A year, as the queue's own bound on delays.
pub const MAX_REQUEUE_AFTER: Duration = Duration::from_secs(365 * 24 * 3600);
/// Longest resourceVersion in a write (etcd revisions have at most 20 digits; other servers' opaque
/// versions are short too).
pub const MAX_RESOURCE_VERSION_BYTES: usize = 64;
/// Longest error text kept from a Done; longer ones are cut (they are for logs and status only).
pub const MAX_ERROR_BYTES: usize = 4096;
/// Most controllers one worker may run, and most mappings or kinds one spec may name.
pub const MAX_CONTROLLERS: usize = 256;
/// Most named indexes one spec may declare: each costs the coordinator a map entry per indexed object.
pub const MAX_INDEXES: usize = 32;
/// Longest backoff a spec may ask for: a day (client-go's default maximum is 1000 s).
const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);
/// Bounds of a spec's bucket: slower than one item per 100 s stalls a controller; faster than this is
/// no limit at all.
const BUCKET_QPS_RANGE: std::ops::RangeInclusive<f64> = 0.01..=100_000.0;
const MAX_BUCKET_BURST: u32 = 100_000;

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

/// How events of a related kind become keys of a controller, and its rule: the protocol crate's types,
/// so the coordinator and the workers name every field of a mapping alike.
pub use flotilla_proto::spec::{Mapping, MappingRule};

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
    /// Named indexes the controller lists by; their kinds need informers as `watches` do.
    pub indexes: Vec<IndexSpec>,
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
        kinds.extend(self.indexes.iter().map(|i| i.kind.clone()));
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

/// An object a reconcile wrote, for read-your-writes: the shared vocabulary's type, as the worker's
/// recording client made it (its resourceVersion is compared as [`Write::revision`]).
pub use flotilla_common::{Write, WriteOp};

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

/// Why the leader refused a worker's Hello (the fields were fine; the worker is not welcome now). The
/// gRPC edge maps it to a status code.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum HelloRefused {
    /// The worker has seen a newer leader: this one is stale.
    #[error("worker {worker} has seen term {seen}, newer than this leader's term {term}")]
    NewerTerm {
        worker: String,
        seen: u64,
        term: u64,
    },
    /// No registration in etcd on the lease the Hello names.
    #[error("worker {worker} is not registered in etcd with lease {lease:x}")]
    Unregistered { worker: String, lease: i64 },
    /// The registration went while the Hello was handled.
    #[error("worker {worker} lost its registration")]
    LostRegistration { worker: String },
    /// etcd did not answer the registration check; the worker retries.
    #[error("cannot check the registration in etcd; retry")]
    RegistryUnavailable,
}

/// Why a peer's message was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    #[error("missing field {0}")]
    Missing(&'static str),
    #[error("invalid field {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn valid_kind(k: ResourceKind, field: &'static str) -> Result<ResourceKind, ConvertError> {
    k.validate()
        .map_err(|reason| ConvertError::Invalid { field, reason })?;
    Ok(k)
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConvertError {
    ConvertError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// A controller name: a DNS-1123 label, like kube-controller-manager's (`replicaset`, `garbagecollector`).
fn controller_name(name: &str, field: &'static str) -> Result<(), ConvertError> {
    flotilla_common::validate_label(name).map_err(|reason| invalid(field, reason))
}

fn key(key: &str, field: &'static str) -> Result<(), ConvertError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(invalid(
            field,
            format!("must be 1 to {MAX_KEY_BYTES} bytes, not {}", key.len()),
        ));
    }
    Ok(())
}

fn at_most<T>(items: &[T], max: usize, field: &'static str) -> Result<(), ConvertError> {
    if items.len() > max {
        return Err(invalid(
            field,
            format!("at most {max} entries, not {}", items.len()),
        ));
    }
    Ok(())
}

/// A field path of a mapping rule (`spec.selector`): short, dotted, no empty segment.
fn field_path(path: &str, field: &'static str) -> Result<(), ConvertError> {
    if path.is_empty() || path.len() > 253 || path.split('.').any(str::is_empty) {
        return Err(invalid(
            field,
            "must be a dotted path of 1 to 253 characters",
        ));
    }
    Ok(())
}

/// A mapping's rule, its paths checked.
fn mapping_rule(rule: &MappingRule) -> Result<(), ConvertError> {
    match rule {
        MappingRule::Owner | MappingRule::FanOut => {}
        MappingRule::Selector { selector_path } => {
            field_path(selector_path, "mapping.selector_path")?;
        }
        MappingRule::Field {
            field_path: name_path,
            namespace_path,
        } => {
            field_path(name_path, "mapping.field_path")?;
            if let Some(namespace_path) = namespace_path {
                field_path(namespace_path, "mapping.namespace_path")?;
            }
        }
    }
    Ok(())
}

/// A spec's named indexes: at most [`MAX_INDEXES`], each with a valid kind and path and a name that is
/// a DNS-1123 label, not a built-in index's, and not declared twice for one kind.
fn indexes(declared: Vec<proto::spec::IndexSpec>) -> Result<Vec<IndexSpec>, ConvertError> {
    at_most(&declared, MAX_INDEXES, "spec.indexes")?;
    let mut out: Vec<IndexSpec> = Vec::with_capacity(declared.len());
    for i in declared {
        flotilla_common::validate_label(&i.name)
            .map_err(|reason| invalid("index.name", format!("{:?}: {reason}", i.name)))?;
        if flotilla_common::BUILTIN_INDEXES.contains(&i.name.as_str()) {
            return Err(invalid(
                "index.name",
                format!(
                    "{:?} is a built-in index; declare yours under another name",
                    i.name
                ),
            ));
        }
        field_path(&i.field_path, "index.field_path")?;
        let kind = valid_kind(i.kind, "index.kind")?;
        if out.iter().any(|o| o.kind == kind && o.name == i.name) {
            return Err(invalid(
                "index.name",
                format!("index {:?} of {kind} is declared twice", i.name),
            ));
        }
        out.push(IndexSpec {
            kind,
            name: i.name,
            field_path: i.field_path,
        });
    }
    Ok(out)
}

impl TryFrom<proto::ControllerSpec> for ControllerSpec {
    type Error = ConvertError;

    /// Decodes with the protocol's codec (an unset kind or rule is [`ConvertError::Missing`]), then
    /// checks the decoded spec as the conversion from `proto::spec::Spec` does. Specs loaded from etcd
    /// go through here too.
    fn try_from(s: proto::ControllerSpec) -> Result<Self, ConvertError> {
        let spec = proto::spec::Spec::try_from(s)
            .map_err(|proto::spec::SpecError::Missing(field)| ConvertError::Missing(field))?;
        Self::try_from(spec)
    }
}

impl TryFrom<proto::spec::Spec> for ControllerSpec {
    type Error = ConvertError;

    /// Checks every field: a name that is a DNS-1123 label, at most [`MAX_CONTROLLERS`] mappings and
    /// kinds of each sort, a resync in [`RESYNC_RANGE`] (or none), a rate limiter within bounds, named
    /// indexes as [`indexes`] checks them.
    fn try_from(s: proto::spec::Spec) -> Result<Self, ConvertError> {
        controller_name(&s.name, "spec.name")?;
        at_most(&s.mappings, MAX_CONTROLLERS, "spec.mappings")?;
        at_most(&s.prefetch_owned, MAX_CONTROLLERS, "spec.prefetch_owned")?;
        at_most(&s.watches, MAX_CONTROLLERS, "spec.watches")?;
        if let Some(resync) = s.resync
            && !RESYNC_RANGE.contains(&resync)
        {
            return Err(invalid(
                "spec.resync_seconds",
                format!(
                    "must be 0 (none) or 1 to 86400 seconds, not {}",
                    resync.as_secs()
                ),
            ));
        }
        let limits = s.rate_limits;
        if limits.backoff_base.is_some_and(|d| d > MAX_BACKOFF)
            || limits.backoff_max.is_some_and(|d| d > MAX_BACKOFF)
        {
            return Err(invalid(
                "spec.backoff_ms",
                "backoff delays must be at most a day",
            ));
        }
        if let Some(qps) = limits.bucket_qps
            && !BUCKET_QPS_RANGE.contains(&qps)
        {
            return Err(invalid(
                "spec.bucket_qps",
                format!("must be 0 (default) or 0.01 to 100000, not {qps}"),
            ));
        }
        if let Some(burst) = limits.bucket_burst
            && burst > MAX_BUCKET_BURST
        {
            return Err(invalid(
                "spec.bucket_burst",
                format!("must be at most {MAX_BUCKET_BURST}, not {burst}"),
            ));
        }
        let mut mappings = Vec::with_capacity(s.mappings.len());
        for m in s.mappings {
            mapping_rule(&m.rule)?;
            mappings.push(Mapping {
                kind: valid_kind(m.kind, "mapping.kind")?,
                rule: m.rule,
            });
        }
        let defaults = ControllerRateLimiterConfig::default();
        let rate_limiter = ControllerRateLimiterConfig {
            backoff: ExponentialBackoffConfig {
                base_delay: limits.backoff_base.unwrap_or(defaults.backoff.base_delay),
                max_delay: limits.backoff_max.unwrap_or(defaults.backoff.max_delay),
            },
            bucket: BucketConfig {
                qps: limits.bucket_qps.unwrap_or(defaults.bucket.qps),
                burst: limits.bucket_burst.unwrap_or(defaults.bucket.burst),
            },
        };
        rate_limiter.validate().map_err(|e| ConvertError::Invalid {
            field: "spec.rate_limiter",
            reason: e.to_string(),
        })?;
        Ok(Self {
            name: s.name,
            primary: match s.primary {
                None => Primary::OwnerGraph,
                Some(kind) => Primary::Kind(valid_kind(kind, "spec.primary")?),
            },
            mappings,
            prefetch_owned: s
                .prefetch_owned
                .into_iter()
                .map(|k| valid_kind(k, "spec.prefetch_owned"))
                .collect::<Result<_, _>>()?,
            watches: s
                .watches
                .into_iter()
                .map(|k| valid_kind(k, "spec.watches"))
                .collect::<Result<_, _>>()?,
            resync: s.resync,
            rate_limiter,
            indexes: indexes(s.indexes)?,
        })
    }
}

impl Hello {
    /// Converts and checks a Hello: a worker id that is a DNS-1123 subdomain, at most
    /// [`MAX_CONTROLLERS`] controllers naming at most `limits.max_kinds` kinds together, each with a
    /// valid spec, a concurrency in
    /// `1..=limits.max_concurrency`, no controller twice, and at most as many held items as the summed
    /// concurrency, with bounded names and keys.
    ///
    /// # Errors
    /// The first field that fails, as a [`ConvertError`]; the edge answers `INVALID_ARGUMENT` with it.
    pub fn from_proto(h: proto::Hello, limits: &Limits) -> Result<Self, ConvertError> {
        if h.worker_id.is_empty() {
            return Err(ConvertError::Missing("hello.worker_id"));
        }
        flotilla_common::validate_subdomain(&h.worker_id)
            .map_err(|reason| invalid("hello.worker_id", reason))?;
        if h.lease_id == 0 {
            return Err(ConvertError::Missing("hello.lease_id"));
        }
        at_most(&h.controllers, MAX_CONTROLLERS, "hello.controllers")?;
        let mut controllers: Vec<(ControllerSpec, u32)> = Vec::with_capacity(h.controllers.len());
        for c in h.controllers {
            let spec =
                ControllerSpec::try_from(c.spec.ok_or(ConvertError::Missing("controllers.spec"))?)?;
            if c.concurrency == 0 || c.concurrency > limits.max_concurrency {
                return Err(invalid(
                    "controllers.concurrency",
                    format!(
                        "controller {} has concurrency {}; it must be 1 to {}",
                        spec.name, c.concurrency, limits.max_concurrency
                    ),
                ));
            }
            if controllers.iter().any(|(s, _)| s.name == spec.name) {
                return Err(invalid(
                    "controllers.spec.name",
                    format!("controller {} is listed twice", spec.name),
                ));
            }
            controllers.push((spec, c.concurrency));
        }
        let mut kinds: Vec<ResourceKind> =
            controllers.iter().flat_map(|(s, _)| s.kinds()).collect();
        kinds.sort();
        kinds.dedup();
        if kinds.len() > limits.max_kinds {
            return Err(invalid(
                "hello.controllers",
                format!(
                    "the controllers name {} distinct kinds together; at most {} (--max-worker-kinds)",
                    kinds.len(),
                    limits.max_kinds
                ),
            ));
        }
        // A worker holds at most what it may run at once.
        let runs_at_once = controllers
            .iter()
            .fold(0usize, |sum, (_, c)| sum.saturating_add(*c as usize));
        if h.held.len() > runs_at_once {
            return Err(invalid(
                "hello.held",
                format!(
                    "{} held items, more than the {runs_at_once} the worker may run at once",
                    h.held.len()
                ),
            ));
        }
        let held = h
            .held
            .into_iter()
            .map(|i| {
                controller_name(&i.controller, "held.controller")?;
                key(&i.key, "held.key")?;
                Ok(Held {
                    controller: i.controller,
                    key: i.key,
                    shard: i.shard,
                    item_id: i.item_id,
                    term: i.term,
                })
            })
            .collect::<Result<_, ConvertError>>()?;
        Ok(Self {
            worker_id: h.worker_id,
            lease_id: h.lease_id,
            controllers,
            known_term: h.known_term,
            held,
        })
    }
}

/// A worker's grant of more items of a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit {
    pub controller: String,
    pub n: u32,
}

impl Credit {
    /// Converts and checks a Credit: a controller name that is a DNS-1123 label and `n` in
    /// `1..=limits.max_concurrency` (the dispatcher further caps credits at the worker's advertised
    /// concurrency minus what it holds).
    ///
    /// # Errors
    /// The failing field as a [`ConvertError`].
    pub fn from_proto(c: proto::Credit, limits: &Limits) -> Result<Self, ConvertError> {
        controller_name(&c.controller, "credit.controller")?;
        if c.n == 0 || c.n > limits.max_concurrency {
            return Err(invalid(
                "credit.n",
                format!("must be 1 to {}, not {}", limits.max_concurrency, c.n),
            ));
        }
        Ok(Self {
            controller: c.controller,
            n: c.n,
        })
    }
}

impl TryFrom<proto::Done> for Done {
    type Error = ConvertError;

    fn try_from(d: proto::Done) -> Result<Self, ConvertError> {
        let outcome = match proto::Outcome::try_from(d.outcome) {
            Ok(proto::Outcome::Success) => Outcome::Success,
            Ok(proto::Outcome::RequeueAfter) => Outcome::RequeueAfter(
                Duration::from_millis(d.requeue_after_ms).min(MAX_REQUEUE_AFTER),
            ),
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
                let w = Write::try_from(w).map_err(|e| match e {
                    proto::WriteError::UnknownOp(op) => {
                        invalid("write.op", format!("unknown op {op}"))
                    }
                    proto::WriteError::MissingKind => ConvertError::Missing("write.kind"),
                })?;
                // resourceVersions are opaque by contract but etcd revisions in every etcd-backed API
                // server; one that is not a number cannot be compared, so it gets no read-your-writes
                // hold (the write is still applied, only not waited for: see `Write::revision`).
                if w.resource_version.len() > MAX_RESOURCE_VERSION_BYTES {
                    return Err(invalid(
                        "write.resource_version",
                        format!("longer than {MAX_RESOURCE_VERSION_BYTES} bytes"),
                    ));
                }
                key(&w.key, "write.key")?;
                valid_kind(w.kind.clone(), "write.kind")?;
                Ok(w)
            })
            .partition(Result::is_ok);
        let mut error = d.error;
        if error.len() > MAX_ERROR_BYTES {
            let mut at = MAX_ERROR_BYTES;
            while !error.is_char_boundary(at) {
                at -= 1;
            }
            error.truncate(at);
        }
        Ok(Self {
            item_id: d.item_id,
            term: d.term,
            outcome,
            writes: writes.into_iter().filter_map(Result::ok).collect(),
            invalid_writes: invalid_writes.into_iter().filter_map(Result::err).collect(),
            error,
        })
    }
}

/// A traced reconcile's announcement that it is about to write a named object (`WriteIntent`), checked:
/// the object as the request's path names it, and the context of the request's client span. The
/// dispatcher links the object's next watch event (the write's echo) to that span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteIntent {
    /// API group; empty for the core group.
    pub group: String,
    /// API version the request used.
    pub version: String,
    /// Resource (plural), e.g. `replicasets`.
    pub resource: String,
    /// The object's namespace; `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// The request's client span.
    pub trace: TraceContext,
}

impl WriteIntent {
    /// The object's cache key: `namespace/name`, or `name` when cluster-scoped.
    pub fn object_key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// A path segment of a write intent: 1 to `max` bytes of lowercase letters, digits, `-` and `.`.
fn segment(text: &str, max: usize, field: &'static str) -> Result<(), ConvertError> {
    let ok = !text.is_empty()
        && text.len() <= max
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("must be 1 to {max} lowercase letters, digits, '-' or '.'"),
        ))
    }
}

impl TryFrom<proto::WriteIntent> for WriteIntent {
    type Error = ConvertError;

    /// Checks every part: a peer's text only ever becomes a lookup key, but a garbled one must not
    /// be kept for 30 s either.
    fn try_from(w: proto::WriteIntent) -> Result<Self, ConvertError> {
        if !w.group.is_empty() {
            segment(&w.group, 253, "intent.group")?;
        }
        segment(&w.version, 63, "intent.version")?;
        segment(&w.resource, 63, "intent.resource")?;
        let namespace = if w.namespace.is_empty() {
            None
        } else {
            flotilla_common::validate_label(&w.namespace)
                .map_err(|reason| invalid("intent.namespace", reason))?;
            Some(w.namespace)
        };
        if w.name.is_empty() || w.name.len() > 253 || w.name.contains('/') {
            return Err(invalid("intent.name", "must be 1 to 253 bytes without '/'"));
        }
        let trace = TraceContext::parse(&w.traceparent)
            .ok_or_else(|| invalid("intent.traceparent", "not a sampled W3C traceparent"))?;
        Ok(Self {
            group: w.group,
            version: w.version,
            resource: w.resource,
            namespace,
            name: w.name,
            trace,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
#[path = "messages_tests.rs"]
mod tests;
