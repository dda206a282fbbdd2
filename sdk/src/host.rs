//! What a runtime that runs controllers implements and calls (the worker runtime, `flotilla-worker`,
//! is the one there is). A custom controller needs none of it.
//!
//! The runtime implements [`KubeClients`] (rate-limited clients whose writes land in a
//! [`WriteJournal`]) and [`CacheBackend`](crate::CacheBackend) (the leader's cache), holds the backend
//! in a [`CacheSlot`], builds one [`ControllerEnv`] per controller and one
//! [`Context`](crate::Context) per item, runs [`DynController::run`](crate::DynController::run) on a
//! [`WorkItem`] and reports the [`Outcome`] and the journal's [`Write`]s; it maps
//! [`ControllerSpec`] and those to the protocol at its own edge.

pub use crate::cache::CacheSlot;
pub use crate::clients::KubeClients;
pub use crate::context::ControllerEnv;
pub use crate::dyn_controller::WorkItem;
pub use crate::outcome::Outcome;
pub use crate::spec::{ControllerSpec, IndexSpec, Mapping, MappingRule};
pub use crate::writes::{Write, WriteJournal, WriteOp};
