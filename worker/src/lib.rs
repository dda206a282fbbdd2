//! The Flotilla worker runtime: takes items from the leading coordinator and reconciles them with the
//! controllers it is given — lease and self-fencing, leader following, credits, the reconcile engine,
//! the recording and rate-limited Kubernetes client, flags and the one-call entry points.
//!
//! Controllers are written against `flotilla-sdk`, whose `host` contract this crate implements; the
//! built-in controllers live in `flotilla-controllers`. A custom controller binary is one call:
//!
//! ```no_run
//! # use flotilla_sdk::{Action, Context, Controller, Request};
//! # use flotilla_sdk::k8s_openapi::api::core::v1::ConfigMap;
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

mod runtime;

pub use runtime::{
    ConfigError, KubeStackError, SelectionError, Worker, WorkerConfig, WorkerError, WorkerFlags,
    concurrency_arg, concurrency_flag, concurrency_value, default_worker_id, run, run_custom,
    run_with_flags, select_controllers,
};
