//! The Kubernetes RBAC rules a fleet needs, for least privilege: what each built-in controller's
//! reconcile asks of the API (the worker's ClusterRole) and what the coordinator's informers list and
//! watch for a set of controllers (the coordinator's ClusterRole). `flotilla rbac` prints them and the
//! Helm chart renders the same rules; CI checks that the two agree.
//!
//! Neither role gets discovery rules: the garbage collector's owner resolution, the namespace
//! controller and the coordinator's owner graph read `/api` and `/apis`, which kube-apiserver's
//! default `system:discovery` ClusterRole grants every authenticated user.

mod coordinator;
mod fleet;
mod rules;
mod worker;

pub use coordinator::coordinator_rules;
pub use fleet::{FleetRules, fleet_rules};
pub use rules::{ALL, Rules};
pub(crate) use worker::endpointslice;
pub(crate) use worker::nodelifecycle;
pub(crate) use worker::tainteviction;
pub(crate) use worker::{
    cronjob, daemonset, deployment, disruption, garbagecollector, job, namespace, podgc,
    replicaset, replicationcontroller, serviceaccount, statefulset, ttlafterfinished,
};
pub(crate) use worker::{endpoints, endpointslicemirroring};
pub(crate) use worker::{nodeipam, servicecidrs, ttl};
