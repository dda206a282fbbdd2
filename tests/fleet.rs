//! End-to-end tests of the fleet core: real etcd, the local Kubernetes API (or the cluster named by
//! `FLOTILLA_TEST_KUBECONFIG`), and real coordinator and worker processes.
//!
//! The worker binaries must be built first (`cargo build --workspace --bins`; the README's test command
//! does it). The tests of this binary run one at a time (`.config/nextest.toml`): each starts several
//! processes, and their timing assertions (failover within the lease plus 2 s) need the CPU.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod support;

mod fleet {
    pub mod common;
    pub mod journal;
    pub mod peer;

    mod bad_input;
    mod bounds;
    mod etcd_security;
    mod exclusivity;
    mod failover;
    mod greeting;
    mod hardening;
    mod hostile_peers;
    mod mapping_rules;
    mod metrics;
    mod migration;
    mod mtls;
    mod partitions_leader;
    mod partitions_worker;
    mod read_your_writes;
    mod reasons;
    mod rebalance;
    mod shared_cluster;
    mod status_watch;
    mod term_failures;
    mod tracing;
    mod tracing_scale;
    mod up;
    mod worker_loss;
}
