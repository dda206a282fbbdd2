//! Mutual TLS between workers and coordinators (and `flotilla status`): the flags, certificates
//! reloaded when their files change, the coordinator's acceptor, the clients' connector, and the rule
//! that a worker's certificate names the worker id it registers with.
//!
//! The coordinator requires a client certificate chaining to `--tls-client-ca`; the `Dispatch` and
//! `Cache` services then check its identity ([`check_worker_identity`]) against the worker id of the
//! Hello and of the `flotilla-worker-id` metadata. The `Admin` service (read-only status) asks only
//! for a certificate of that CA.

mod client;
mod config;
mod flags;
mod identity;
mod metrics;
mod reload;
mod server;

pub use client::{ClientTls, TlsConnector};
pub use config::TlsFiles;
pub use flags::{ClientTransport, TlsFlags};
pub use identity::{IdentityError, NameSource, PeerIdentity, check_worker_identity};
pub use metrics::register_tls_metrics;
pub use reload::{RECHECK, RELOAD_TIMEOUT};
pub use server::ServerTls;

use std::path::PathBuf;

/// Errors of setting up TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Neither TLS flags nor `--insecure-plaintext`.
    #[error(
        "no transport security configured: give --tls-cert, --tls-key and --tls-client-ca for mutual TLS \
         between workers and coordinators, or --insecure-plaintext to run without it (demos and tests only)"
    )]
    NotConfigured,
    /// Some of the three files are missing.
    #[error("--tls-cert, --tls-key and --tls-client-ca go together: {missing} is missing")]
    Incomplete {
        /// The missing flag.
        missing: &'static str,
    },
    /// `--tls-server-name` on a coordinator.
    #[error("--tls-server-name is for workers and flotilla status, not for a coordinator")]
    ServerNameOnServer,
    /// `--tls-server-name` is neither a DNS name nor an IP address.
    #[error("--tls-server-name {0:?} is neither a DNS name nor an IP address")]
    ServerName(String),
    /// A file cannot be read.
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
    /// A file is a FIFO, a device, a directory or a socket: reading it could block for good.
    #[error("{} is a {kind}, not a regular file: refusing to read it", path.display())]
    NotRegularFile {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// A file is larger than any certificate, key or CA bundle.
    #[error("{} is larger than {limit} bytes: not a certificate, key or CA bundle", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound.
        limit: u64,
    },
    /// A certificate file holds no certificate.
    #[error("{} holds no certificate", .0.display())]
    NoCertificate(PathBuf),
    /// rustls refused the material.
    #[error("unusable {what}")]
    Rustls {
        /// What was being set up.
        what: String,
        /// Why.
        #[source]
        source: rustls::Error,
    },
    /// The client CA cannot verify client certificates.
    #[error("cannot verify client certificates with the CA in {}", path.display())]
    Verifier {
        /// The CA file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
}
