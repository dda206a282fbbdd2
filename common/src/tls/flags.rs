//! The TLS flags every fleet process takes (coordinator, every worker binary, `flotilla status`) and
//! what they resolve to: mutual TLS, or plaintext only when `--insecure-plaintext` says so.

use std::path::PathBuf;

use tracing::warn;

use super::TlsError;
use super::client::ClientTls;
use super::config::TlsFiles;
use super::server::ServerTls;

/// `--tls-cert`, `--tls-key`, `--tls-client-ca`, `--tls-server-name`, `--insecure-plaintext`.
///
/// Contract: a process starts with all three files (mutual TLS) or with `--insecure-plaintext`;
/// with neither it refuses to start and says why ([`TlsError::NotConfigured`]), and so does
/// `--check-config`.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFlags {
    /// This process's TLS certificate (PEM, leaf first): the coordinator's server certificate, or a
    /// worker's (`flotilla status`'s) client certificate, whose DNS SAN (or CN, without SANs) must be
    /// the worker id. Re-read when the file changes.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM). Re-read when the file changes.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA bundle (PEM) the peer's certificate must chain to: on a coordinator, the CA of the workers'
    /// (and `flotilla status`'s) client certificates, which it requires; on a worker or `flotilla
    /// status`, the CA of the coordinators' server certificates. Re-read when the file changes.
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// Workers and `flotilla status` only: the name the coordinator's certificate must carry (default:
    /// the host of its advertised address, usually a pod IP). E.g. the gRPC Service's DNS name.
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Speak plaintext gRPC between workers and coordinators: no encryption, and any process that
    /// reaches the port may pose as any worker. For demos and tests; logs a warning.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "tls_client_ca", "tls_server_name"])]
    pub insecure_plaintext: bool,
}

impl TlsFlags {
    /// Mutual TLS on these flags: the three files.
    pub fn tls(cert: PathBuf, key: PathBuf, client_ca: PathBuf) -> Self {
        Self {
            tls_cert: Some(cert),
            tls_key: Some(key),
            tls_client_ca: Some(client_ca),
            ..Self::default()
        }
    }

    /// `--insecure-plaintext`.
    pub fn plaintext() -> Self {
        Self {
            insecure_plaintext: true,
            ..Self::default()
        }
    }

    /// The files, or `None` with `--insecure-plaintext`.
    ///
    /// # Errors
    /// [`TlsError::NotConfigured`] without TLS flags and without `--insecure-plaintext`;
    /// [`TlsError::Incomplete`] when only some of the three files are given.
    pub fn files(&self) -> Result<Option<TlsFiles>, TlsError> {
        if self.insecure_plaintext {
            return Ok(None);
        }
        match (&self.tls_cert, &self.tls_key, &self.tls_client_ca) {
            (None, None, None) => Err(TlsError::NotConfigured),
            (Some(cert), Some(key), Some(ca)) => Ok(Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            })),
            (cert, key, _) => Err(TlsError::Incomplete {
                missing: if cert.is_none() {
                    "--tls-cert"
                } else if key.is_none() {
                    "--tls-key"
                } else {
                    "--tls-client-ca"
                },
            }),
        }
    }

    /// The coordinator's transport: `Some` TLS with the files loaded, `None` for plaintext.
    ///
    /// # Errors
    /// As [`TlsFlags::files`]; [`TlsError::ServerNameOnServer`] with `--tls-server-name`; an
    /// unreadable or invalid file.
    pub fn server(&self) -> Result<Option<ServerTls>, TlsError> {
        if self.tls_server_name.is_some() {
            return Err(TlsError::ServerNameOnServer);
        }
        self.files()?
            .map(|files| ServerTls::load(&files))
            .transpose()
    }

    /// A client's transport, with the files loaded.
    ///
    /// # Errors
    /// As [`TlsFlags::files`]; an unreadable or invalid file; an invalid `--tls-server-name`.
    pub fn client(&self) -> Result<ClientTransport, TlsError> {
        Ok(match self.files()? {
            None => ClientTransport::Plaintext,
            Some(files) => {
                ClientTransport::Tls(ClientTls::load(&files, self.tls_server_name.as_deref())?)
            }
        })
    }

    /// Logs the warning `--insecure-plaintext` deserves (call once logging is set up).
    pub fn warn_if_plaintext(&self) {
        if self.insecure_plaintext {
            warn!(
                "--insecure-plaintext: gRPC between workers and coordinators is neither encrypted nor \
                 authenticated, and anything that reaches the port can pose as any worker"
            );
        }
    }
}

/// How a client reaches a coordinator's gRPC port; cheap to clone.
#[derive(Clone, Debug, Default)]
pub enum ClientTransport {
    /// Plaintext HTTP/2 (`--insecure-plaintext`; also the default of configurations built in code,
    /// as in-process tests and benchmarks do).
    #[default]
    Plaintext,
    /// Mutual TLS.
    Tls(ClientTls),
}

impl ClientTransport {
    /// Connects `endpoint` (whose URI is `http://host:port` either way).
    ///
    /// # Errors
    /// tonic's, with the TLS handshake's error as its source.
    pub async fn connect(
        &self,
        endpoint: tonic::transport::Endpoint,
    ) -> Result<tonic::transport::Channel, tonic::transport::Error> {
        match self {
            Self::Plaintext => endpoint.connect().await,
            Self::Tls(tls) => endpoint.connect_with_connector(tls.connector()).await,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tls: TlsFlags,
    }

    fn parse(args: &[&str]) -> Result<TlsFlags, clap::Error> {
        Cli::try_parse_from(std::iter::once("p").chain(args.iter().copied())).map(|c| c.tls)
    }

    #[test]
    fn neither_tls_flags_nor_insecure_plaintext_is_refused_saying_what_to_give() {
        let err = parse(&[]).unwrap().files().unwrap_err();
        let message = err.to_string();
        assert!(message.contains("--tls-cert"), "{message}");
        assert!(message.contains("--insecure-plaintext"), "{message}");
    }

    #[test]
    fn some_but_not_all_files_is_refused_naming_the_missing_flag() {
        let err = parse(&["--tls-cert", "c", "--tls-client-ca", "ca"])
            .unwrap()
            .files()
            .unwrap_err();
        assert!(err.to_string().contains("--tls-key"), "{err}");
    }

    #[test]
    fn insecure_plaintext_conflicts_with_the_tls_flags() {
        let err = parse(&["--insecure-plaintext", "--tls-cert", "c"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        assert_eq!(
            parse(&["--insecure-plaintext"]).unwrap().files().unwrap(),
            None
        );
    }

    #[test]
    fn a_coordinator_refuses_a_server_name_and_unreadable_files_are_errors() {
        let flags = parse(&[
            "--tls-cert",
            "/n/c",
            "--tls-key",
            "/n/k",
            "--tls-client-ca",
            "/n/ca",
        ])
        .unwrap();
        assert!(matches!(flags.server(), Err(TlsError::Read { .. })));
        assert!(matches!(flags.client(), Err(TlsError::Read { .. })));
        let mut named = flags.clone();
        named.tls_server_name = Some("coordinator.example".into());
        assert!(matches!(named.server(), Err(TlsError::ServerNameOnServer)));
    }
}
