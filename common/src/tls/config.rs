//! rustls configurations built from PEM files: the coordinator's (its certificate; client certificates
//! required, chaining to the client CA) and a worker's or `flotilla status`'s (its client certificate;
//! the server's certificate must chain to the CA). Always the ring provider, never a process default.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::TlsError;

/// The files of one side of mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This process's certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA bundle (PEM) the peer's certificate must chain to.
    pub ca: PathBuf,
}

impl TlsFiles {
    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        vec![self.cert.clone(), self.key.clone(), self.ca.clone()]
    }
}

/// gRPC over HTTP/2, announced in ALPN so either side can tell at the handshake.
const ALPN_H2: &[u8] = b"h2";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Certificate, key and CA files are a few KiB (a whole public CA bundle is about 200 KiB): reading
/// stops here, so a flag pointing at a huge file costs no memory.
pub(crate) const MAX_PEM_BYTES: u64 = 4 * 1024 * 1024;

/// Reads a PEM file, which must be a regular file (symlinks followed: Kubernetes mounts Secrets through
/// them) of at most [`MAX_PEM_BYTES`].
///
/// A FIFO or a device is refused without being opened: opening a FIFO waits for a writer, and reading
/// either may never end, which froze a coordinator whose certificate path was swapped for a FIFO. The
/// type is checked again on what was opened; a swap in the instant between the two checks can still
/// block the open, which is why reloads run on the blocking pool and are waited for with a timeout
/// (`super::reload`).
///
/// # Errors
/// [`TlsError::Read`], [`TlsError::NotRegularFile`] or [`TlsError::TooLarge`].
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;

    let failed = |source| TlsError::Read {
        path: path.to_owned(),
        source,
    };
    let regular = |meta: &std::fs::Metadata| {
        if meta.is_file() {
            return Ok(());
        }
        Err(TlsError::NotRegularFile {
            path: path.to_owned(),
            kind: file_kind(meta.file_type()),
        })
    };
    regular(&std::fs::metadata(path).map_err(failed)?)?;
    let file = std::fs::File::open(path).map_err(failed)?;
    regular(&file.metadata().map_err(failed)?)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(TlsError::TooLarge {
            path: path.to_owned(),
            limit: MAX_PEM_BYTES,
        });
    }
    Ok(bytes)
}

/// What a file that is not a regular file is, for the error.
fn file_kind(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;

    if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_dir() {
        "directory"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|source| TlsError::Pem {
        path: path.to_owned(),
        source,
    })
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certs(path)? {
        store.add(cert).map_err(|source| TlsError::Rustls {
            what: format!("CA certificate in {}", path.display()),
            source,
        })?;
    }
    Ok(Arc::new(store))
}

fn rustls_error(what: &str, files: &TlsFiles) -> impl FnOnce(rustls::Error) -> TlsError {
    let what = format!(
        "{what} from {} and {}",
        files.cert.display(),
        files.key.display()
    );
    move |source| TlsError::Rustls { what, source }
}

/// The coordinator's configuration: its certificate, and a client certificate required of every
/// connection, verified against `files.ca`.
///
/// # Errors
/// An unreadable or invalid file, or a key that does not fit the certificate.
pub(crate) fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(&files.ca)?, provider())
        .build()
        .map_err(|source| TlsError::Verifier {
            path: files.ca.clone(),
            source,
        })?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_error("TLS versions", files))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(&files.cert)?, key(&files.key)?)
        .map_err(rustls_error("server certificate", files))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// A client's configuration: its certificate, and the server's verified against `files.ca`.
///
/// # Errors
/// An unreadable or invalid file, or a key that does not fit the certificate.
pub(crate) fn client_config(files: &TlsFiles) -> Result<ClientConfig, TlsError> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_error("TLS versions", files))?
        .with_root_certificates(roots(&files.ca)?)
        .with_client_auth_cert(certs(&files.cert)?, key(&files.key)?)
        .map_err(rustls_error("client certificate", files))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}
