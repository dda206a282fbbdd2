//! The Flotilla worker: the runtime that takes items from the leading coordinator and reconciles them,
//! the controller SDK custom controllers are written against, and the registry of built-in
//! controllers.
//!
//! A custom controller binary is one call:
//!
//! ```no_run
//! # use flotilla_worker::{Action, Context, Controller, Request};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # #[derive(Debug, thiserror::Error)] #[error("x")] struct Error;
//! async fn reconcile(req: Request<ConfigMap>, ctx: Context) -> Result<Action, Error> {
//!     Ok(Action::await_change())
//! }
//! #[tokio::main]
//! async fn main() -> anyhow::Result<()> {
//!     let controller = Controller::<ConfigMap>::new("example").reconcile(reconcile);
//!     flotilla_worker::run_custom(vec![controller.into()]).await
//! }
//! ```

pub mod builtin;
mod runtime;
mod sdk;

pub use runtime::{
    ConfigError, KubeStackError, SelectionError, Worker, WorkerConfig, WorkerError, WorkerFlags,
    concurrency_arg, concurrency_flag, concurrency_value, default_worker_id, run, run_custom,
    run_with_flags, select_controllers,
};
pub use sdk::{
    Action, CacheClient, CacheError, CacheQuery, Context, ContextError, Controller,
    DEFAULT_CONCURRENCY, DynController, KindScope, ReconcileError, Request, kind_of,
};
