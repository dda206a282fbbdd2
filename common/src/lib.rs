//! Code both Flotilla roles share: etcd sessions and elections, the fleet's etcd key layout, the
//! operational HTTP endpoints (`/metrics`, `/healthz`, `/readyz`), Kubernetes client configuration,
//! logging set-up and shutdown signals.

mod duration;
mod etcd;
mod keys;
mod kind;
mod kinded_key;
mod kubeconfig;
mod log_limiter;
mod names;
mod ops_server;
mod propagation;
mod selector;
mod shutdown;
mod telemetry;

pub use duration::{DurationError, parse_duration};
pub use etcd::{
    Elected, Election, ElectionError, LeaderInfo, Leadership, Session, SessionConfig, SessionError,
    connect_etcd,
};
pub use keys::FleetKeys;
pub use kind::{ResourceKind, split_key};
pub use kinded_key::KindedKey;
pub use kubeconfig::{KubeConfigError, kube_client, kube_config};
pub use log_limiter::{LogLimiter, Verdict};
pub use names::{validate_label, validate_subdomain};
pub use ops_server::{Health, OpsServer, OpsServerError};
pub use propagation::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
pub use selector::{LabelSelector, SelectorError};
pub use shutdown::shutdown_signal;
pub use telemetry::{LogFormat, init_logging};
