//! The state every request handler shares: registry, storage, watch cache, timing knobs, shutdown token,
//! quota locks, authentication and authorization.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::auth::Auth;
use super::quota::NamespaceLocks;
use super::registry::Registry;
use super::storage::Storage;
use super::watch_cache::WatchCache;

/// Shared handler state.
#[derive(Clone)]
pub struct ApiState {
    /// Served kinds.
    pub registry: Arc<Registry>,
    /// etcd.
    pub storage: Storage,
    /// The watch cache.
    pub cache: Arc<WatchCache>,
    /// Bookmark cadence for watchers that allow bookmarks.
    pub bookmark_interval: Duration,
    /// Cancelled at shutdown; ends open watches.
    pub cancel: CancellationToken,
    /// `host:port` the server listens on (for `/api`'s serverAddressByClientCIDRs).
    pub address: String,
    /// Serialises pod creates per namespace while a pod-count quota is checked (see `quota`).
    pub quota_locks: Arc<NamespaceLocks>,
    /// Authentication, authorization and their decision record.
    pub auth: Arc<Auth>,
}
