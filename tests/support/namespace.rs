//! Fresh namespaces, so tests running in parallel (or against a shared cluster) never collide.

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

/// Creates a namespace named `{prefix}-{random}` and returns its name. Namespaces are left behind
/// on purpose: without a namespace controller (devcluster) they could never finish terminating.
///
/// # Panics
/// When the namespace cannot be created.
pub async fn unique_namespace(client: &kube::Client, prefix: &str) -> String {
    let name = format!("{prefix}-{}", random_suffix(6));
    let api: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.clone());
    if let Err(err) = api.create(&PostParams::default(), &namespace).await {
        panic!("cannot create test namespace {name}: {err}");
    }
    name
}
