//! The built-in controllers of kube-controller-manager, one module each under its upstream name, on
//! the SDK's public API only, as a custom controller would be: `serviceaccount`, `replicaset` (also
//! `replicationcontroller`), `deployment`, `garbagecollector`, `namespace`, `ttlafterfinished`,
//! `podgc`, `cronjob`, `disruption`, `statefulset` and `daemonset`, with the helpers they share
//! (`claim`, `controller_ref`, `events`, `history`).
//!
//! [`builtins`] is the registry: each controller's name, `--concurrent-<flag>-syncs` flag, default
//! concurrency and RBAC grants, listed once; [`Settings`] the other flags some take; [`rbac`] has the
//! rules a fleet's roles need.

mod claim;
mod controller_ref;
mod cronjob;
mod daemonset;
mod deployment;
mod disruption;
mod events;
mod garbagecollector;
mod history;
mod job;
mod namespace;
mod pod_ready;
mod podgc;
pub mod rbac;
mod registry;
mod replicaset;
mod serviceaccount;
mod settings;
mod statefulset;
mod ttlafterfinished;

pub use registry::{Builtin, builtin, builtins};
pub use settings::{Settings, SettingsError};
