//! The controller builder: a spec (what the coordinator must watch and send) plus a reconcile function
//! and an error policy, typed over the primary kind like `kube::runtime::Controller`.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_common::{KindedKey, ResourceKind, split_key};
use flotilla_proto as proto;
use futures::future::BoxFuture;
use kube::Resource;
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;

use super::action::{Action, Outcome};
use super::context::Context;
use super::kind::{KindScope, kind_of};
use super::request::Request;

/// The error type a reconcile's error is seen as by an error policy; downcast it to the
/// reconcile's own error type when needed.
pub type ReconcileError = dyn std::error::Error + Send + Sync + 'static;

type ReconcileFn<K> = Arc<
    dyn Fn(Request<K>, Context) -> BoxFuture<'static, Result<Action, Box<ReconcileError>>>
        + Send
        + Sync,
>;
type ErrorPolicyFn = Arc<dyn Fn(&ReconcileError, &Context) -> Action + Send + Sync>;

/// The default number of items of one controller a worker reconciles at once; kube-controller-manager's
/// most common `--concurrent-*-syncs` default.
pub const DEFAULT_CONCURRENCY: u32 = 5;

/// A controller of primary kind `K`, built step by step:
///
/// ```no_run
/// # use flotilla_worker::{Action, Context, Controller, Request};
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// # #[derive(Debug, thiserror::Error)] #[error("x")] struct MyError;
/// async fn reconcile(req: Request<ConfigMap>, ctx: Context) -> Result<Action, MyError> {
///     Ok(Action::await_change())
/// }
/// let controller = Controller::<ConfigMap>::new("example").concurrency(2).reconcile(reconcile);
/// ```
pub struct Controller<K> {
    name: String,
    /// `None` for an owner-graph controller.
    primary: Option<ResourceKind>,
    mappings: Vec<proto::Mapping>,
    prefetch_owned: Vec<ResourceKind>,
    reads: Vec<ResourceKind>,
    resync: Option<Duration>,
    concurrency: u32,
    reconcile: Option<ReconcileFn<K>>,
    error_policy: Option<ErrorPolicyFn>,
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
        self.mappings.push(mapping::<T>(proto::mapping::Rule::Owner(
            proto::OwnerRule {},
        )));
        self
    }

    /// Events of `T` objects enqueue every `K` in the same namespace whose label selector at
    /// `selector_path` (e.g. `spec.selector`) matches the `T`'s labels.
    pub fn watches_selector<T>(mut self, selector_path: &str) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        let rule = proto::SelectorRule {
            selector_path: selector_path.to_owned(),
        };
        self.mappings
            .push(mapping::<T>(proto::mapping::Rule::Selector(rule)));
        self
    }

    /// Events of `T` objects enqueue the `K` (same namespace) named by the `T`'s `field_path`
    /// (e.g. `metadata.name`).
    pub fn watches_field<T>(mut self, field_path: &str) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        let rule = proto::FieldRule {
            field_path: field_path.to_owned(),
        };
        self.mappings
            .push(mapping::<T>(proto::mapping::Rule::Field(rule)));
        self
    }

    /// Ship the `T` objects controlled by the primary object with each item (read them with
    /// [`Context::prefetched`]), so the common reconcile needs no extra round trip.
    pub fn prefetch_owned<T>(mut self) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        self.prefetch_owned.push(kind_of::<T>());
        self
    }

    /// The reconcile reads `T` through [`Context::cache`]: the coordinator keeps an informer for it and
    /// waits for its sync before dispatching.
    pub fn reads<T>(mut self) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        self.reads.push(kind_of::<T>());
        self
    }

    /// Reconcile every key again every `period` (none by default).
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }
}

impl Controller<DynamicObject> {
    /// A controller over the ownerReference graph of every resource the API server serves with list,
    /// watch and delete (the garbage collector's shape): the coordinator discovers those resources,
    /// CRDs included, and sends the objects that may need action. Keys are kinded
    /// (`<group>/<version>/<plural>/<namespace>/<name>`, see [`flotilla_common::KindedKey`]); the
    /// request's namespace and name are the object's, and [`Context::prefetched_objects`] holds the
    /// object's dependents of every kind.
    pub fn owner_graph(name: &str) -> Self {
        Self::with_primary(name, None)
    }
}

impl<K: Send + Sync + 'static> Controller<K> {
    fn with_primary(name: &str, primary: Option<ResourceKind>) -> Self {
        Self {
            name: name.to_owned(),
            primary,
            mappings: Vec::new(),
            prefetch_owned: Vec::new(),
            reads: Vec::new(),
            resync: None,
            concurrency: DEFAULT_CONCURRENCY,
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

fn mapping<T>(rule: proto::mapping::Rule) -> proto::Mapping
where
    T: Resource<DynamicType = ()>,
    T::Scope: KindScope,
{
    proto::Mapping {
        kind: Some((&kind_of::<T>()).into()),
        rule: Some(rule),
    }
}

/// An item as the runtime hands it to a controller.
pub(crate) struct WorkItem {
    pub(crate) key: String,
    pub(crate) object: Bytes,
    pub(crate) attempt: u32,
}

type RunFn = Arc<dyn Fn(WorkItem, Context) -> BoxFuture<'static, Outcome> + Send + Sync>;

/// A controller with its kind erased, as the runtime runs it. Made from a [`Controller`] with `into()`.
#[derive(Clone)]
pub struct DynController {
    name: String,
    primary: Option<ResourceKind>,
    mappings: Vec<proto::Mapping>,
    prefetch_owned: Vec<ResourceKind>,
    reads: Vec<ResourceKind>,
    resync: Option<Duration>,
    concurrency: u32,
    run: Option<RunFn>,
}

impl DynController {
    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many items it reconciles at once.
    pub fn concurrency_limit(&self) -> u32 {
        self.concurrency
    }

    /// The same controller with another concurrency (what `--concurrent-<name>-syncs` does).
    pub fn with_concurrency(mut self, n: u32) -> Self {
        self.concurrency = n;
        self
    }

    /// Whether a reconcile function was given.
    pub(crate) fn has_reconcile(&self) -> bool {
        self.run.is_some()
    }

    /// Every kind the controller declared, for naming the kinds of its writes.
    pub(crate) fn kinds(&self) -> impl Iterator<Item = ResourceKind> + '_ {
        let mapped = self
            .mappings
            .iter()
            .filter_map(|m| m.kind.clone())
            .map(ResourceKind::from);
        self.primary
            .iter()
            .cloned()
            .chain(mapped)
            .chain(self.prefetch_owned.iter().cloned())
            .chain(self.reads.iter().cloned())
    }

    /// The spec sent in Hello.
    pub(crate) fn spec(&self) -> proto::ControllerSpec {
        proto::ControllerSpec {
            name: self.name.clone(),
            primary: self.primary.as_ref().map(Into::into),
            owner_graph: self.primary.is_none(),
            mappings: self.mappings.clone(),
            prefetch_owned: self.prefetch_owned.iter().map(Into::into).collect(),
            watches: self.reads.iter().map(Into::into).collect(),
            resync_seconds: self.resync.map_or(0, |d| d.as_secs().max(1)),
            ..Default::default()
        }
    }

    /// Runs one item; never panics on bad input, an undecodable object is an ERROR outcome.
    pub(crate) fn run(&self, item: WorkItem, ctx: Context) -> BoxFuture<'static, Outcome> {
        match &self.run {
            Some(run) => run(item, ctx),
            None => Box::pin(std::future::ready(Outcome::error(
                "controller has no reconcile function".into(),
            ))),
        }
    }
}

impl<K> From<Controller<K>> for DynController
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    fn from(c: Controller<K>) -> Self {
        let kind = c
            .primary
            .as_ref()
            .map_or_else(|| "object".to_owned(), |k| k.kind.clone());
        let kinded = c.primary.is_none();
        let run = c.reconcile.map(|reconcile| {
            let policy = c.error_policy.clone();
            Arc::new(move |item: WorkItem, ctx: Context| {
                let request = match decode::<K>(&item, &kind, kinded) {
                    Ok(request) => request,
                    Err(message) => {
                        tracing::warn!(key = %item.key, error = %message, "cannot decode the object of an item");
                        return Box::pin(std::future::ready(Outcome::error(message))) as BoxFuture<'static, Outcome>;
                    }
                };
                let fut = reconcile(request, ctx.clone());
                let policy = policy.clone();
                Box::pin(async move {
                    match fut.await {
                        Ok(action) => Outcome::from_action(action),
                        Err(err) => {
                            let message = error_chain(err.as_ref());
                            match &policy {
                                Some(policy) => Outcome::from_policy(policy(err.as_ref(), &ctx), message),
                                None => Outcome::error(message),
                            }
                        }
                    }
                }) as BoxFuture<'static, Outcome>
            }) as RunFn
        });
        Self {
            name: c.name,
            primary: c.primary,
            mappings: c.mappings,
            prefetch_owned: c.prefetch_owned,
            reads: c.reads,
            resync: c.resync,
            concurrency: c.concurrency,
            run,
        }
    }
}

fn decode<K: DeserializeOwned>(
    item: &WorkItem,
    kind: &str,
    kinded: bool,
) -> Result<Request<K>, String> {
    let object = if item.object.is_empty() {
        None
    } else {
        let object: K = serde_json::from_slice(&item.object)
            .map_err(|err| format!("object {} is not a valid {kind}: {err}", item.key))?;
        Some(Arc::new(object))
    };
    let (namespace, name) = if kinded {
        let parsed = KindedKey::parse(&item.key)
            .ok_or_else(|| format!("{} is not a kinded key", item.key))?;
        (parsed.namespace, parsed.name)
    } else {
        split_key(&item.key)
    };
    Ok(Request {
        key: item.key.clone(),
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
        object,
        attempt: item.attempt,
    })
}

/// The error and its sources, `: `-joined, as one line for logs and Done.
fn error_chain(err: &ReconcileError) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
