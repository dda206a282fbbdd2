//! The built-in controllers of kube-controller-manager, one module each under its upstream name, on
//! the SDK's public API only, as a custom controller would be: `serviceaccount`, `replicaset` (also
//! `replicationcontroller`), `deployment`, `garbagecollector`, `namespace`, `ttlafterfinished`,
//! `podgc`, `cronjob`, `disruption`, `statefulset`, `daemonset`, `endpoints` (the `endpoint` controller), `endpointslice`, `endpointslicemirroring`, `nodelifecycle`, `tainteviction`, `nodeipam`, `ttl` and `servicecidrs`, with the
//! helpers they share (`claim`, `controller_ref`, `events`, `history`).
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
mod endpoints;
mod endpointslice;
mod endpointslicemirroring;
mod events;
mod garbagecollector;
mod history;
mod job;
mod namespace;
mod nodeipam;
mod nodelifecycle;
mod pod_ready;
mod podgc;
pub mod rbac;
mod registry;
mod replicaset;
mod serviceaccount;
mod servicecidrs;
mod settings;
mod statefulset;
mod tainteviction;
mod ttl;
mod ttlafterfinished;

pub use nodeipam::{CidrList, NodeIpamConfig, RANGE_ALLOCATOR};
pub use nodelifecycle::{
    Config as NodeLifecycleSettings, ConfigError as NodeLifecycleSettingsError,
};
pub use registry::{Builtin, builtin, builtins};
pub use settings::{Settings, SettingsError};
