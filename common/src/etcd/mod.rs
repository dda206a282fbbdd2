//! etcd primitives in the shape of etcd's `client/v3/concurrency`: a [`Session`] is a lease kept alive with
//! a "lost" signal; an [`Election`] is campaign / resign / leader / observe on top of it.
//!
//! How to reach etcd (endpoints, TLS, user, key prefix) is [`EtcdFlags`] on the command line and
//! [`EtcdClientConfig`] once read.

mod election;
mod options;
mod paged;
mod session;
mod session_metrics;

pub use election::{Elected, Election, ElectionError, LeaderInfo, Leadership};
pub use options::{
    DEFAULT_ETCD_PREFIX, EtcdClientConfig, EtcdConnectError, EtcdFlags, EtcdOptionsError,
};
pub use paged::get_prefix_paged;
pub use session::{Session, SessionConfig, SessionError};
pub use session_metrics::register_session_metrics;

/// Connects to a plaintext etcd without a user at `endpoints`, lazily: for tests and tools on a
/// local etcd. The roles connect with [`EtcdClientConfig::connect`].
///
/// # Errors
/// Fails when an endpoint is malformed.
pub async fn connect_etcd(endpoints: &[String]) -> Result<etcd_client::Client, etcd_client::Error> {
    let config = EtcdClientConfig::plaintext(endpoints.to_vec());
    etcd_client::Client::connect(endpoints, Some(config.connect_options())).await
}
