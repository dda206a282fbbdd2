//! A Session: one etcd lease kept alive by an owned task, and a token cancelled the moment the lease is in
//! doubt, so that work which needs the lease stops before the lease can expire (self-fencing).

use std::time::Duration;

use etcd_client::Client;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

use super::session_metrics::SESSION_METRICS;

/// Timing of a [`Session`].
#[derive(Debug, Clone, Copy)]
pub struct SessionConfig {
    /// Lease time-to-live. Default 5 s: a dead process frees what it held within seconds (where
    /// kube-controller-manager uses 15 s), and a healthy one renews it two or three times per TTL.
    pub ttl: Duration,
    /// How often the lease is renewed. Default 1 s; must be under a third of the TTL so that one lost
    /// renewal does not put the lease in doubt.
    pub renew_interval: Duration,
    /// The session counts as lost when no renewal has succeeded for this long since the last good one
    /// was sent. Default 4 s: one renew interval before the lease can expire, so whoever holds the
    /// session stops while the lease is certainly still valid.
    pub renew_deadline: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(5),
            renew_interval: Duration::from_secs(1),
            renew_deadline: Duration::from_secs(4),
        }
    }
}

impl SessionConfig {
    /// Checks the timing once at start-up.
    ///
    /// # Errors
    /// [`SessionError::Config`] when the TTL is under 2 s (etcd's minimum granularity makes shorter
    /// leases unreliable) or the renew interval is not under a third of it.
    pub fn validate(&self) -> Result<(), SessionError> {
        if self.ttl < Duration::from_secs(2) {
            return Err(SessionError::Config(format!(
                "lease ttl {:?} is under 2s",
                self.ttl
            )));
        }
        if self.renew_interval.is_zero() || self.renew_interval * 3 > self.ttl {
            return Err(SessionError::Config(format!(
                "renew interval {:?} must be positive and at most a third of the lease ttl {:?}",
                self.renew_interval, self.ttl
            )));
        }
        if !(self.renew_interval < self.renew_deadline && self.renew_deadline < self.ttl) {
            return Err(SessionError::Config(format!(
                "renew deadline {:?} must lie between the renew interval {:?} and the lease ttl {:?}",
                self.renew_deadline, self.renew_interval, self.ttl
            )));
        }
        Ok(())
    }

    /// How long before the lease's expiry (as far as this process knows) the session declares itself lost.
    fn fence_margin(&self) -> Duration {
        self.ttl.saturating_sub(self.renew_deadline)
    }
}

/// Errors of a [`Session`].
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The timing is unusable.
    #[error("invalid session config: {0}")]
    Config(String),
    /// etcd refused or could not be reached.
    #[error("etcd lease operation failed")]
    Etcd(#[source] etcd_client::Error),
}

/// An etcd lease kept alive in the background.
///
/// Dropping the session stops the keep-alive (the lease then expires after its TTL); [`Session::close`]
/// revokes it at once, which is what a graceful shutdown wants.
pub struct Session {
    client: Client,
    lease_id: i64,
    config: SessionConfig,
    lost: CancellationToken,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Session {
    /// Grants a lease and starts keeping it alive.
    ///
    /// # Errors
    /// [`SessionError::Config`] for bad timing; [`SessionError::Etcd`] when the lease cannot be granted.
    pub async fn start(client: Client, config: SessionConfig) -> Result<Self, SessionError> {
        config.validate()?;
        let ttl_secs = i64::try_from(config.ttl.as_secs()).unwrap_or(i64::MAX);
        let granted_at = Instant::now();
        let lease = client
            .clone()
            .lease_grant(ttl_secs, None)
            .await
            .map_err(SessionError::Etcd)?;
        let lease_id = lease.id();
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let expires_at = granted_at + Duration::from_secs(u64::try_from(lease.ttl()).unwrap_or(0));
        let task = tokio::spawn(
            keep_alive(
                client.clone(),
                lease_id,
                config,
                expires_at,
                lost.clone(),
                stop.clone(),
            )
            .instrument(info_span!("session", lease = format_args!("{lease_id:x}"))),
        );
        Ok(Self {
            client,
            lease_id,
            config,
            lost,
            stop,
            task: Some(task),
        })
    }

    /// The lease id, for keys that should live as long as this session.
    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }

    /// The lease's timing.
    pub fn config(&self) -> SessionConfig {
        self.config
    }

    /// The etcd client the session uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Cancelled when the lease is lost or in doubt: renewals failed for so long that it may expire
    /// within one renew interval, or etcd says it is gone. Never un-cancelled: a lost session is dead;
    /// start a new one.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the lease is lost or in doubt.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Stops the keep-alive and revokes the lease, deleting every key attached to it.
    pub async fn close(mut self) {
        self.stop.cancel();
        self.lost.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        if let Err(err) = self.client.clone().lease_revoke(self.lease_id).await {
            debug!(error = %err, "lease revoke failed; it will expire on its own");
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop.cancel();
        self.lost.cancel();
    }
}

async fn keep_alive(
    mut client: Client,
    lease_id: i64,
    config: SessionConfig,
    mut expires_at: Instant,
    lost: CancellationToken,
    stop: CancellationToken,
) {
    let mut ticker = tokio::time::interval(config.renew_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut channel: Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)> = None;
    loop {
        let fence_at = expires_at
            .checked_sub(config.fence_margin())
            .unwrap_or(expires_at);
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(fence_at) => {
                warn!("lease renewals failing; declaring the session lost before the lease can expire");
                lost.cancel();
                return;
            }
            _ = ticker.tick() => {}
        }
        let sent_at = Instant::now();
        let renewed = async {
            let (keeper, stream) = match channel.as_mut() {
                Some(open) => open,
                None => channel.insert(client.lease_keep_alive(lease_id).await?),
            };
            keeper.keep_alive().await?;
            stream.message().await
        };
        // A renewal that takes longer than the margin would leave us past the fence point anyway.
        match tokio::time::timeout(config.renew_interval, renewed).await {
            Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                SESSION_METRICS
                    .renew_duration
                    .observe(sent_at.elapsed().as_secs_f64());
                expires_at = sent_at + Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(0));
            }
            Ok(Ok(Some(_))) => {
                warn!("etcd says the lease is gone; session lost");
                lost.cancel();
                return;
            }
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                SESSION_METRICS.renew_failures.inc();
                debug!("lease renewal failed; retrying");
                channel = None;
            }
        }
    }
}
