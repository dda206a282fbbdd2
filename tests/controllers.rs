//! End-to-end tests of the built-in controllers: real etcd, the local Kubernetes API (with simulated
//! nodes where pods must run), a coordinator and `flotilla worker --controllers <name>` processes.
//!
//! The binaries must be built first (`cargo build --workspace --bins`). Like the fleet tests, these run
//! one at a time (`.config/nextest.toml`): each starts several processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod support;

mod controllers {
    mod cronjob;
    mod daemonset;
    mod deployment;
    mod disruption;
    mod endpoints;
    mod endpointslice;
    mod endpointslicemirroring;
    mod events;
    mod garbagecollector;
    mod job;
    mod least_privilege;
    mod namespace;
    mod nodeipam;
    mod nodelifecycle;
    mod podgc;
    mod replicaset;
    mod serviceaccount;
    mod servicecidr;
    mod statefulset;
    mod tainteviction;
    mod ttl;
    mod ttlafterfinished;
}
