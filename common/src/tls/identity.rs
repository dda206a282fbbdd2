//! The identity a peer's certificate proves, and the rule a worker's certificate must meet: it names
//! the worker id the worker registers with.
//!
//! The identity of a certificate is its DNS subject alternative names, or — only when it has no DNS SAN
//! — its subject common name(s), as Kubernetes and etcd read client certificates. A worker id matches
//! when it equals one of them, ASCII case-insensitively (worker ids are DNS-1123 subdomains, and DNS
//! names are case-insensitive), or when a name is a wildcard `*.<suffix>` and the id is one more label
//! before that suffix (RFC 6125's rule: `*.builtins.workers` names `w-1.builtins.workers`, not
//! `builtins.workers` nor `a.b.builtins.workers`). A wildcard is how one certificate, shared by the pods
//! of a Deployment whose worker ids differ (`<pod>.<fleet>.workers`, as the Helm chart runs them), names
//! those workers and no others; a per-pod certificate names exactly one.

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

/// Names from a peer (its certificate, its claimed id) are cut to this many characters in errors and
/// logs: a peer chooses them, and a 2 KiB name must not be echoed whole.
const MAX_NAME_CHARS: usize = 64;
/// At most this many of a certificate's names are listed in an error.
const MAX_NAMES_SHOWN: usize = 3;

/// Why a peer's certificate does not establish the identity it claims.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The certificate is not X.509 DER the parser reads.
    #[error("the client certificate cannot be parsed")]
    Unparsable,
    /// The certificate names nobody: no DNS SAN and no common name.
    #[error(
        "the client certificate names no identity (no DNS subject alternative name, no common name)"
    )]
    Anonymous,
    /// The certificate names someone else.
    #[error("the client certificate's {source_kind} {names} does not match worker id {claimed:?}")]
    Mismatch {
        /// Where the names came from: `DNS SAN` or `CN`.
        source_kind: &'static str,
        /// The certificate's names, quoted, shortened and comma-separated.
        names: String,
        /// The claimed id, shortened.
        claimed: String,
    },
    /// The connection is TLS but carried no client certificate (the server requires one, so this is a
    /// misconfigured server rather than a peer's doing).
    #[error("the connection carried no client certificate")]
    NoCertificate,
}

/// Where a certificate's identity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameSource {
    /// Its DNS subject alternative names.
    DnsSan,
    /// Its subject common names (it has no DNS SAN).
    CommonName,
}

impl NameSource {
    fn label(self) -> &'static str {
        match self {
            Self::DnsSan => "DNS SAN",
            Self::CommonName => "CN",
        }
    }
}

/// The names a certificate proves (see the module docs for the rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    names: Vec<String>,
    source: NameSource,
}

impl PeerIdentity {
    /// The identity of a DER certificate.
    ///
    /// # Errors
    /// [`IdentityError::Unparsable`] or [`IdentityError::Anonymous`].
    pub fn from_der(der: &[u8]) -> Result<Self, IdentityError> {
        let (_, cert) =
            x509_parser::parse_x509_certificate(der).map_err(|_| IdentityError::Unparsable)?;
        let sans: Vec<String> = match cert.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                    _ => None,
                })
                .collect(),
            Ok(None) => Vec::new(),
            Err(_) => return Err(IdentityError::Unparsable),
        };
        if !sans.is_empty() {
            return Ok(Self {
                names: sans,
                source: NameSource::DnsSan,
            });
        }
        let cns: Vec<String> = cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
            .collect();
        if cns.is_empty() {
            return Err(IdentityError::Anonymous);
        }
        Ok(Self {
            names: cns,
            source: NameSource::CommonName,
        })
    }

    /// The identity of the first (end-entity) certificate of a chain as a TLS server received it.
    ///
    /// # Errors
    /// [`IdentityError::NoCertificate`] for an empty chain; else as [`PeerIdentity::from_der`].
    pub fn from_chain(chain: &[CertificateDer<'_>]) -> Result<Self, IdentityError> {
        let leaf = chain.first().ok_or(IdentityError::NoCertificate)?;
        Self::from_der(leaf)
    }

    /// The names: DNS SANs, or common names when there is no DNS SAN.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Where the names came from.
    pub fn source(&self) -> NameSource {
        self.source
    }

    /// Whether this identity is `worker_id` (equal to one of the names, ASCII case-insensitively).
    ///
    /// # Errors
    /// [`IdentityError::Mismatch`], naming (shortened) what the certificate holds and what was claimed.
    pub fn check(&self, worker_id: &str) -> Result<(), IdentityError> {
        if self.names.iter().any(|name| names_worker(name, worker_id)) {
            return Ok(());
        }
        let mut names: Vec<String> = self
            .names
            .iter()
            .take(MAX_NAMES_SHOWN)
            .map(|n| format!("{:?}", shorten(n)))
            .collect();
        if self.names.len() > MAX_NAMES_SHOWN {
            names.push(format!("and {} more", self.names.len() - MAX_NAMES_SHOWN));
        }
        Err(IdentityError::Mismatch {
            source_kind: self.source.label(),
            names: names.join(", "),
            claimed: shorten(worker_id),
        })
    }
}

/// Checks that the client certificates of a connection (as tonic's `Request::peer_certs` gives them)
/// prove `worker_id`. A connection without TLS (`None`: the server runs `--insecure-plaintext`) proves
/// nothing and is let through: plaintext fleets have no identities to check.
///
/// # Errors
/// See [`IdentityError`].
pub fn check_worker_identity(
    peer_certs: Option<&[CertificateDer<'_>]>,
    worker_id: &str,
) -> Result<(), IdentityError> {
    match peer_certs {
        None => Ok(()),
        Some(chain) => PeerIdentity::from_chain(chain)?.check(worker_id),
    }
}

/// Whether certificate name `name` names `worker_id`: equal ignoring ASCII case, or a wildcard
/// `*.<suffix>` and the id one label before the suffix.
fn names_worker(name: &str, worker_id: &str) -> bool {
    if name.eq_ignore_ascii_case(worker_id) {
        return true;
    }
    let Some(suffix) = name.strip_prefix("*.") else {
        return false;
    };
    match worker_id.split_once('.') {
        Some((label, rest)) => {
            !label.is_empty() && !suffix.is_empty() && rest.eq_ignore_ascii_case(suffix)
        }
        None => false,
    }
}

/// `name` cut to [`MAX_NAME_CHARS`] characters, with `…` when cut.
fn shorten(name: &str) -> String {
    match name.char_indices().nth(MAX_NAME_CHARS) {
        Some((at, _)) => format!("{}…", &name[..at]),
        None => name.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    use super::*;

    fn cert(cn: Option<&str>, sans: &[SanType]) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params.subject_alt_names = sans.to_vec();
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn dns(name: &str) -> SanType {
        SanType::DnsName(name.try_into().unwrap())
    }

    #[test]
    fn a_dns_san_equal_to_the_worker_id_matches_whatever_the_cn_says() {
        let id = PeerIdentity::from_der(&cert(Some("someone-else"), &[dns("worker-0")])).unwrap();
        assert_eq!(id.source(), NameSource::DnsSan);
        id.check("worker-0").unwrap();
        let err = id.check("someone-else").unwrap_err();
        assert!(matches!(err, IdentityError::Mismatch { .. }), "{err}");
    }

    #[test]
    fn the_cn_counts_only_when_there_is_no_dns_san() {
        let id = PeerIdentity::from_der(&cert(Some("worker-1"), &[])).unwrap();
        assert_eq!(id.source(), NameSource::CommonName);
        id.check("worker-1").unwrap();
        let ip_only = cert(
            Some("worker-2"),
            &[SanType::IpAddress("10.0.0.1".parse().unwrap())],
        );
        PeerIdentity::from_der(&ip_only)
            .unwrap()
            .check("worker-2")
            .unwrap();
    }

    #[test]
    fn any_of_several_dns_sans_matches_and_case_does_not_matter() {
        let id = PeerIdentity::from_der(&cert(None, &[dns("a"), dns("Worker-B")])).unwrap();
        id.check("a").unwrap();
        id.check("worker-b").unwrap();
    }

    #[test]
    fn a_wildcard_san_names_exactly_one_more_label_before_its_suffix() {
        let id = PeerIdentity::from_der(&cert(None, &[dns("*.builtins.workers")])).unwrap();
        id.check("w-1.builtins.workers").unwrap();
        id.check("W-2.Builtins.Workers").unwrap();
        assert!(id.check("builtins.workers").is_err(), "no label");
        assert!(id.check("a.b.builtins.workers").is_err(), "two labels");
        assert!(id.check("w-1.other.workers").is_err(), "another suffix");
        assert!(id.check("w-1").is_err(), "no suffix");
        assert!(!names_worker("*.", "a."), "an empty suffix names nothing");
        assert!(!names_worker("*", "anything"), "a bare * names nothing");
    }

    #[test]
    fn a_certificate_without_san_or_cn_is_anonymous() {
        assert_eq!(
            PeerIdentity::from_der(&cert(None, &[])),
            Err(IdentityError::Anonymous)
        );
    }

    #[test]
    fn garbage_is_unparsable_and_an_empty_chain_has_no_certificate() {
        assert_eq!(
            PeerIdentity::from_der(b"not a certificate"),
            Err(IdentityError::Unparsable)
        );
        assert_eq!(
            check_worker_identity(Some(&[]), "w"),
            Err(IdentityError::NoCertificate)
        );
    }

    #[test]
    fn a_plaintext_connection_proves_nothing_and_is_let_through() {
        check_worker_identity(None, "anyone").unwrap();
    }

    #[test]
    fn a_mismatch_names_both_sides_without_echoing_long_input() {
        let long = "x".repeat(300);
        let der = cert(None, &[dns("w-1"), dns("w-2"), dns("w-3"), dns("w-4")]);
        let chain = [CertificateDer::from(der)];
        let err = check_worker_identity(Some(&chain), &long).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("DNS SAN"), "{message}");
        assert!(message.contains("\"w-1\""), "{message}");
        assert!(message.contains("and 1 more"), "{message}");
        assert!(!message.contains("w-4"), "{message}");
        assert!(message.len() < 200, "{message}");
    }
}
