//! The controller builder: a spec (what the coordinator must watch and send) plus a reconcile function
//! and an error policy, typed over the primary kind like `kube::runtime::Controller`.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use flotilla_apimachinery::ResourceKind;
use futures::future::BoxFuture;
use kube::Resource;
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;

use crate::action::Action;
use crate::context::Context;
use crate::kind::{KindScope, kind_of};
use crate::request::Request;
use crate::spec::{ControllerSpec, IndexSpec, Mapping, MappingRule};

/// The error type a reconcile's error is seen as by an error policy; downcast it to the
/// reconcile's own error type when needed.
pub type ReconcileError = dyn std::error::Error + Send + Sync + 'static;

pub(crate) type ReconcileFn<K> = Arc<
    dyn Fn(Request<K>, Context) -> BoxFuture<'static, Result<Action, Box<ReconcileError>>>
        + Send
        + Sync,
>;
pub(crate) type ErrorPolicyFn = Arc<dyn Fn(&ReconcileError, &Context) -> Action + Send + Sync>;

/// The default number of items of one controller a worker reconciles at once; kube-controller-manager's
/// most common `--concurrent-*-syncs` default.
pub const DEFAULT_CONCURRENCY: u32 = 5;

/// A controller of primary kind `K`, built step by step:
///
/// ```no_run
/// # use flotilla_sdk::{Action, Context, Controller, Request};
/// # use flotilla_sdk::k8s_openapi::api::core::v1::ConfigMap;
/// # #[derive(Debug, thiserror::Error)] #[error("x")] struct MyError;
/// async fn reconcile(req: Request<ConfigMap>, ctx: Context) -> Result<Action, MyError> {
///     Ok(Action::await_change())
/// }
/// let controller = Controller::<ConfigMap>::new("example").concurrency(2).reconcile(reconcile);
/// ```
///
/// Turn it into a [`crate::DynController`] with `into()` to hand it to the runtime.
pub struct Controller<K> {
    pub(crate) spec: ControllerSpec,
    pub(crate) concurrency: u32,
    pub(crate) event_source: Option<String>,
    pub(crate) reconcile: Option<ReconcileFn<K>>,
    pub(crate) error_policy: Option<ErrorPolicyFn>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Controller<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + Sync + 'static,
    K::Scope: KindScope,
{
    /// A controller named `name` (unique in the fleet, like kube-controller-manager's `replicaset`)
    /// reconciling keys of `K`.
    pub fn new(name: &str) -> Self {
        Self::with_primary(name, Some(kind_of::<K>()))
    }

    /// Events of `T` objects enqueue their controller owner (if it is a `K`).
    pub fn owns<T>(mut self) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        self.spec.mappings.push(mapping::<T>(MappingRule::Owner));
        self
    }

    /// Events of `T` objects enqueue every `K` in the same namespace whose label selector at
    /// `selector_path` (e.g. `spec.selector`) matches the `T`'s labels.
    pub fn watches_selector<T>(mut self, selector_path: &str) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        let rule = MappingRule::Selector {
            selector_path: selector_path.to_owned(),
        };
        self.spec.mappings.push(mapping::<T>(rule));
        self
    }

    /// Events of `T` objects enqueue the `K` (same namespace) named by the `T`'s `field_path`
    /// (e.g. `metadata.name`). A cluster-scoped `K` is named by the value alone (a Pod's
    /// `spec.nodeName` → its Node); a cluster-scoped `T` names no namespaced `K` this way (see
    /// [`watches_field_in`](Self::watches_field_in)).
    pub fn watches_field<T>(mut self, field_path: &str) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        let rule = MappingRule::Field {
            field_path: field_path.to_owned(),
            namespace_path: None,
        };
        self.spec.mappings.push(mapping::<T>(rule));
        self
    }

    /// Events of `T` objects enqueue the `K` named by the `T`'s `name_path` in the namespace at its
    /// `namespace_path`: across scopes, e.g. a PersistentVolume's `spec.claimRef.name` and
    /// `spec.claimRef.namespace` → its claim. The namespace path is ignored for a cluster-scoped `K`.
    pub fn watches_field_in<T>(mut self, name_path: &str, namespace_path: &str) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        let rule = MappingRule::Field {
            field_path: name_path.to_owned(),
            namespace_path: Some(namespace_path.to_owned()),
        };
        self.spec.mappings.push(mapping::<T>(rule));
        self
    }

    /// Events of `T` objects enqueue every `K` (fan-out: a Node change concerns every DaemonSet).
    /// Every event of every `T` queues every key, so keep it to kinds that change rarely or to few
    /// primaries; the queue coalesces a key already waiting.
    pub fn watches_all<T>(mut self) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        self.spec.mappings.push(mapping::<T>(MappingRule::FanOut));
        self
    }

    /// Declares a named index of the cache, as client-go's `AddIndexers`: the `T` objects by the
    /// string at `field_path` (e.g. `spec.volumeName`; objects without one are left out). The
    /// reconcile lists by it with [`CacheQuery::index`](crate::CacheQuery::index)`(name, value)`;
    /// `T` gets an informer as with [`reads`](Self::reads). `name` must be a DNS-1123 label other than
    /// the built-in `namespace`, `owner-uid` and `node-name`, or the coordinator refuses the
    /// controller, saying why.
    pub fn index<T>(mut self, name: &str, field_path: &str) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        self.spec.indexes.push(IndexSpec {
            kind: kind_of::<T>(),
            name: name.to_owned(),
            field_path: field_path.to_owned(),
        });
        self
    }

    /// Ship the `T` objects controlled by the primary object with each item (read them with
    /// [`Context::prefetched`]), so the common reconcile needs no extra round trip.
    pub fn prefetch_owned<T>(mut self) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        self.spec.prefetch_owned.push(kind_of::<T>());
        self
    }

    /// The reconcile reads `T` through [`Context::cache`]: the coordinator keeps an informer for it and
    /// waits for its sync before dispatching.
    pub fn reads<T>(mut self) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        self.spec.reads.push(kind_of::<T>());
        self
    }

    /// Reconcile every key again every `period` (none by default).
    pub fn resync(mut self, period: Duration) -> Self {
        self.spec.resync = Some(period);
        self
    }
}

impl Controller<DynamicObject> {
    /// A controller over the ownerReference graph of every resource the API server serves with list,
    /// watch and delete (the garbage collector's shape): the coordinator discovers those resources,
    /// CRDs included, and sends the objects that may need action. Keys are kinded
    /// (`<group>/<version>/<plural>/<namespace>/<name>`, see [`crate::KindedKey`]); the
    /// request's namespace and name are the object's, and [`Context::prefetched_objects`] holds the
    /// object's dependents of every kind.
    pub fn owner_graph(name: &str) -> Self {
        Self::with_primary(name, None)
    }
}

impl<K: Send + Sync + 'static> Controller<K> {
    fn with_primary(name: &str, primary: Option<ResourceKind>) -> Self {
        Self {
            spec: ControllerSpec::new(name, primary),
            concurrency: DEFAULT_CONCURRENCY,
            event_source: None,
            reconcile: None,
            error_policy: None,
            _kind: PhantomData,
        }
    }

    /// How many items this worker reconciles at once (default [`DEFAULT_CONCURRENCY`]); the
    /// `--concurrent-<name>-syncs` flag overrides it.
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = n;
        self
    }

    /// The source its Events report (their `source.component` and `reportingComponent`); the
    /// controller's name unless given. kube-controller-manager's are `<name>-controller`.
    pub fn event_source(mut self, component: &str) -> Self {
        self.event_source = Some(component.to_owned());
        self
    }

    /// The reconcile function. Its errors are any `std::error::Error`; `Ok(Action::await_change())`
    /// forgets the key, `Ok(Action::requeue(d))` reconciles it again after `d`, `Err` retries it with
    /// the fleet's rate limiter unless an [`error_policy`](Self::error_policy) decides otherwise.
    pub fn reconcile<F, Fut, E>(mut self, reconcile: F) -> Self
    where
        F: Fn(Request<K>, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        self.reconcile = Some(Arc::new(move |request, ctx| {
            let fut = reconcile(request, ctx);
            Box::pin(async move {
                fut.await
                    .map_err(|err| Box::new(err) as Box<ReconcileError>)
            })
        }));
        self
    }

    /// What to do after a failed reconcile. Without a policy the key is retried with the fleet's rate
    /// limiter (outcome ERROR, client-go's `AddRateLimited`).
    pub fn error_policy<P>(mut self, policy: P) -> Self
    where
        P: Fn(&ReconcileError, &Context) -> Action + Send + Sync + 'static,
    {
        self.error_policy = Some(Arc::new(policy));
        self
    }
}

fn mapping<T>(rule: MappingRule) -> Mapping
where
    T: Resource<DynamicType = ()>,
    T::Scope: KindScope,
{
    Mapping {
        kind: kind_of::<T>(),
        rule,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};

    use super::*;

    #[test]
    fn each_mapping_method_declares_its_rule_and_index_declares_a_named_index() {
        let controller = Controller::<Node>::new("nodes")
            .watches_field::<Pod>("spec.nodeName")
            .watches_field_in::<Lease>("metadata.name", "metadata.namespace")
            .watches_all::<PersistentVolumeClaim>()
            .index::<Pod>("by-node", "spec.nodeName");
        let rules: Vec<(String, MappingRule)> = controller
            .spec
            .mappings
            .iter()
            .map(|m| (m.kind.kind.clone(), m.rule.clone()))
            .collect();
        assert_eq!(
            rules,
            [
                (
                    "Pod".to_owned(),
                    MappingRule::Field {
                        field_path: "spec.nodeName".into(),
                        namespace_path: None
                    }
                ),
                (
                    "Lease".to_owned(),
                    MappingRule::Field {
                        field_path: "metadata.name".into(),
                        namespace_path: Some("metadata.namespace".into())
                    }
                ),
                ("PersistentVolumeClaim".to_owned(), MappingRule::FanOut),
            ]
        );
        assert_eq!(
            controller.spec.indexes,
            [IndexSpec {
                kind: kind_of::<Pod>(),
                name: "by-node".into(),
                field_path: "spec.nodeName".into(),
            }]
        );
        assert!(
            !controller
                .spec
                .primary
                .as_ref()
                .is_some_and(|k| k.namespaced),
            "a cluster-scoped primary"
        );
    }
}
