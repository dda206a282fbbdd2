//! The reconcile's lister: typed Get and List of cached objects ([`CacheClient`]) over a
//! [`CacheBackend`] — the leading coordinator's informer cache in a worker, a [`MemoryCache`] in a test.

mod backend;
mod client;
mod memory;
mod query;

pub use backend::{CacheBackend, CacheSlot};
pub use client::{CacheClient, CacheError};
pub use memory::{MemoryCache, MemoryCacheError};
pub use query::CacheQuery;
