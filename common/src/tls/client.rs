//! A worker's and `flotilla status`'s side of mutual TLS: a tonic connector that dials TCP and
//! handshakes with the current client certificate and CA (reloaded when their files change), verifying
//! the coordinator's certificate for the host dialled or for `--tls-server-name`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::TlsError;
use super::config::{TlsFiles, client_config};
use super::reload::Reloading;

/// A client's TLS: its certificate, the CA the server's must chain to, and the name the server's
/// certificate must carry (default: the host dialled); cheap to clone.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<Reloading<ClientConfig>>,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Loads `files` (each is read now, so a process does not start on unusable certificates);
    /// `server_name`, when given, is the name every server's certificate must carry instead of the host
    /// dialled (coordinators advertise pod IPs, their certificates a Service's DNS name).
    ///
    /// # Errors
    /// An unreadable or invalid file, or a `server_name` that is neither a DNS name nor an IP address.
    pub fn load(files: &TlsFiles, server_name: Option<&str>) -> Result<Self, TlsError> {
        let server_name = server_name
            .map(|name| {
                ServerName::try_from(name.to_owned())
                    .map_err(|_| TlsError::ServerName(name.chars().take(64).collect()))
            })
            .transpose()?;
        let built = files.clone();
        let config = Reloading::new(
            "client certificate and server CA",
            files.paths(),
            move || client_config(&built),
        )?;
        Ok(Self {
            config: Arc::new(config),
            server_name,
        })
    }

    /// A connector for tonic's `Endpoint::connect_with_connector`: the endpoint's URI stays
    /// `http://host:port` (the TLS is this connector's, not tonic's).
    pub fn connector(&self) -> TlsConnector {
        TlsConnector { tls: self.clone() }
    }

    fn name_for(&self, host: &str) -> Result<ServerName<'static>, std::io::Error> {
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        // An IPv6 URI host is bracketed.
        let host = host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_owned()).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{host:?} is not a name a certificate can carry"),
            )
        })
    }
}

/// Dials `host:port` of a URI and handshakes TLS (see [`ClientTls::connector`]).
#[derive(Clone, Debug)]
pub struct TlsConnector {
    tls: ClientTls,
}

impl tower::Service<http::Uri> for TlsConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, std::io::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let host = uri.host().ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "the address has no host")
            })?;
            let port = uri.port_u16().unwrap_or(443);
            let name = tls.name_for(host)?;
            let tcp =
                TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port))
                    .await?;
            let _ = tcp.set_nodelay(true);
            let connector = tokio_rustls::TlsConnector::from(tls.config.current().await);
            let stream = connector.connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}
