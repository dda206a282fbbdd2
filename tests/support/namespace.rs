//! Fresh namespaces, so tests running in parallel (or against a shared cluster) never collide, each
//! labelled with its test process's scope so that fleets on a shared cluster cover only them.

use std::sync::OnceLock;

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

/// The label every test namespace carries: its value is [`test_scope`].
pub const SCOPE_LABEL: &str = "flotilla.dev/test-scope";

/// This test process's scope: a random value, the same for every namespace the process creates.
/// cargo-nextest runs every test in a process of its own, so this names one test's namespaces; a fleet
/// the test starts on a shared cluster covers exactly these (`--namespace-selector
/// flotilla.dev/test-scope=<scope>`, see `support::fleet`).
pub fn test_scope() -> &'static str {
    static SCOPE: OnceLock<String> = OnceLock::new();
    SCOPE.get_or_init(|| random_suffix(12))
}

/// The `--namespace-selector` that covers this test process's namespaces.
pub fn scope_selector() -> String {
    format!("{SCOPE_LABEL}={}", test_scope())
}

/// Creates a namespace named `{prefix}-{random}`, labelled [`SCOPE_LABEL`]=[`test_scope`], and returns
/// its name. Namespaces are left behind on purpose: without a namespace controller (devcluster) they
/// could never finish terminating.
///
/// # Panics
/// When the namespace cannot be created.
pub async fn unique_namespace(client: &kube::Client, prefix: &str) -> String {
    let name = format!("{prefix}-{}", random_suffix(6));
    let api: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.clone());
    namespace.metadata.labels = Some([(SCOPE_LABEL.to_owned(), test_scope().to_owned())].into());
    if let Err(err) = api.create(&PostParams::default(), &namespace).await {
        panic!("cannot create test namespace {name}: {err}");
    }
    name
}
