//! HTTPS for devcluster's API, as kube-apiserver serves it: a serving certificate (generated at
//! start under a CA generated with it, or loaded from kube-apiserver's `--tls-cert-file` and
//! `--tls-private-key-file`), the CA the kubeconfig trusts, and a listener whose connections are TLS
//! streams, each handshaken in a task of its own so a slow peer delays nobody.
//!
//! Why HTTPS at all on loopback: kubectl (client-go's `clientcmd`) sends a kubeconfig's credentials
//! only to a TLS server, so against a plain-HTTP devcluster with `--authorization-mode RBAC` every
//! kubectl request is `system:anonymous`. [`Serving::Auto`] therefore serves HTTPS exactly when
//! authorization is RBAC and plain HTTP otherwise: with `AlwaysAllow` every request is the
//! administrator's and a certificate protects nothing, while every in-repo client that talks to an
//! `AlwaysAllow` devcluster by address (the test proxies, `flotilla up`'s banner) keeps working.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span};

use super::auth::AuthorizationMode;

/// A handshake must finish within this, so a peer that connects and says nothing holds nothing for long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections handshaken but not yet taken by the HTTP server; handshakes wait beyond this.
const ACCEPTED_BACKLOG: usize = 64;

/// Only HTTP/1.1 is offered in ALPN: the HTTP server speaks HTTP/1 only, and kubectl, which would
/// pick `h2` if offered, falls back to HTTP/1.1 as it does against any server without it.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// How devcluster serves its API: the scheme of [`DevCluster::url`](super::DevCluster::url) and of
/// the kubeconfig it writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Serving {
    /// HTTPS with a generated certificate when authorization is RBAC (so kubectl sends the
    /// kubeconfig's token), plain HTTP otherwise (see the module docs).
    #[default]
    Auto,
    /// Plain HTTP, whatever the authorization mode.
    Http,
    /// HTTPS with a certificate generated at start: ECDSA P-256, SANs `127.0.0.1`, `::1`,
    /// `localhost` and the listen address (unless unspecified), signed by a CA generated with it,
    /// whose key is dropped once it has signed. The kubeconfig carries the CA.
    HttpsGenerated,
    /// HTTPS with the certificate chain (PEM, leaf first) and private key (PEM: PKCS#8, PKCS#1 or
    /// SEC1) of these files, kube-apiserver's `--tls-cert-file` and `--tls-private-key-file`. The
    /// kubeconfig carries every certificate of `cert_file` as its CA data, so a self-signed
    /// certificate, or a chain that ends with its root, needs nothing else.
    HttpsFiles {
        /// The certificate chain.
        cert_file: PathBuf,
        /// Its private key.
        key_file: PathBuf,
    },
}

impl Serving {
    /// What `self` means for a server authorizing with `mode`: [`Serving::Auto`] becomes
    /// [`Serving::HttpsGenerated`] with RBAC and [`Serving::Http`] otherwise; the rest stay.
    pub fn resolve(self, mode: AuthorizationMode) -> Serving {
        match (self, mode) {
            (Serving::Auto, AuthorizationMode::Rbac) => Serving::HttpsGenerated,
            (Serving::Auto, AuthorizationMode::AlwaysAllow) => Serving::Http,
            (other, _) => other,
        }
    }
}

/// Failures of setting up HTTPS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating the CA or the serving certificate failed.
    #[error("cannot generate the serving certificate")]
    Generate(#[source] rcgen::Error),
    /// A certificate or key file cannot be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file is not the PEM expected.
    #[error("{} is not valid PEM for this flag", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("{} holds no certificate", .0.display())]
    NoCertificate(PathBuf),
    /// rustls refused the certificate or key (for example a key that does not fit the certificate).
    #[error("unusable serving certificate and key")]
    Rustls(#[source] rustls::Error),
}

/// The serving side of HTTPS: the rustls configuration and the CA (PEM) clients must trust.
#[derive(Clone)]
pub(crate) struct ServingTls {
    config: Arc<ServerConfig>,
    ca_pem: String,
}

impl std::fmt::Debug for ServingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingTls").finish_non_exhaustive()
    }
}

impl ServingTls {
    /// The TLS of `serving` (already [resolved](Serving::resolve)) for a server on `listen`; `None`
    /// for plain HTTP.
    ///
    /// # Errors
    /// Certificate generation failed, or the files are unreadable or unusable.
    pub(crate) fn for_serving(
        serving: &Serving,
        listen: SocketAddr,
    ) -> Result<Option<ServingTls>, TlsError> {
        match serving {
            Serving::Auto | Serving::Http => Ok(None),
            Serving::HttpsGenerated => ServingTls::generate(listen.ip()).map(Some),
            Serving::HttpsFiles {
                cert_file,
                key_file,
            } => ServingTls::load(cert_file, key_file).map(Some),
        }
    }

    /// A fresh CA and a serving certificate it signed for loopback and `host`.
    fn generate(host: IpAddr) -> Result<ServingTls, TlsError> {
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "flotilla-devcluster-ca");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().map_err(TlsError::Generate)?;
        let ca_cert = ca_params.self_signed(&ca_key).map_err(TlsError::Generate)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let mut params = CertificateParams::default();
        params.subject_alt_names = serving_sans(host);
        params
            .distinguished_name
            .push(DnType::CommonName, "flotilla-devcluster");
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().map_err(TlsError::Generate)?;
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(TlsError::Generate)?;
        // rcgen serializes private keys as PKCS#8.
        let key_der = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let chain = vec![cert.der().clone()];
        Ok(ServingTls {
            config: server_config(chain, key_der)?,
            ca_pem: ca_cert.pem(),
        })
    }

    /// The certificate chain and key of these files; the CA is the chain itself.
    fn load(cert_file: &Path, key_file: &Path) -> Result<ServingTls, TlsError> {
        let cert_pem = read(cert_file)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| TlsError::Pem {
                path: cert_file.to_owned(),
                source,
            })?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate(cert_file.to_owned()));
        }
        let key =
            PrivateKeyDer::from_pem_slice(&read(key_file)?).map_err(|source| TlsError::Pem {
                path: key_file.to_owned(),
                source,
            })?;
        Ok(ServingTls {
            config: server_config(chain, key)?,
            ca_pem: String::from_utf8_lossy(&cert_pem).into_owned(),
        })
    }

    /// The CA clients must trust, PEM: the kubeconfig's `certificate-authority-data`.
    pub(crate) fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Serves `listener`'s connections as TLS streams through the returned [`TlsListener`], for
    /// `axum::serve`. The accept task stops when `cancel` fires or the listener is dropped; the
    /// caller owns its handle. A failed handshake (not TLS, an untrusted certificate on the client's
    /// side, a timeout) is logged at debug level and dropped.
    pub(crate) fn listen(
        &self,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> (TlsListener, JoinHandle<()>) {
        let local = listener.local_addr().ok();
        let (tx, rx) = mpsc::channel(ACCEPTED_BACKLOG);
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config.clone());
        let task = tokio::spawn(
            async move {
                loop {
                    let accepted = tokio::select! {
                        biased;
                        () = cancel.cancelled() => break,
                        () = tx.closed() => break,
                        accepted = listener.accept() => accepted,
                    };
                    let (tcp, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(err) => {
                            // Per-connection errors (the peer reset before accept, too many open
                            // files): as axum's own TCP listener, pause briefly and go on.
                            debug!(error = %err, "accept failed");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let _ = tcp.set_nodelay(true);
                    let acceptor = acceptor.clone();
                    let tx = tx.clone();
                    // Bounded by the handshake timeout, and its result goes nowhere once the server
                    // stopped (the send fails), so it needs no stop signal of its own.
                    tokio::spawn(
                        async move {
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
                                .await
                            {
                                Ok(Ok(stream)) => {
                                    let _ = tx.send((stream, peer)).await;
                                }
                                Ok(Err(err)) => debug!(error = %err, "TLS handshake failed"),
                                Err(_) => debug!("TLS handshake timed out"),
                            }
                        }
                        .instrument(info_span!("tls_handshake", %peer)),
                    );
                }
            }
            .instrument(info_span!("devcluster_tls_accept")),
        );
        (TlsListener { rx, local }, task)
    }
}

/// The SANs of a generated serving certificate: loopback by address and name, and `host` when it
/// is a specific address (an unspecified one, `0.0.0.0` or `::`, is no name a client dials).
fn serving_sans(host: IpAddr) -> Vec<SanType> {
    let mut ips = vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    if !host.is_unspecified() && !ips.contains(&host) {
        ips.push(host);
    }
    let mut sans: Vec<SanType> = ips.into_iter().map(SanType::IpAddress).collect();
    if let Ok(name) = "localhost".try_into() {
        sans.push(SanType::DnsName(name));
    }
    sans
}

/// rustls's server configuration for `chain` and `key`: no client certificates, HTTP/1.1 in ALPN,
/// the ring provider (the workspace's one crypto library), never a process default.
fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(TlsError::Rustls)?;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Handshaken TLS connections, for `axum::serve`. Ends (waits forever) once the accept task stopped,
/// which happens only at shutdown, when the server no longer accepts.
pub(crate) struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: Option<SocketAddr>,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(accepted) => accepted,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.local
            .ok_or_else(|| std::io::Error::other("the listener had no local address"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_serves_https_only_with_rbac() {
        assert_eq!(
            Serving::Auto.resolve(AuthorizationMode::Rbac),
            Serving::HttpsGenerated
        );
        assert_eq!(
            Serving::Auto.resolve(AuthorizationMode::AlwaysAllow),
            Serving::Http
        );
        assert_eq!(
            Serving::Http.resolve(AuthorizationMode::Rbac),
            Serving::Http
        );
        assert_eq!(
            Serving::HttpsGenerated.resolve(AuthorizationMode::AlwaysAllow),
            Serving::HttpsGenerated
        );
    }

    #[test]
    fn a_generated_certificate_names_loopback_and_a_specific_listen_address() {
        let sans = serving_sans("10.1.2.3".parse().unwrap());
        let ips: Vec<IpAddr> = sans
            .iter()
            .filter_map(|san| match san {
                SanType::IpAddress(ip) => Some(*ip),
                _ => None,
            })
            .collect();
        assert_eq!(
            ips,
            vec![
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap(),
                "10.1.2.3".parse().unwrap()
            ]
        );
        assert!(
            sans.iter()
                .any(|san| matches!(san, SanType::DnsName(n) if n.as_str() == "localhost"))
        );
        assert_eq!(serving_sans("0.0.0.0".parse().unwrap()).len(), 3);
        assert_eq!(serving_sans("127.0.0.1".parse().unwrap()).len(), 3);
    }

    #[test]
    fn generated_tls_carries_a_ca_certificate() {
        let tls = ServingTls::generate("127.0.0.1".parse().unwrap()).unwrap();
        assert!(tls.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(tls.config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn certificate_files_load_and_are_the_ca_the_kubeconfig_carries() {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let tls = ServingTls::load(&cert_file, &key_file).unwrap();
        assert_eq!(tls.ca_pem(), cert.pem());
        let other = KeyPair::generate().unwrap();
        std::fs::write(&key_file, other.serialize_pem()).unwrap();
        let err = ServingTls::load(&cert_file, &key_file).unwrap_err();
        assert!(
            matches!(err, TlsError::Rustls(_)),
            "a key that does not fit: {err}"
        );
    }

    #[test]
    fn files_without_a_certificate_are_refused_with_their_path() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("empty.crt");
        let key = dir.path().join("empty.key");
        std::fs::write(&cert, "").unwrap();
        std::fs::write(&key, "").unwrap();
        let err = ServingTls::load(&cert, &key).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate(p) if p == cert));
        let missing = dir.path().join("missing.crt");
        let err = ServingTls::load(&missing, &key).unwrap_err();
        assert!(err.to_string().contains("missing.crt"), "{err}");
    }
}
