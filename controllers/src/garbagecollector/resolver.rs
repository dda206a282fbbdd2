//! Owner kinds to resources: an ownerReference names `apiVersion` and `kind`, a request needs the
//! resource (plural) and scope. Resolved through discovery of the owner's group version and remembered
//! for the life of the worker (a kind's resource name does not change while it is served).

use std::collections::HashMap;
use std::sync::Arc;

use flotilla_sdk::kube;
use flotilla_sdk::kube::core::{ApiResource, GroupVersionKind};
use flotilla_sdk::kube::discovery::{Scope, pinned_kind};
use flotilla_sdk::kube::error::DiscoveryError;
use parking_lot::Mutex;

/// A resolved owner kind.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The resource, for dynamic requests.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// Errors of resolving a kind.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The apiVersion is not `group/version` or `version`.
    #[error("invalid apiVersion {0:?}")]
    ApiVersion(String),
    /// Discovery failed; worth retrying.
    #[error("discovery of {api_version} failed")]
    Discovery {
        /// The owner's apiVersion.
        api_version: String,
        /// Why.
        source: kube::Error,
    },
}

/// The kinds resolved so far; cheap to clone, shared by every reconcile of the worker.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    known: Arc<Mutex<HashMap<(String, String), Resolved>>>,
}

impl Resolver {
    /// The resource of `kind` in `api_version`; `Ok(None)` when the server does not serve it (no such
    /// group version, or no such kind in it): no object of that kind can exist.
    ///
    /// # Errors
    /// [`ResolveError`] for a malformed apiVersion or a failed discovery.
    pub async fn resolve(
        &self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<Resolved>, ResolveError> {
        let cache_key = (api_version.to_owned(), kind.to_owned());
        if let Some(known) = self.known.lock().get(&cache_key) {
            return Ok(Some(known.clone()));
        }
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", api_version),
        };
        if version.is_empty() || version.contains('/') {
            return Err(ResolveError::ApiVersion(api_version.to_owned()));
        }
        let gvk = GroupVersionKind::gvk(group, version, kind);
        match pinned_kind(client, &gvk).await {
            Ok((resource, caps)) => {
                let resolved = Resolved {
                    resource,
                    namespaced: caps.scope == Scope::Namespaced,
                };
                self.known.lock().insert(cache_key, resolved.clone());
                Ok(Some(resolved))
            }
            Err(kube::Error::Discovery(DiscoveryError::MissingKind(_))) => Ok(None),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(source) => Err(ResolveError::Discovery {
                api_version: api_version.to_owned(),
                source,
            }),
        }
    }
}
