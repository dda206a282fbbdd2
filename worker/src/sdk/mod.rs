//! The controller SDK, in the shape kube-rs users know: a [`Controller`] is a spec plus a reconcile
//! function and an error policy; a reconcile gets a [`Request`] and a [`Context`] and returns an
//! [`Action`].

mod action;
mod cache;
mod context;
mod controller;
mod kind;
mod request;

pub use action::Action;
pub(crate) use action::Outcome;
pub(crate) use cache::CacheEndpoint;
pub use cache::{CacheClient, CacheError, CacheQuery};
pub(crate) use context::{CacheSlot, ControllerEnv};
pub use context::{Context, ContextError};
pub(crate) use controller::WorkItem;
pub use controller::{Controller, DEFAULT_CONCURRENCY, DynController, ReconcileError};
pub use kind::{KindScope, kind_of};
pub use request::Request;
