//! API behaviour tests: what a kube-apiserver does, checked against devcluster (or, with
//! `FLOTILLA_TEST_KUBECONFIG`, against any cluster). Expected values come from the upstream
//! recordings in `kube-fixtures/` (named in each test); tests that need devcluster-only knobs
//! (forced compaction, the node simulator) skip themselves on an external cluster, saying why.

#![allow(clippy::unwrap_used)]

pub mod support;

mod api {
    pub mod common;

    mod annotations;
    mod batch_validation;
    mod compaction;
    mod crd;
    mod crud;
    mod defaults;
    mod discovery;
    mod discovery_validation;
    mod errors;
    mod eviction;
    mod https;
    mod kube_rs;
    mod kubectl;
    mod lifecycle;
    mod list_selectors;
    mod namespaces;
    mod paging;
    mod patch;
    mod protobuf;
    mod quota;
    mod rbac;
    mod simnodes;
    mod simnodes_claims;
    mod simnodes_conditions;
    mod watch;
}
