//! Fresh namespaces, so tests running in parallel (or against a shared cluster) never collide, each
//! labelled with its test's scope so that fleets on a shared cluster cover only their own test's.
//!
//! A scope belongs to one [`TestCluster`](super::cluster::TestCluster), which every test starts for
//! itself: the cluster makes it up, and hands it to everything it makes as the default namespace of
//! its kubeconfig's contexts, so the clients built from that kubeconfig
//! ([`TestCluster::client`](super::cluster::TestCluster::client), `support::tokens`) carry it
//! ([`kube::Client::default_namespace`]) and [`Fleet::new`](super::fleet::Fleet::new) reads it from
//! the file. So it is one test's, whether tests run one per process (nextest) or many per process
//! (`cargo test`), on any thread. No namespace of that name exists: tests name their namespaces
//! explicitly.

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use rand::distr::{Alphanumeric, SampleString};

/// A random lowercase suffix of `len` characters, valid in DNS labels.
pub fn random_suffix(len: usize) -> String {
    Alphanumeric
        .sample_string(&mut rand::rng(), len * 2)
        .to_lowercase()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(len)
        .collect()
}

/// The label every test namespace carries: its value is the test's scope.
pub const SCOPE_LABEL: &str = "flotilla.dev/test-scope";

/// How every scope starts, so a default namespace that is not a scope is told apart.
pub const SCOPE_PREFIX: &str = "flotilla-test-scope-";

/// A new scope: [`SCOPE_PREFIX`] and a random suffix, valid as a label value and a namespace name.
pub fn new_scope() -> String {
    format!("{SCOPE_PREFIX}{}", random_suffix(12))
}

/// Whether `value` (a default namespace) is a scope made by [`new_scope`].
pub fn is_scope(value: &str) -> bool {
    value.starts_with(SCOPE_PREFIX)
}

/// The scope a client of a [`TestCluster`](super::cluster::TestCluster) carries.
///
/// # Panics
/// When the client was not built from a test cluster's kubeconfig: a namespace it made would belong
/// to no test's fleet on a shared cluster.
pub fn scope_of(client: &kube::Client) -> &str {
    let scope = client.default_namespace();
    assert!(
        is_scope(scope),
        "this client carries no test scope (its default namespace is {scope:?}): make test \
         namespaces with a client of the test's TestCluster (TestCluster::client)"
    );
    scope
}

/// The `--namespace-selector` that covers the namespaces of `scope`.
pub fn scope_selector(scope: &str) -> String {
    format!("{SCOPE_LABEL}={scope}")
}

/// Creates a namespace named `{prefix}-{random}`, labelled [`SCOPE_LABEL`]=the scope `client` carries
/// ([`scope_of`]), and returns its name. Namespaces are left behind on purpose: without a namespace
/// controller (devcluster) they could never finish terminating.
///
/// # Panics
/// When the namespace cannot be created, or `client` carries no scope.
pub async fn unique_namespace(client: &kube::Client, prefix: &str) -> String {
    let scope = scope_of(client).to_owned();
    let name = format!("{prefix}-{}", random_suffix(6));
    let api: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.clone());
    namespace.metadata.labels = Some([(SCOPE_LABEL.to_owned(), scope)].into());
    if let Err(err) = api.create(&PostParams::default(), &namespace).await {
        panic!("cannot create test namespace {name}: {err}");
    }
    name
}
