//! Code both Flotilla roles share: etcd sessions and elections, the fleet's etcd key layout, the
//! operational HTTP endpoints (`/metrics`, `/healthz`, `/readyz`), Kubernetes client configuration,
//! logging set-up and shutdown signals; and, re-exported from `flotilla-apimachinery`, the Kubernetes
//! vocabulary (kinds, keys, label selectors, reasons).

mod api_verb;
mod consistent_watch_list;
mod duration;
mod etcd;
mod flapping;
mod keys;
mod kubeconfig;
mod log_limiter;
mod names;
mod ops_server;
mod process_metrics;
mod request_count;
mod shared_flags;
mod shutdown;
mod telemetry;
pub mod tls;
mod trace_capture;
mod trace_context;
mod trace_export;
mod trace_sampler;
mod user_agent;

pub use api_verb::{ApiObject, object_of, verb_and_resource};
pub use consistent_watch_list::consistent_watch_lists;
pub use duration::{DurationError, parse_duration};
pub use etcd::{
    DEFAULT_ETCD_PREFIX, Elected, Election, ElectionError, EtcdClientConfig, EtcdConnectError,
    EtcdFlags, EtcdOptionsError, LeaderInfo, Leadership, Session, SessionConfig, SessionError,
    connect_etcd, get_prefix_paged, register_session_metrics,
};
pub use flapping::Flapping;
pub use keys::FleetKeys;
pub use kubeconfig::{KubeConfigError, counted_kube_client, kube_client, kube_config};
pub use log_limiter::{LogLimiter, Verdict};
pub use names::{validate_label, validate_subdomain};
pub use ops_server::{Health, OpsServer, OpsServerError};
pub use process_metrics::register_process_metrics;
pub use request_count::{RequestCountLayer, RequestCounter};
pub use shared_flags::SharedFlags;
pub use shutdown::shutdown_signal;
pub use telemetry::{LogFormat, Telemetry, init_logging, init_telemetry};
#[doc(hidden)]
pub use trace_capture::{AttrValue, CapturedSpan, SpanCapture};
pub use trace_context::{
    LINK_TYPE, TRACE_TARGET, TraceContext, in_exported_span, record_wait, sample_new_trace,
    tracing_enabled,
};
pub use trace_export::{OtlpProtocol, ServiceIdentity, TraceExportError, TraceFlags};
pub use trace_sampler::TraceSampler;
pub use user_agent::{UserAgent, UserAgentLayer, user_agent};

// The shared Kubernetes vocabulary, re-exported so both roles keep naming it `flotilla_common::…`.
pub use flotilla_apimachinery::{
    BUILTIN_INDEXES, FOREGROUND_FINALIZER, KindedKey, LabelSelector, LabelSet, ORPHAN_FINALIZER,
    Reason, ResourceKind, SelectorError, Write, WriteOp, split_key, string_at, value_at,
};
