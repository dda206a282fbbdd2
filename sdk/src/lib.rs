//! The Flotilla controller SDK: all a custom controller depends on. In the shape kube-rs users know
//! (`kube::runtime::Controller`): a [`Controller`] is a spec plus a reconcile function and an error
//! policy; a reconcile gets a [`Request`] and a [`Context`] and returns an [`Action`].
//!
//! The SDK depends on no etcd, gRPC or command-line crate. It re-exports [`kube`] and [`k8s_openapi`]
//! so a controller needs no version pins of its own, and it runs nothing: a controller binary hands
//! its controllers to the worker runtime (`flotilla_worker::run_custom`), which implements what
//! [`host`] declares.
//!
//! ```no_run
//! use flotilla_sdk::k8s_openapi::api::core::v1::ConfigMap;
//! use flotilla_sdk::{Action, Context, Controller, Request};
//! # #[derive(Debug, thiserror::Error)] #[error("x")] struct Error;
//!
//! async fn reconcile(req: Request<ConfigMap>, ctx: Context) -> Result<Action, Error> {
//!     // req.object() is None when the object is gone; ctx.client() records writes for
//!     // read-your-writes; ctx.cache() reads the coordinator's cache.
//!     Ok(Action::await_change())
//! }
//!
//! let controller = Controller::<ConfigMap>::new("example").reconcile(reconcile);
//! // flotilla_worker::run_custom(vec![controller.into()]).await
//! ```
//!
//! A reconcile is unit-tested with a [`Context`] built in the test ([`Context::for_test`]):
//! prefetched objects, a [`MemoryCache`] and a `kube::Client` of the test's choosing.

mod action;
mod cache;
mod clients;
mod context;
mod controller;
mod dyn_controller;
mod event_correlator;
pub mod host;
mod kind;
mod outcome;
mod recorder;
mod request;
mod spam_filter;
mod spec;
mod test_context;
mod writes;

pub use action::Action;
pub use cache::{CacheBackend, CacheClient, CacheError, CacheQuery, MemoryCache, MemoryCacheError};
pub use context::{Context, ContextError};
pub use controller::{Controller, DEFAULT_CONCURRENCY, ReconcileError};
pub use dyn_controller::DynController;
pub use kind::{KindScope, kind_of};
pub use recorder::{EventRecorder, EventType};
pub use request::Request;
pub use test_context::TestContext;

/// The Kubernetes vocabulary: kinds and keys, label selectors, the finalizers of deletion propagation.
pub use flotilla_apimachinery as apimachinery;
pub use flotilla_apimachinery::{KindedKey, Reason, ResourceKind};
/// The Kubernetes API types, at the version the fleet is built with.
pub use k8s_openapi;
/// The Kubernetes client, at the version the fleet is built with.
pub use kube;
