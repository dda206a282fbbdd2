//! The coordinator's side of mutual TLS: accepted TCP connections handshaken with the current
//! certificates (reloaded when their files change), handed to tonic's `serve_with_incoming` as
//! `tokio_rustls` streams, whose `Connected` info carries the client's certificates to the handlers
//! (`Request::peer_certs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tracing::{Instrument, debug, info_span};

use super::TlsError;
use super::config::{TlsFiles, server_config};
use super::reload::Reloading;

/// A handshake must finish within this, so a peer that opens a connection and says nothing holds
/// nothing for long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections handshaken but not yet taken by the server; the accept loop waits beyond this.
const ACCEPTED_BACKLOG: usize = 64;

/// The coordinator's TLS: its certificate and client CA, reloaded when their files change; cheap to
/// clone.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<Reloading<ServerConfig>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads `files` (each is read now, so a process does not start on unusable certificates).
    ///
    /// # Errors
    /// An unreadable or invalid file (see [`TlsError`]).
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let built = files.clone();
        let config = Reloading::new(
            "server certificate and client CA",
            files.paths(),
            move || server_config(&built),
        )?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// Serves `listener`'s connections as TLS streams, each handshaken in a task of its own (so a slow
    /// peer, or a certificate reload, delays nobody) within 10 s. A failed handshake — no client certificate, one from an unknown
    /// CA, not TLS at all — is passed to `refused` with the peer's address and dropped; the stream goes
    /// on. The stream ends when `listener` fails; dropping it stops accepting.
    ///
    /// Give it to tonic's `Server::serve_with_incoming`: tonic's `Connected` impl for
    /// `tokio_rustls::server::TlsStream` puts the peer's certificates in each request's extensions.
    pub fn incoming(
        &self,
        listener: TcpListener,
        refused: impl Fn(SocketAddr, &std::io::Error) + Send + Sync + 'static,
    ) -> impl Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> + Send + 'static {
        let (tx, rx) = mpsc::channel(ACCEPTED_BACKLOG);
        let tls = self.clone();
        let refused = Arc::new(refused);
        tokio::spawn(
            async move {
                loop {
                    let accepted = tokio::select! {
                        biased;
                        () = tx.closed() => break,
                        accepted = listener.accept() => accepted,
                    };
                    let (tcp, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(err) => {
                            // Per-connection errors (the peer reset before accept) are not the
                            // listener's; tonic's own TCP incoming skips them too.
                            debug!(error = %err, "accept failed");
                            continue;
                        }
                    };
                    let _ = tcp.set_nodelay(true);
                    let config = tls.config.clone();
                    let tx = tx.clone();
                    let refused = refused.clone();
                    // Bounded by the reload and handshake timeouts, and its result goes nowhere once
                    // the server stopped (the send fails), so it needs no stop signal of its own. The
                    // certificate is looked up here, not in the loop: a reload that must read files
                    // never holds up accepting.
                    tokio::spawn(
                        async move {
                            let acceptor = tokio_rustls::TlsAcceptor::from(config.current().await);
                            let handshake =
                                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
                            match handshake {
                                Ok(Ok(stream)) => {
                                    let _ = tx.send(Ok(stream)).await;
                                }
                                Ok(Err(err)) => refused(peer, &err),
                                Err(_) => refused(
                                    peer,
                                    &std::io::Error::new(
                                        std::io::ErrorKind::TimedOut,
                                        "TLS handshake timed out",
                                    ),
                                ),
                            }
                        }
                        .instrument(info_span!("tls_handshake", %peer)),
                    );
                }
            }
            .instrument(info_span!("tls_accept")),
        );
        let mut rx = rx;
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
