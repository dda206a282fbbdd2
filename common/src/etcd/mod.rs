//! etcd primitives in the shape of etcd's `client/v3/concurrency`: a [`Session`] is a lease kept alive with
//! a "lost" signal; an [`Election`] is campaign / resign / leader / observe on top of it.

mod election;
mod session;
mod session_metrics;

pub use election::{Elected, Election, ElectionError, LeaderInfo, Leadership};
pub use session::{Session, SessionConfig, SessionError};
pub use session_metrics::register_session_metrics;

/// Connects to etcd at `endpoints`.
///
/// # Errors
/// Fails when no endpoint can be reached.
pub async fn connect_etcd(endpoints: &[String]) -> Result<etcd_client::Client, etcd_client::Error> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(std::time::Duration::from_secs(3))
        .with_timeout(std::time::Duration::from_secs(5))
        .with_keep_alive(
            std::time::Duration::from_secs(2),
            std::time::Duration::from_secs(2),
        );
    etcd_client::Client::connect(endpoints, Some(options)).await
}
