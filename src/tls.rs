//! TLS for `serve --tls-cert FILE --tls-key FILE`: rustls, with the certificate chain and key
//! read from PEM files and read again when either file changes, so a renewed certificate
//! (certbot, an ACME client, a secret mounted by an orchestrator) is served without a restart.
//!
//! A change that cannot be read — a half-written file, a key that does not match — keeps the
//! certificate in force and says so in the log, rather than take the server down.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How often the files are checked for changes.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// The certificate the server presents, and where it comes from.
pub(crate) struct TlsConfig {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<(TlsAcceptor, Stamp)>,
}

/// When each file was last changed, and its size: a change of either means a reload.
type Stamp = Option<((SystemTime, u64), (SystemTime, u64))>;

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let of = |p: &Path| {
        let meta = std::fs::metadata(p).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    };
    Some((of(cert)?, of(key)?))
}

/// The acceptor for the chain in `cert` and the key in `key`.
fn acceptor(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read the certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{} is not a PEM certificate chain", cert.display()))?;
    if chain.is_empty() {
        bail!("{} holds no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("cannot read a PEM private key from {}", key.display()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the certificate and the key do not go together")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Reads the certificate chain and key; refuses files that do not make a TLS server.
    pub(crate) fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<TlsConfig>> {
        let stamped = stamp(cert, key);
        let acceptor = acceptor(cert, key)?;
        Ok(Arc::new(TlsConfig {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new((acceptor, stamped)),
        }))
    }

    /// The acceptor for the certificate in force.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// Reads the files again if they changed. True when a new certificate is in force.
    fn reload(&self) -> bool {
        let now = stamp(&self.cert, &self.key);
        if now.is_none() || self.current.read().unwrap_or_else(|p| p.into_inner()).1 == now {
            return false;
        }
        match acceptor(&self.cert, &self.key) {
            Ok(acceptor) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = (acceptor, now);
                true
            }
            Err(e) => {
                // Not stamped: tried again on the next check, as the files may be mid-write.
                tracing::error!(error = %format!("{e:#}"), "the new certificate cannot be used; serving the one before");
                false
            }
        }
    }

    /// Checks the files every second and reloads them when they change. Runs until aborted.
    pub(crate) fn watch(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let tls = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RELOAD_CHECK);
            loop {
                tick.tick().await;
                let tls = tls.clone();
                if let Ok(true) = tokio::task::spawn_blocking(move || tls.reload()).await {
                    tracing::info!("the TLS certificate changed; new connections get the new one");
                }
            }
        })
    }
}
