//! End-to-end tests of what deploys Flotilla against the built binaries: `--check-config` on good and
//! bad flags, `flotilla rbac`, and — when `FLOTILLA_HELM_RENDERS` names a directory of `helm template`
//! outputs, as `deploy/helm/check.sh` writes them — the Helm chart's manifests parsed into their
//! Kubernetes types, their commands accepted by the binaries and their ClusterRoles equal to
//! `flotilla rbac`'s; and — when `FLOTILLA_HELM` names a helm binary — `helm install` of every scenario
//! into a cluster, read back as rendered; and `flotilla bench jobs` run end to end on a small workload.
//!
//! The binaries must be built first (`cargo build --workspace --bins`; the README's test command does).

#![allow(clippy::unwrap_used, clippy::expect_used)]

/// The test CA (`chart` checks TLS renders with certificates from it).
pub use support::pki;

pub mod support;

mod deploy {
    pub mod binaries;

    mod bench;
    mod chart;
    mod check_config;
    mod helm_install;
    mod rbac;
    mod tls_check;
}
