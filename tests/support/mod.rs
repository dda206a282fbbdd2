//! The shared harness of the end-to-end tests: a cluster to test against (devcluster on a throwaway
//! etcd, or any cluster named by `FLOTILLA_TEST_KUBECONFIG`), fresh namespaces, bounded waits, raw
//! HTTP and watch helpers, an in-process OTLP receiver.
//!
//! On a cluster named by `FLOTILLA_TEST_KUBECONFIG`, which other tests may share, every namespace a test
//! makes is labelled with its test's scope (owned by its `cluster::TestCluster`, see `namespace`) and
//! every coordinator it starts covers only those namespaces (`fleet::Fleet::coordinator`), so parallel
//! tests never touch each other's objects.
//!
//! Declare it in a test binary with `pub mod support;` (not `mod support;`): the helpers are then
//! reachable public items, so a binary that uses only some of them gets no dead-code warnings.

pub mod cluster;
pub mod fleet;
pub mod links;
pub mod namespace;
pub mod objects;
pub mod otlp;
pub mod pki;
pub mod pty;
pub mod raw;
pub mod tokens;
pub mod wait;
pub mod watch;
