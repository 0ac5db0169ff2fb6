//! How every connection to the storage database is opened, in one place: the ledger's
//! sessions (writer, readers, the listening session, the checkpoint leader's), the shared
//! documents, jobs and corpus, and the benchmark's all go through a [`Connector`].
//!
//! The storage URL is `postgres://USER@HOST:PORT/DB?…` as libpq reads it. Two of its
//! parameters are read here rather than by the driver, with libpq's meaning:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it, plain otherwise | not checked |
//! | `require` | always | not checked; with `sslrootcert`, checked as `verify-ca` |
//! | `verify-ca` | always | signed by a CA of `sslrootcert` |
//! | `verify-full` | always | signed by a CA of `sslrootcert`, and names the host |
//!
//! `sslrootcert=PATH` is a PEM file of CA certificates; `sslrootcert=system` takes Mozilla's
//! roots; without it, `verify-ca` and `verify-full` read `~/.postgresql/root.crt` as libpq
//! does, and refuse to connect when it is missing. TLS is rustls on the ring provider.
//!
//! A server whose machine is gone (powered off, cut off by the network) sends nothing, not
//! even a reset, so without more a statement waiting for its answer waits for the kernel's
//! retransmissions to give up, a quarter of an hour on Linux, and an idle session for two
//! hours of keepalive silence — long after a standby was promoted. Unless the URL sets them,
//! every connection therefore has libpq's `tcp_user_timeout` at 10 s (sent data that nothing
//! acknowledges for that long fails the connection; a slow server still acknowledges at once)
//! and keepalives after 5 s idle, every 2 s, 3 unanswered ones failing it: a vanished server is
//! noticed within about 10 s, and the session is then opened again, on whichever host of a
//! multi-host URL takes writes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How long sent data may go unacknowledged before the connection fails, unless the URL says.
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle time before the first keepalive probe, unless the URL says.
pub const KEEPALIVES_IDLE: Duration = Duration::from_secs(5);
/// Time between unanswered keepalive probes, unless the URL says.
pub const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(2);
/// Unanswered keepalive probes that fail the connection, unless the URL says.
pub const KEEPALIVES_RETRIES: u32 = 3;

/// How a connection uses TLS: libpq's `sslmode`. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, unverified.
    Prefer,
    /// TLS always, unverified (verified as [`SslMode::VerifyCa`] when a root is given).
    Require,
    /// TLS always, the certificate signed by a given CA.
    VerifyCa,
    /// TLS always, the certificate signed by a given CA and naming the host.
    VerifyFull,
}

impl SslMode {
    /// Reads an `sslmode` value.
    pub fn parse(value: &str) -> Result<SslMode, UrlError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => return Err(UrlError::SslMode(other.to_owned())),
        })
    }

    /// The value as the URL spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Why a storage URL cannot be used. Each says what to change in the URL.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// `sslmode` has a value libpq does not know.
    #[error(
        "sslmode={0} is not one of disable, prefer, require, verify-ca, verify-full (the storage URL)"
    )]
    SslMode(String),
    /// A mode that checks the certificate, and no CA to check it against.
    #[error(
        "sslmode={0} checks the server's certificate and needs the CA that signed it: add sslrootcert=PATH (a PEM file) to the storage URL, or put it in ~/.postgresql/root.crt"
    )]
    NoRootCert(&'static str),
    /// The CA file could not be read, or holds no certificate.
    #[error("sslrootcert={path}: {detail}")]
    RootCert {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        detail: String,
    },
    /// TLS could not be set up with these roots.
    #[error("TLS to the storage database: {0}")]
    Tls(String),
    /// The driver does not read the rest of the URL.
    #[error("the storage URL: {0}")]
    Url(String),
}

/// The connection a [`Connector`] opens, to be driven (spawned) by its caller.
pub type Connection =
    tokio_postgres::Connection<Socket, <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream>;

/// A storage URL read once, and the TLS it asks for: what every connection is opened with.
#[derive(Clone)]
pub struct Connector {
    config: Config,
    mode: SslMode,
    tls: MakeRustlsConnect,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("config", &self.config)
            .field("sslmode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// Reads a storage URL, its `sslmode` and `sslrootcert` included (the CA file is read now).
    pub fn parse(url: &str) -> Result<Connector, UrlError> {
        let parameters = Parameters::of(url);
        let (rest, [mode, root, user_timeout]) = take_parameters(&parameters)?;
        let mode = match mode {
            Some(value) => SslMode::parse(&value)?,
            None => SslMode::Prefer,
        };
        let mut config: Config = rest.parse().map_err(|e| UrlError::Url(format!("{e}")))?;
        // A server that vanished is noticed within seconds (see the module documentation).
        match user_timeout {
            None => {
                config.tcp_user_timeout(TCP_USER_TIMEOUT);
            }
            Some(value) => {
                let millis: u64 = value.parse().map_err(|_| {
                    UrlError::Url(format!(
                        "tcp_user_timeout is in milliseconds, a whole number, not {value:?}"
                    ))
                })?;
                // 0 leaves the system's default, as in libpq.
                if millis > 0 {
                    config.tcp_user_timeout(Duration::from_millis(millis));
                }
            }
        }
        if !parameters.names("keepalives_idle") {
            config.keepalives_idle(KEEPALIVES_IDLE);
        }
        if !parameters.names("keepalives_interval") {
            config.keepalives_interval(KEEPALIVES_INTERVAL);
        }
        if !parameters.names("keepalives_retries") {
            config.keepalives_retries(KEEPALIVES_RETRIES);
        }
        config.ssl_mode(match mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        let tls = client_config(mode, root.as_deref())?;
        Ok(Connector {
            config,
            mode,
            tls: MakeRustlsConnect::new(tls),
        })
    }

    /// The driver's settings, for what the caller sets on every session (application name,
    /// timeouts).
    pub fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    /// The driver's settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The TLS mode the URL asked for.
    pub fn ssl_mode(&self) -> SslMode {
        self.mode
    }

    /// Opens a connection; the caller drives the [`Connection`] (spawns it).
    pub async fn connect(&self) -> Result<(Client, Connection), tokio_postgres::Error> {
        self.config.connect(self.tls.clone()).await
    }
}

/// Whether a statement that failed on `client` met a session that is gone (closed, or cut by
/// the server: a failover, an administrator's `pg_terminate_backend`, a restart) rather than a
/// refusal from a live one. A live session answers a `SELECT 1`; a cut one may not have noticed
/// yet that its connection is closed, and fails it.
pub async fn is_lost(client: &Client) -> bool {
    client.is_closed() || client.simple_query("SELECT 1").await.is_err()
}

/// The driver's error with every cause under it: the driver's own text for a failed TLS
/// handshake ("error performing TLS handshake") leaves out why, which its source says (the
/// certificate's issuer unknown, a name it does not hold).
pub fn describe(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The parameters this crate reads itself rather than the driver: libpq's TLS settings, and
/// `tcp_user_timeout`, which libpq reads in milliseconds and the driver in seconds.
const TAKEN: [&str; 3] = ["sslmode", "sslrootcert", "tcp_user_timeout"];

/// A storage URL's parameters: the part before `?` and the `key=value` pairs after it, or the
/// words of a `key=value` string.
struct Parameters<'a> {
    /// The URL before its `?`; `None` for a `key=value` string.
    base: Option<&'a str>,
    words: Vec<&'a str>,
}

impl<'a> Parameters<'a> {
    fn of(url: &'a str) -> Parameters<'a> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Parameters {
                base: None,
                words: url.split_whitespace().collect(),
            };
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        Parameters {
            base: Some(base),
            words: query.split('&').filter(|p| !p.is_empty()).collect(),
        }
    }

    /// A word's key and its value as written; a URL's key may come without `=`.
    fn split(&self, word: &'a str) -> Option<(&'a str, &'a str)> {
        match self.base {
            Some(_) => Some(word.split_once('=').unwrap_or((word, ""))),
            None => word.split_once('='),
        }
    }

    /// Whether the parameter `key` is set.
    fn names(&self, key: &str) -> bool {
        self.words
            .iter()
            .any(|word| self.split(word).is_some_and(|(k, _)| k.trim() == key))
    }
}

/// Takes the [`TAKEN`] parameters out of the URL (or of a `key=value` string), leaving the rest
/// for the driver; their values in [`TAKEN`]'s order, percent-decoded in a URL.
fn take_parameters(parameters: &Parameters<'_>) -> Result<(String, [Option<String>; 3]), UrlError> {
    let mut values: [Option<String>; 3] = Default::default();
    let mut kept = Vec::new();
    for &word in &parameters.words {
        let taken = parameters
            .split(word)
            .and_then(|(key, value)| Some((TAKEN.iter().position(|t| *t == key)?, value)));
        match taken {
            Some((i, value)) => {
                values[i] = Some(match parameters.base {
                    Some(_) => percent_decode(value)?,
                    None => value.to_owned(),
                })
            }
            None => kept.push(word),
        }
    }
    let rest = match parameters.base {
        None => kept.join(" "),
        Some(base) if kept.is_empty() => base.to_owned(),
        Some(base) => format!("{base}?{}", kept.join("&")),
    };
    Ok((rest, values))
}

fn percent_decode(value: &str) -> Result<String, UrlError> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| UrlError::Url(format!("a bad %-escape in {value}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UrlError::Url(format!("{value} is not UTF-8")))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The CA certificates of a PEM file, or Mozilla's for `system`.
fn roots(root: &str) -> Result<RootCertStore, UrlError> {
    if root == "system" {
        return Ok(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        });
    }
    let path = Path::new(root);
    let bad = |detail: String| UrlError::RootCert {
        path: path.to_path_buf(),
        detail,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    let mut store = RootCertStore::empty();
    for cert in certs {
        store.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    Ok(store)
}

/// libpq's default root file, when it exists.
fn default_root() -> Option<String> {
    let home = std::env::var_os("HOME")?;
    let path = Path::new(&home).join(".postgresql/root.crt");
    path.is_file().then(|| path.to_string_lossy().into_owned())
}

/// The rustls settings for a mode: which verifier checks the server's certificate.
fn client_config(mode: SslMode, root: Option<&str>) -> Result<ClientConfig, UrlError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| UrlError::Tls(e.to_string()))?;
    let root = match (mode, root) {
        (_, Some(root)) => Some(root.to_owned()),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            Some(default_root().ok_or(UrlError::NoRootCert(mode.as_str()))?)
        }
        _ => None,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (mode, root) {
        (SslMode::VerifyFull, Some(root)) => webpki(&root, &provider)?,
        (SslMode::VerifyCa | SslMode::Require, Some(root)) => Arc::new(Lenient {
            chain: Some(webpki(&root, &provider)?),
            provider,
        }),
        _ => Arc::new(Lenient {
            provider,
            chain: None,
        }),
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

fn webpki(
    root: &str,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, UrlError> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots(root)?), Arc::clone(provider))
        .build()
        .map_err(|e| UrlError::Tls(e.to_string()))
}

/// `verify-ca` (and `require` given a root): the chain to the root is checked, the name in the
/// certificate is not. `prefer` and `require` without a root (`chain` none): the certificate is
/// not checked at all (libpq's meaning). Either way the handshake's signatures are.
#[derive(Debug)]
struct Lenient {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            // The name is checked only after the chain verified.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> (String, Option<String>, Option<String>) {
        let (rest, [mode, root, _]) = take_parameters(&Parameters::of(url)).expect("split");
        (rest, mode, root)
    }

    #[test]
    fn a_vanished_server_is_noticed_within_seconds_unless_the_url_says_otherwise() {
        for url in ["postgres://u@h:5/db", "host=h port=5 user=u dbname=db"] {
            let connector = Connector::parse(url).expect("parse");
            let config = connector.config();
            assert_eq!(
                config.get_tcp_user_timeout(),
                Some(&TCP_USER_TIMEOUT),
                "{url}"
            );
            assert!(config.get_keepalives(), "{url}");
            assert_eq!(config.get_keepalives_idle(), KEEPALIVES_IDLE, "{url}");
            assert_eq!(config.get_keepalives_interval(), Some(KEEPALIVES_INTERVAL));
            assert_eq!(config.get_keepalives_retries(), Some(KEEPALIVES_RETRIES));
        }
        for url in [
            "postgres://u@h:5/db?tcp_user_timeout=60000&keepalives_idle=30&keepalives_interval=9&keepalives_retries=7&target_session_attrs=read-write",
            "host=h user=u tcp_user_timeout=60000 keepalives_idle=30 keepalives_interval=9 keepalives_retries=7",
        ] {
            let connector = Connector::parse(url).expect("parse");
            let config = connector.config();
            assert_eq!(
                config.get_tcp_user_timeout(),
                Some(&Duration::from_secs(60)),
                "{url}"
            );
            assert_eq!(config.get_keepalives_idle(), Duration::from_secs(30));
            assert_eq!(
                config.get_keepalives_interval(),
                Some(Duration::from_secs(9))
            );
            assert_eq!(config.get_keepalives_retries(), Some(7));
        }
        // `tcp_user_timeout=0` leaves the system's default, as in libpq.
        let connector = Connector::parse("postgres://u@h/db?tcp_user_timeout=0").expect("parse");
        assert_eq!(connector.config().get_tcp_user_timeout(), None);
        // In milliseconds, as libpq reads it.
        let connector = Connector::parse("postgres://u@h/db?tcp_user_timeout=2500").expect("parse");
        assert_eq!(
            connector.config().get_tcp_user_timeout(),
            Some(&Duration::from_millis(2500))
        );
        assert!(matches!(
            Connector::parse("postgres://u@h/db?tcp_user_timeout=10s"),
            Err(UrlError::Url(e)) if e.contains("milliseconds")
        ));
    }

    #[test]
    fn the_tls_parameters_are_taken_out_of_the_url() {
        assert_eq!(
            split("postgres://u@h:5/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem"),
            (
                "postgres://u@h:5/db".into(),
                Some("verify-full".into()),
                Some("/tmp/ca.pem".into())
            )
        );
        assert_eq!(
            split("postgres://u@a:1,b:2/db?target_session_attrs=read-write&sslmode=require"),
            (
                "postgres://u@a:1,b:2/db?target_session_attrs=read-write".into(),
                Some("require".into()),
                None
            )
        );
        assert_eq!(
            split("host=h user=u sslmode=disable dbname=d"),
            (
                "host=h user=u dbname=d".into(),
                Some("disable".into()),
                None
            )
        );
        assert_eq!(
            split("postgres://u@h/db"),
            ("postgres://u@h/db".into(), None, None)
        );
    }

    #[test]
    fn prefer_is_the_default_and_every_libpq_mode_is_read() {
        let c = Connector::parse("postgres://u@h/db").expect("parsed");
        assert_eq!(c.ssl_mode(), SslMode::Prefer);
        assert_eq!(
            c.config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Prefer
        );
        for (mode, driver) in [
            ("disable", tokio_postgres::config::SslMode::Disable),
            ("prefer", tokio_postgres::config::SslMode::Prefer),
            ("require", tokio_postgres::config::SslMode::Require),
        ] {
            let c = Connector::parse(&format!("postgres://u@h/db?sslmode={mode}")).expect(mode);
            assert_eq!(c.ssl_mode().as_str(), mode);
            assert_eq!(c.config().get_ssl_mode(), driver);
        }
    }

    #[test]
    fn a_bad_mode_is_refused_with_the_modes_there_are() {
        let err = Connector::parse("postgres://u@h/db?sslmode=verify_full").unwrap_err();
        assert!(matches!(&err, UrlError::SslMode(m) if m == "verify_full"));
        assert!(
            err.to_string()
                .contains("disable, prefer, require, verify-ca, verify-full"),
            "{err}"
        );
    }

    #[test]
    fn a_verifying_mode_without_a_root_or_with_a_bad_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("pg-connect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        // No root given: refused, unless this machine's HOME has libpq's default root.
        let err = client_config(SslMode::VerifyFull, None);
        if default_root().is_none() {
            assert!(matches!(err, Err(UrlError::NoRootCert("verify-full"))));
        }
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        let err = Connector::parse(&format!(
            "postgres://u@h/db?sslmode=verify-ca&sslrootcert={}",
            empty.display()
        ))
        .unwrap_err();
        assert!(
            err.to_string().contains("holds no PEM certificate"),
            "{err}"
        );
        let missing = dir.join("missing.pem");
        let err = Connector::parse(&format!(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert={}",
            missing.display()
        ))
        .unwrap_err();
        assert!(matches!(err, UrlError::RootCert { .. }), "{err}");
        let ca = rcgen::CertificateParams::new(Vec::<String>::new())
            .and_then(|mut p| {
                p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
                let key = rcgen::KeyPair::generate()?;
                p.self_signed(&key)
            })
            .expect("a CA");
        let good = dir.join("ca.pem");
        std::fs::write(&good, ca.pem()).expect("write");
        let c = Connector::parse(&format!(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert={}",
            good.display()
        ))
        .expect("a CA file is read");
        assert_eq!(c.ssl_mode(), SslMode::VerifyFull);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
