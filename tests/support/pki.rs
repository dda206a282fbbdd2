//! A throwaway PKI for end-to-end tests: a CA, and leaf certificates for servers on loopback
//! (`127.0.0.1`, `::1`, `localhost`) and for clients named by an identity (a worker id, an etcd user),
//! written as PEM files for processes to load.
//!
//! Certificates are ECDSA P-256 (rcgen on ring, the crypto provider the workspace already has), valid
//! from 1975 to 4096 (rcgen's default), so a test never meets an expired certificate. Keys are PKCS#8
//! PEM, which rustls, etcd and Go's crypto/tls all read.
//!
//! ```ignore
//! let pki = Pki::new();
//! let server = pki.server("coordinator");          // files <dir>/coordinator.{crt,key}
//! let worker = pki.client("worker-0", "worker-0"); // DNS SAN and CN "worker-0"
//! // pki.ca_file() is what both sides trust.
//! ```

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

/// A certificate and its private key as PEM files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    /// The certificate (PEM, one `CERTIFICATE` block).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// A certificate and its private key as PEM text, not yet written anywhere.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM (PKCS#8).
    pub key_pem: String,
}

impl Leaf {
    /// Writes `<dir>/<stem>.crt` and `<dir>/<stem>.key` (replacing each by a rename, so a process
    /// reading them concurrently sees the old file or the new one, never half of one).
    pub fn write(&self, dir: &Path, stem: &str) -> CertFiles {
        let files = CertFiles {
            cert: dir.join(format!("{stem}.crt")),
            key: dir.join(format!("{stem}.key")),
        };
        self.write_to(&files);
        files
    }

    /// Replaces the files of `files` with this certificate and key (each by a rename): what a
    /// certificate rotation does.
    pub fn write_to(&self, files: &CertFiles) {
        write_atomically(&files.cert, &self.cert_pem);
        write_atomically(&files.key, &self.key_pem);
    }
}

/// A certificate authority: its key signs every leaf it issues.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl Ca {
    /// A new self-signed CA whose subject CN is `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("no SANs are valid");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("generate a CA key");
        let cert = params.self_signed(&key).expect("self-sign the CA");
        Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA's certificate, PEM: what a peer trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A leaf certificate with subject CN `common_name` (none when empty) and these SANs (an IP
    /// address when one parses, else a DNS name), usable for both server and client authentication.
    pub fn leaf(&self, common_name: &str, sans: &[&str]) -> Leaf {
        let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(sans).expect("valid SANs");
        if !common_name.is_empty() {
            params
                .distinguished_name
                .push(DnType::CommonName, common_name);
        }
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().expect("generate a leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign the leaf certificate");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A certificate for a server on loopback: SANs `127.0.0.1`, `::1` and `localhost`, CN `name`.
    pub fn server_leaf(&self, name: &str) -> Leaf {
        self.leaf(name, &["127.0.0.1", "::1", "localhost"])
    }

    /// A client certificate naming `identity` as its DNS SAN and its CN (a worker id, an etcd user).
    pub fn client_leaf(&self, identity: &str) -> Leaf {
        self.leaf(identity, &[identity])
    }

    /// A client certificate naming `identity` only as its CN, with no SAN at all.
    pub fn cn_only_leaf(&self, identity: &str) -> Leaf {
        self.leaf(identity, &[])
    }
}

/// A CA and the files of the certificates it issued, in a temp dir removed on drop.
pub struct Pki {
    /// The CA.
    pub ca: Ca,
    ca_file: PathBuf,
    dir: TempDir,
}

impl Pki {
    /// A new CA (CN `flotilla-test-ca`) with its certificate written to `<dir>/ca.crt`.
    pub fn new() -> Self {
        Self::named("flotilla-test-ca")
    }

    /// A new CA with subject CN `name` (a second `Pki` is an "unknown CA" to the first's peers).
    pub fn named(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("flotilla-pki-")
            .tempdir()
            .expect("create the PKI's temp dir");
        let ca = Ca::new(name);
        let ca_file = dir.path().join("ca.crt");
        write_atomically(&ca_file, ca.cert_pem());
        Self { ca, ca_file, dir }
    }

    /// The directory holding every file of this PKI.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate's file: what `--tls-client-ca`, `--etcd-cafile` and the like take.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// A server certificate for loopback (see [`Ca::server_leaf`]) written as `<dir>/<stem>.{crt,key}`.
    pub fn server(&self, stem: &str) -> CertFiles {
        self.ca.server_leaf(stem).write(self.dir(), stem)
    }

    /// A client certificate for `identity` (DNS SAN and CN) written as `<dir>/<stem>.{crt,key}`.
    pub fn client(&self, stem: &str, identity: &str) -> CertFiles {
        self.ca.client_leaf(identity).write(self.dir(), stem)
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes `text` to `path` through a temp file in the same directory and a rename.
pub fn write_atomically(path: &Path, text: &str) {
    let dir = path.parent().expect("a file path has a parent");
    let tmp = tempfile::NamedTempFile::new_in(dir).expect("create a temp file beside the target");
    std::fs::write(tmp.path(), text).expect("write the temp file");
    tmp.persist(path)
        .unwrap_or_else(|e| panic!("rename onto {}: {e}", path.display()));
}
