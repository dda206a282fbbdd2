//! Shared informers: one list+watch per kind for the whole coordinator, a cache with indexes, and the
//! events that drive the dispatcher.

mod discovery;
mod error;
mod event;
mod factory;
#[cfg(test)]
mod fuzz_tests;
mod json_field;
mod labels;
mod metrics;
mod named_index;
mod namespace_filter;
mod object;
mod relist;
mod scope;
mod store;
mod subscriber;
mod watch;
mod watch_list;

pub use discovery::deletable_resources;
pub use error::InformerError;
pub use event::InformerEvent;
pub use factory::{InformerStatus, Informers};
pub use labels::Labels;
pub use named_index::{IndexLookupError, IndexSpec};
pub use object::{CachedObject, OwnerRef};
pub use scope::{NamespaceScope, ScopeError};
pub use store::Store;

use metrics::InformerMetrics;
use named_index::Declarations;
use relist::relist_diff;
use subscriber::Subscriber;
use watch::{InformerState, PartEvents, run_scoped_informer};
