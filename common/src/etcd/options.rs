//! How a process reaches etcd: the `--etcd-*` flags every role shares (named like kube-apiserver's),
//! read and checked once at start-up into an [`EtcdClientConfig`], which connects.
//!
//! TLS is rustls on ring (etcd-client's `tls` feature, through tonic), the stack the Kubernetes
//! client already uses, so the tree holds one TLS implementation and no OpenSSL.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};

use crate::keys::FleetKeys;

/// The default `--etcd-prefix`: where Flotilla's keys have always lived, so an upgrade keeps its keys.
pub const DEFAULT_ETCD_PREFIX: &str = "/flotilla";

/// How long the start-up probe waits for etcd's first answer. Longer than one request timeout, so a
/// loaded etcd is not mistaken for a misconfigured one.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often an idle connection to etcd is pinged (HTTP/2 keep-alive). etcd refuses pings more often
/// than its `--grpc-keepalive-min-time` (5 s by default): it counts them as abuse and closes the
/// connection, cutting every call on it — a campaign waiting its turn, a watch without events.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// The longest one etcd request may take before the client gives up on it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of the `--etcd-*` flags, found before anything connects.
#[derive(Debug, thiserror::Error)]
pub enum EtcdOptionsError {
    /// No endpoint was given.
    #[error("--etcd-endpoints is required")]
    NoEndpoints,
    /// A file named by a flag cannot be read.
    #[error("--etcd-{flag} {}: cannot read it", path.display())]
    Read {
        /// The flag without `--etcd-` (`cafile`, `certfile`, `keyfile`, `password-file`).
        flag: &'static str,
        /// The path it names.
        path: PathBuf,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
    /// Only one of `--etcd-certfile` and `--etcd-keyfile` was given.
    #[error("--etcd-certfile and --etcd-keyfile go together: {given} was given without {missing}")]
    HalfIdentity {
        /// The flag that was given.
        given: &'static str,
        /// The flag that is missing.
        missing: &'static str,
    },
    /// `--etcd-username` and `--etcd-password-file` were not given together.
    #[error(
        "--etcd-username and --etcd-password-file go together (the password is read from a file, never \
         a flag; a client certificate alone authenticates as the user its CN names): {given} was given \
         without {missing}"
    )]
    HalfUser {
        /// The flag that was given.
        given: &'static str,
        /// The flag that is missing.
        missing: &'static str,
    },
    /// The password file holds nothing but a line break.
    #[error("--etcd-password-file {}: the file is empty", path.display())]
    EmptyPassword {
        /// The file.
        path: PathBuf,
    },
    /// `--etcd-prefix` is not a usable key prefix.
    #[error("--etcd-prefix {prefix:?} {reason}")]
    Prefix {
        /// The value given.
        prefix: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An endpoint does not fit the other flags.
    #[error("--etcd-endpoints {endpoint:?}: {reason}")]
    Endpoint {
        /// The endpoint.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The certificates or key do not make a TLS client configuration (unparsable PEM, a key that is
    /// not a private key …).
    #[error(
        "--etcd-cafile / --etcd-certfile / --etcd-keyfile do not make a TLS configuration: {0}"
    )]
    Tls(String),
}

/// Errors of connecting to etcd with an [`EtcdClientConfig`], each saying which flag to look at.
#[derive(Debug, thiserror::Error)]
pub enum EtcdConnectError {
    /// The configuration was refused before connecting.
    #[error(transparent)]
    Options(#[from] EtcdOptionsError),
    /// etcd refused the user name or password.
    #[error(
        "etcd at {endpoints} refused user {user:?}: wrong --etcd-username or --etcd-password-file ({message})"
    )]
    Authentication {
        /// The endpoints.
        endpoints: String,
        /// The user.
        user: String,
        /// etcd's message.
        message: String,
    },
    /// etcd authenticated the client but its role may not read Flotilla's keys.
    #[error(
        "etcd at {endpoints} denied {who} access to {range}: grant its role readwrite on that prefix \
         (README: \"The etcd role Flotilla needs\") ({message})"
    )]
    PermissionDenied {
        /// The endpoints.
        endpoints: String,
        /// The user, or "an anonymous client".
        who: String,
        /// The key range that was read.
        range: String,
        /// etcd's message.
        message: String,
    },
    /// The TLS handshake or the connection failed, or etcd did not answer in time.
    #[error("cannot reach etcd at {endpoints}{hint}: {cause}")]
    Unreachable {
        /// The endpoints.
        endpoints: String,
        /// A hint at the flags that may be wrong, or empty.
        hint: &'static str,
        /// The whole chain of causes (a TLS alert is deep inside it).
        cause: String,
    },
}

/// The `--etcd-*` flags, flattened into every command that talks to etcd.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct EtcdFlags {
    /// etcd endpoints, comma-separated (`http://host:2379`, or `https://host:2379` with --etcd-cafile).
    #[arg(long = "etcd-endpoints", value_delimiter = ',', required = true)]
    pub endpoints: Vec<String>,
    /// CA bundle (PEM) that verifies etcd's serving certificate; required for https endpoints.
    #[arg(long = "etcd-cafile")]
    pub cafile: Option<PathBuf>,
    /// Client certificate (PEM) presented to etcd, for etcd's `--client-cert-auth`; with --etcd-keyfile.
    #[arg(long = "etcd-certfile")]
    pub certfile: Option<PathBuf>,
    /// Private key (PEM) of --etcd-certfile.
    #[arg(long = "etcd-keyfile")]
    pub keyfile: Option<PathBuf>,
    /// etcd user to authenticate as (etcd auth); with --etcd-password-file.
    #[arg(long = "etcd-username")]
    pub username: Option<String>,
    /// File holding the etcd user's password (one trailing line break is ignored); never a flag, so
    /// it shows in no process listing.
    #[arg(long = "etcd-password-file")]
    pub password_file: Option<PathBuf>,
    /// Key prefix of every key Flotilla writes: a fleet's keys are `<prefix>/<fleet>/…`.
    #[arg(long = "etcd-prefix", default_value = DEFAULT_ETCD_PREFIX)]
    pub prefix: String,
}

impl EtcdFlags {
    /// Flags for `endpoints` with every other flag at its default: plaintext, anonymous, `/flotilla`.
    pub fn plaintext(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            cafile: None,
            certfile: None,
            keyfile: None,
            username: None,
            password_file: None,
            prefix: DEFAULT_ETCD_PREFIX.to_owned(),
        }
    }

    /// Reads the files the flags name and checks the result as [`EtcdClientConfig::validate`] does —
    /// what `--check-config` and start-up do before connecting anywhere.
    ///
    /// # Errors
    /// The first flag that is missing its partner, names an unreadable file, or does not fit the
    /// endpoints; see [`EtcdOptionsError`].
    pub fn client_config(&self) -> Result<EtcdClientConfig, EtcdOptionsError> {
        let read = |flag: &'static str, path: &Path| {
            std::fs::read(path).map_err(|source| EtcdOptionsError::Read {
                flag,
                path: path.to_path_buf(),
                source,
            })
        };
        let identity = match (&self.certfile, &self.keyfile) {
            (Some(cert), Some(key)) => Some((read("certfile", cert)?, read("keyfile", key)?)),
            (Some(_), None) => {
                return Err(EtcdOptionsError::HalfIdentity {
                    given: "--etcd-certfile",
                    missing: "--etcd-keyfile",
                });
            }
            (None, Some(_)) => {
                return Err(EtcdOptionsError::HalfIdentity {
                    given: "--etcd-keyfile",
                    missing: "--etcd-certfile",
                });
            }
            (None, None) => None,
        };
        let ca = self
            .cafile
            .as_deref()
            .map(|path| read("cafile", path))
            .transpose()?;
        let user = match (&self.username, &self.password_file) {
            (Some(user), Some(path)) => {
                let bytes = read("password-file", path)?;
                let text = String::from_utf8(bytes).map_err(|err| EtcdOptionsError::Read {
                    flag: "password-file",
                    path: path.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, err),
                })?;
                let password = strip_line_break(&text);
                if password.is_empty() {
                    return Err(EtcdOptionsError::EmptyPassword { path: path.clone() });
                }
                Some((user.clone(), password.to_owned()))
            }
            (Some(_), None) => {
                return Err(EtcdOptionsError::HalfUser {
                    given: "--etcd-username",
                    missing: "--etcd-password-file",
                });
            }
            (None, Some(_)) => {
                return Err(EtcdOptionsError::HalfUser {
                    given: "--etcd-password-file",
                    missing: "--etcd-username",
                });
            }
            (None, None) => None,
        };
        let tls = (ca.is_some() || identity.is_some()).then_some(EtcdTls { ca, identity });
        let config = EtcdClientConfig {
            endpoints: self.endpoints.clone(),
            tls,
            user,
            prefix: self.prefix.clone(),
        };
        config.validate()?;
        Ok(config)
    }
}

/// A password file's content without the line break an editor or `echo` leaves at its end.
fn strip_line_break(text: &str) -> &str {
    let text = text.strip_suffix('\n').unwrap_or(text);
    text.strip_suffix('\r').unwrap_or(text)
}

/// The PEM contents of the TLS flags.
#[derive(Clone, PartialEq, Eq)]
struct EtcdTls {
    ca: Option<Vec<u8>>,
    /// Certificate and key.
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl EtcdTls {
    /// Each file holds the PEM block it must: rustls skips what is not PEM, so a CA file holding
    /// anything else would otherwise pass as trusting nothing, and fail only at the handshake.
    fn check_pem(&self) -> Result<(), EtcdOptionsError> {
        let holds = |pem: &[u8], label: &str| {
            String::from_utf8_lossy(pem).contains(&format!("-----BEGIN {label}-----"))
        };
        if let Some(ca) = &self.ca
            && !holds(ca, "CERTIFICATE")
        {
            return Err(EtcdOptionsError::Tls(
                "--etcd-cafile holds no PEM certificate".into(),
            ));
        }
        if let Some((cert, key)) = &self.identity {
            if !holds(cert, "CERTIFICATE") {
                return Err(EtcdOptionsError::Tls(
                    "--etcd-certfile holds no PEM certificate".into(),
                ));
            }
            let text = String::from_utf8_lossy(key);
            if !(text.contains("-----BEGIN ") && text.contains("PRIVATE KEY-----")) {
                return Err(EtcdOptionsError::Tls(
                    "--etcd-keyfile holds no PEM private key".into(),
                ));
            }
        }
        Ok(())
    }
}

/// How to reach etcd, with the files already read: endpoints, TLS, user and key prefix. Plain data;
/// [`validate`](Self::validate) checks it without touching the network.
///
/// Certificates and the password are read once, at start-up: rotating them means restarting the
/// process (etcd-client offers no way to swap them under a live connection).
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdClientConfig {
    /// The client URLs.
    pub endpoints: Vec<String>,
    tls: Option<EtcdTls>,
    /// User name and password.
    user: Option<(String, String)>,
    prefix: String,
}

impl std::fmt::Debug for EtcdClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password, nor the key.
        f.debug_struct("EtcdClientConfig")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls.is_some())
            .field(
                "client_certificate",
                &self.tls.as_ref().is_some_and(|t| t.identity.is_some()),
            )
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl EtcdClientConfig {
    /// Plaintext, anonymous, under [`DEFAULT_ETCD_PREFIX`]: etcd as tests and the demo run it.
    pub fn plaintext(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            tls: None,
            user: None,
            prefix: DEFAULT_ETCD_PREFIX.to_owned(),
        }
    }

    /// The same configuration with key prefix `prefix` (checked by [`validate`](Self::validate)).
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    /// The key prefix, without a trailing `/` (`/flotilla`).
    pub fn prefix(&self) -> &str {
        self.prefix.trim_end_matches('/')
    }

    /// The keys of fleet `fleet` under this prefix.
    pub fn fleet_keys(&self, fleet: &str) -> FleetKeys {
        FleetKeys::with_prefix(self.prefix(), fleet)
    }

    /// The user this configuration authenticates as, if any.
    pub fn username(&self) -> Option<&str> {
        self.user.as_ref().map(|(user, _)| user.as_str())
    }

    /// Checks the configuration without touching the network: a prefix etcd keys can carry, at least
    /// one endpoint, `https://` endpoints exactly when TLS is configured (and then a CA to verify them
    /// with), and certificates and key that make a TLS client configuration.
    ///
    /// # Errors
    /// The first problem, naming its flag.
    pub fn validate(&self) -> Result<(), EtcdOptionsError> {
        validate_prefix(&self.prefix)?;
        if self.endpoints.is_empty() {
            return Err(EtcdOptionsError::NoEndpoints);
        }
        let tls = self.tls_options();
        for endpoint in &self.endpoints {
            let bad = |reason: &str| EtcdOptionsError::Endpoint {
                endpoint: endpoint.clone(),
                reason: reason.to_owned(),
            };
            if endpoint.starts_with("http://") {
                if self.tls.is_some() {
                    return Err(bad(
                        "TLS flags (--etcd-cafile, --etcd-certfile) need https:// endpoints",
                    ));
                }
            } else if endpoint.starts_with("https://") {
                if self.tls.as_ref().is_none_or(|t| t.ca.is_none()) {
                    return Err(bad(
                        "an https:// endpoint needs --etcd-cafile, the CA that signed etcd's serving certificate",
                    ));
                }
            } else {
                return Err(bad("must start with http:// or https://"));
            }
            let parsed = tonic::transport::Endpoint::from_shared(endpoint.clone())
                .map_err(|err| bad(&err.to_string()))?;
            if let Some(files) = &self.tls {
                files.check_pem()?;
            }
            if let Some(tls) = &tls {
                // Builds the rustls client configuration as connecting will: parses the CA, the
                // certificate and the key, without dialling.
                parsed
                    .tls_config(tls.clone())
                    .map_err(|err| EtcdOptionsError::Tls(error_chain(&err)))?;
            }
        }
        Ok(())
    }

    fn tls_options(&self) -> Option<TlsOptions> {
        let tls = self.tls.as_ref()?;
        let mut options = TlsOptions::new();
        if let Some(ca) = &tls.ca {
            options = options.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &tls.identity {
            options = options.identity(Identity::from_pem(cert, key));
        }
        Some(options)
    }

    /// etcd-client's options: timeouts and keep-alive as Flotilla always used them, TLS, and the user
    /// (whose token is refreshed when etcd expires it, as a long-lived process needs).
    pub fn connect_options(&self) -> ConnectOptions {
        self.options(Some(REQUEST_TIMEOUT))
    }

    fn options(&self, request_timeout: Option<Duration>) -> ConnectOptions {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_keep_alive(KEEP_ALIVE_INTERVAL, Duration::from_secs(5));
        if let Some(timeout) = request_timeout {
            options = options.with_timeout(timeout);
        }
        if let Some(tls) = self.tls_options() {
            options = options.with_tls(tls);
        }
        if let Some((user, password)) = &self.user {
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        options
    }

    /// A client for the one call that waits on purpose, an election campaign (it returns when this
    /// process leads, after any time): as [`EtcdClientConfig::connect`]'s, but without the
    /// [`REQUEST_TIMEOUT`], which would cut a waiting campaign off, and with it the candidate's place
    /// in line (etcd deletes the key of a cancelled campaign). A lost etcd still ends a campaign: the
    /// session's keep-alive notices it. Dials lazily, as `connect` does before its probe.
    ///
    /// # Errors
    /// [`EtcdConnectError`] for bad options, or a user etcd refuses.
    pub async fn connect_for_campaigns(&self) -> Result<Client, EtcdConnectError> {
        self.validate()?;
        let range = format!("{}/", self.prefix());
        Client::connect(&self.endpoints, Some(self.options(None)))
            .await
            .map_err(|err| self.classify(&err, &range))
    }

    /// Connects without checking that etcd answers (the client dials lazily), except that with a
    /// user etcd-client authenticates at once.
    async fn connect_lazily(&self) -> Result<Client, EtcdConnectError> {
        self.validate()?;
        let range = format!("{}/", self.prefix());
        Client::connect(&self.endpoints, Some(self.connect_options()))
            .await
            .map_err(|err| self.classify(&err, &range))
    }

    /// Connects and reads one key of fleet `fleet` (the range `<prefix>/<fleet>/`, all a role granted
    /// to that one fleet covers), so that a wrong certificate, password or role fails here, with an
    /// error naming the flag to fix, rather than as retries in a log. An etcd that does not answer
    /// fails it too: a process starts only once its etcd serves it, and its supervisor restarts it
    /// meanwhile (as kube-apiserver does); later outages are ridden out.
    ///
    /// # Errors
    /// See [`EtcdConnectError`]; etcd not answering within 10 s is [`EtcdConnectError::Unreachable`].
    pub async fn connect(&self, fleet: &str) -> Result<Client, EtcdConnectError> {
        let mut client = self.connect_lazily().await?;
        let range = self.fleet_keys(fleet).root().to_owned();
        let probe = client.get(
            range.as_str(),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_keys_only()
                    .with_limit(1),
            ),
        );
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(_)) => Ok(client),
            Ok(Err(err)) => Err(self.classify(&err, &range)),
            Err(_) => Err(EtcdConnectError::Unreachable {
                endpoints: self.endpoints.join(","),
                hint: "",
                cause: format!("no answer within {PROBE_TIMEOUT:?}"),
            }),
        }
    }

    /// Turns etcd-client's error, met reading `range`, into one that says which flag to look at.
    fn classify(&self, err: &etcd_client::Error, range: &str) -> EtcdConnectError {
        let endpoints = self.endpoints.join(",");
        if let etcd_client::Error::GRpcStatus(status) = err {
            let message = status.message().to_owned();
            if message.contains("authentication failed") {
                return EtcdConnectError::Authentication {
                    endpoints,
                    user: self.username().unwrap_or_default().to_owned(),
                    message,
                };
            }
            if message.contains("permission denied") || message.contains("user name is empty") {
                return EtcdConnectError::PermissionDenied {
                    endpoints,
                    who: self.username().map_or_else(
                        || "an anonymous client".to_owned(),
                        |u| format!("user {u:?}"),
                    ),
                    range: range.to_owned(),
                    message,
                };
            }
        }
        let cause = error_chain(err);
        let lower = cause.to_ascii_lowercase();
        let without_certificate = self.tls.as_ref().is_some_and(|t| t.identity.is_none());
        let hint = if lower.contains("certificate") || lower.contains("alert") {
            " (TLS: check --etcd-cafile, --etcd-certfile and --etcd-keyfile against etcd's \
             --trusted-ca-file and --client-cert-auth)"
        } else if without_certificate {
            // TLS 1.3 completes the client's side of the handshake before the server checks for
            // a client certificate, so a refused one often shows only as a closed connection.
            " (no --etcd-certfile / --etcd-keyfile: an etcd with --client-cert-auth closes the \
             connections of clients without a certificate)"
        } else {
            ""
        };
        EtcdConnectError::Unreachable {
            endpoints,
            hint,
            cause,
        }
    }
}

/// `--etcd-prefix` must start with `/` and be a plain path: no empty segment, no whitespace or
/// control characters, and not `/` alone (keys right under the root would mingle with anyone's).
fn validate_prefix(prefix: &str) -> Result<(), EtcdOptionsError> {
    let bad = |reason| EtcdOptionsError::Prefix {
        prefix: prefix.to_owned(),
        reason,
    };
    if !prefix.starts_with('/') {
        return Err(bad("must start with '/'"));
    }
    let trimmed = prefix.trim_end_matches('/');
    if trimmed.is_empty() {
        return Err(bad("must name a directory below '/' (e.g. /flotilla)"));
    }
    if trimmed[1..].split('/').any(str::is_empty) {
        return Err(bad("must not contain an empty segment ('//')"));
    }
    if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("must not contain whitespace or control characters"));
    }
    Ok(())
}

/// An error and its sources, `: `-separated (tonic's and rustls's useful words are in the sources).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        let line = next.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = next.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn flags(extra: &[&str]) -> Result<EtcdFlags, clap::Error> {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            etcd: EtcdFlags,
        }
        let mut argv = vec!["x"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|cli| cli.etcd)
    }

    fn write(dir: &Path, name: &str, text: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    #[test]
    fn the_defaults_are_plaintext_anonymous_and_under_slash_flotilla() {
        let config = flags(&["--etcd-endpoints", "http://a:2379,http://b:2379"])
            .unwrap()
            .client_config()
            .unwrap();
        assert_eq!(
            config,
            EtcdClientConfig::plaintext(vec!["http://a:2379".into(), "http://b:2379".into()])
        );
        assert_eq!(config.prefix(), "/flotilla");
        assert_eq!(config.fleet_keys("f").election(), "/flotilla/f/leader");
    }

    #[test]
    fn a_certificate_without_its_key_is_refused_naming_both_flags() {
        let dir = tempfile::tempdir().unwrap();
        let cert = write(dir.path(), "c.crt", "x");
        let err = flags(&[
            "--etcd-endpoints",
            "https://a:2379",
            "--etcd-certfile",
            &cert,
        ])
        .unwrap()
        .client_config()
        .unwrap_err();
        assert!(
            matches!(err, EtcdOptionsError::HalfIdentity { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("--etcd-keyfile"), "{err}");
    }

    #[test]
    fn an_unreadable_password_file_is_refused_naming_the_flag_and_path() {
        let err = flags(&[
            "--etcd-endpoints",
            "http://a:2379",
            "--etcd-username",
            "flotilla",
            "--etcd-password-file",
            "/nonexistent/password",
        ])
        .unwrap()
        .client_config()
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("--etcd-password-file") && text.contains("/nonexistent/password"),
            "{text}"
        );
    }

    #[test]
    fn a_username_needs_a_password_file_and_the_other_way_round() {
        let err = flags(&["--etcd-endpoints", "http://a:2379", "--etcd-username", "u"])
            .unwrap()
            .client_config()
            .unwrap_err();
        assert!(err.to_string().contains("--etcd-password-file"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let password = write(dir.path(), "p", "secret\n");
        let err = flags(&[
            "--etcd-endpoints",
            "http://a:2379",
            "--etcd-password-file",
            &password,
        ])
        .unwrap()
        .client_config()
        .unwrap_err();
        assert!(err.to_string().contains("--etcd-username"), "{err}");
    }

    #[test]
    fn the_password_loses_one_trailing_line_break_and_never_shows_in_debug() {
        let dir = tempfile::tempdir().unwrap();
        let password = write(dir.path(), "p", "s3cret pass\r\n");
        let config = flags(&[
            "--etcd-endpoints",
            "http://a:2379",
            "--etcd-username",
            "flotilla",
            "--etcd-password-file",
            &password,
        ])
        .unwrap()
        .client_config()
        .unwrap();
        assert_eq!(
            config.user,
            Some(("flotilla".to_owned(), "s3cret pass".to_owned()))
        );
        assert!(!format!("{config:?}").contains("s3cret"));
        let empty = write(dir.path(), "empty", "\n");
        let err = flags(&[
            "--etcd-endpoints",
            "http://a:2379",
            "--etcd-username",
            "flotilla",
            "--etcd-password-file",
            &empty,
        ])
        .unwrap()
        .client_config()
        .unwrap_err();
        assert!(
            matches!(err, EtcdOptionsError::EmptyPassword { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_prefix_must_start_with_a_slash_and_have_no_empty_segment() {
        for (prefix, ok) in [
            ("/flotilla", true),
            ("/flotilla/", true),
            ("/tenants/a", true),
            ("flotilla", false),
            ("/", false),
            ("/a//b", false),
            ("/a b", false),
            ("", false),
        ] {
            let result = EtcdClientConfig::plaintext(vec!["http://a:2379".into()])
                .with_prefix(prefix)
                .validate();
            assert_eq!(result.is_ok(), ok, "{prefix:?}: {result:?}");
            if let Err(err) = result {
                assert!(err.to_string().contains("--etcd-prefix"), "{err}");
            }
        }
        let keys = EtcdClientConfig::plaintext(vec![])
            .with_prefix("/tenants/a/")
            .fleet_keys("f");
        assert_eq!(keys.election(), "/tenants/a/f/leader");
    }

    #[test]
    fn tls_flags_need_https_endpoints_and_https_needs_a_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = write(dir.path(), "ca.crt", "not pem");
        let err = flags(&["--etcd-endpoints", "http://a:2379", "--etcd-cafile", &ca])
            .unwrap()
            .client_config()
            .unwrap_err();
        assert!(err.to_string().contains("https://"), "{err}");
        let err = flags(&["--etcd-endpoints", "https://a:2379"])
            .unwrap()
            .client_config()
            .unwrap_err();
        assert!(err.to_string().contains("--etcd-cafile"), "{err}");
        let err = flags(&["--etcd-endpoints", "a:2379"])
            .unwrap()
            .client_config()
            .unwrap_err();
        assert!(err.to_string().contains("http://"), "{err}");
    }

    #[test]
    fn a_ca_file_that_is_not_pem_is_refused_before_connecting() {
        let dir = tempfile::tempdir().unwrap();
        let ca = write(dir.path(), "ca.crt", "not pem");
        let err = flags(&["--etcd-endpoints", "https://a:2379", "--etcd-cafile", &ca])
            .unwrap()
            .client_config()
            .unwrap_err();
        assert!(matches!(err, EtcdOptionsError::Tls(_)), "{err}");
        assert!(err.to_string().contains("--etcd-cafile"), "{err}");
    }
}
