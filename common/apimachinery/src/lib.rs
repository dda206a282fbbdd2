//! The Kubernetes vocabulary every Flotilla crate shares, named after `k8s.io/apimachinery`: resource
//! kinds and object keys, kinded keys, label selectors, dotted field paths and the finalizers of deletion propagation,
//! why a reconcile runs and what it wrote; and how a controller maps related kinds to its keys and
//! indexes the cache.
//!
//! It depends on no etcd, gRPC or command-line crate, so the controller SDK (`flotilla-sdk`) can carry
//! it to custom controllers; the protocol crate maps its types to and from the wire, and
//! `flotilla-common` re-exports it for the coordinator and the worker runtime.

mod field_path;
mod kind;
mod kinded_key;
mod mapping;
mod propagation;
mod reason;
mod selector;
mod write;

#[cfg(test)]
mod fuzz_tests;

pub use field_path::{BUILTIN_INDEXES, string_at, value_at};
pub use kind::{ResourceKind, split_key};
pub use kinded_key::KindedKey;
pub use mapping::{IndexSpec, Mapping, MappingRule};
pub use propagation::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
pub use reason::Reason;
pub use selector::{Expected, LabelSelector, LabelSet, SelectorError};
pub use write::{Write, WriteOp};
