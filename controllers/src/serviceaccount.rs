//! The `serviceaccount` controller: every active namespace has a `default` ServiceAccount, recreated
//! when deleted (upstream `pkg/controller/serviceaccounts/serviceaccounts_controller.go`).

use flotilla_sdk::k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::kube::api::{Api, PostParams};

use flotilla_sdk::kube;
use flotilla_sdk::{Action, CacheError, Context, Controller, Request};

/// The ServiceAccount every namespace gets (upstream's `ServiceAccountsControllerOptions` default).
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// Errors of one reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache could not say whether the ServiceAccount exists.
    #[error("cannot read serviceaccounts from the cache")]
    Cache(#[source] CacheError),
    /// The Kubernetes API refused the create.
    #[error("cannot create serviceaccount {namespace}/{DEFAULT_SERVICE_ACCOUNT}")]
    Create {
        /// The namespace.
        namespace: String,
        /// Why.
        source: kube::Error,
    },
}

/// The controller, named `name` (the registry's `serviceaccount`), as the worker runs it: keys are
/// namespaces; a ServiceAccount event re-triggers its
/// namespace, so a deleted `default` is noticed.
pub fn controller(name: &str) -> Controller<Namespace> {
    Controller::<Namespace>::new(name)
        .watches_field::<ServiceAccount>("metadata.namespace")
        .reads::<ServiceAccount>()
        .reconcile(reconcile)
}

/// Whether the namespace should get its ServiceAccounts: it exists and is not terminating (creates in
/// a terminating namespace are forbidden anyway).
pub fn is_active(namespace: &Namespace) -> bool {
    let phase = namespace.status.as_ref().and_then(|s| s.phase.as_deref());
    namespace.metadata.deletion_timestamp.is_none() && phase != Some("Terminating")
}

/// The ServiceAccount created in `namespace`: just the name, as upstream creates it.
pub fn desired(namespace: &str) -> ServiceAccount {
    ServiceAccount {
        metadata: ObjectMeta {
            name: Some(DEFAULT_SERVICE_ACCOUNT.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    }
}

async fn reconcile(request: Request<Namespace>, ctx: Context) -> Result<Action, Error> {
    let Some(namespace) = request.object() else {
        return Ok(Action::await_change());
    };
    if !is_active(namespace) {
        return Ok(Action::await_change());
    }
    let name = request.name();
    let existing: Option<ServiceAccount> = ctx
        .cache()
        .get(Some(name), DEFAULT_SERVICE_ACCOUNT)
        .await
        .map_err(Error::Cache)?;
    if existing.is_some() {
        return Ok(Action::await_change());
    }
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client(), name);
    match api.create(&PostParams::default(), &desired(name)).await {
        Ok(_) => Ok(Action::await_change()),
        // Created meanwhile (by us before the cache saw it, or by someone else): the goal holds. A
        // namespace that started terminating meanwhile refuses the create; the retry then finds it
        // Terminating and stops.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Action::await_change()),
        Err(source) => Err(Error::Create {
            namespace: name.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::NamespaceStatus;
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use flotilla_sdk::k8s_openapi;

    use super::*;

    fn namespace(phase: Option<&str>, deleting: bool) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some("team-a".into()),
                deletion_timestamp: deleting
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            status: phase.map(|p| NamespaceStatus {
                phase: Some(p.into()),
                ..NamespaceStatus::default()
            }),
            ..Namespace::default()
        }
    }

    #[test]
    fn an_active_namespace_gets_a_default_serviceaccount() {
        assert!(is_active(&namespace(Some("Active"), false)));
        assert!(is_active(&namespace(None, false)));
        let sa = desired("team-a");
        assert_eq!(sa.metadata.name.as_deref(), Some("default"));
        assert_eq!(sa.metadata.namespace.as_deref(), Some("team-a"));
    }

    #[test]
    fn a_terminating_namespace_is_skipped() {
        assert!(!is_active(&namespace(Some("Terminating"), false)));
        assert!(!is_active(&namespace(Some("Active"), true)));
    }
}
