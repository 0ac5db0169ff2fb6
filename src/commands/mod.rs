//! One module per command. Each maps the library's typed errors to messages exactly once.

pub(crate) mod audit;
pub(crate) mod bench;
pub(crate) mod checkpoint;
pub(crate) mod contracts;
pub(crate) mod demo;
pub(crate) mod ingest;
pub(crate) mod key;
pub(crate) mod mcp;
pub(crate) mod migrate;
pub(crate) mod prove;
pub(crate) mod repair;
pub(crate) mod serve;
pub(crate) mod token;
pub(crate) mod verify;
pub(crate) mod witness;

use std::path::Path;

use anyhow::Context;
use ledger::{Ledger, LedgerOptions};

/// Makes the data directory private to its owner (mode 0700), creating it so if it is not
/// there: it holds the tokens' hashes, the signing key, every evidence text and the corpus,
/// which are nobody else's to read, whatever the umask.
pub(crate) fn private_data_dir(data_dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)
        .with_context(|| format!("cannot make the data directory {}", data_dir.display()))?;
    let mode = std::fs::metadata(data_dir)
        .with_context(|| format!("cannot read {}", data_dir.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private (mode 0700)", data_dir.display()))?;
    }
    Ok(())
}

/// The ledger's directory inside the data directory.
pub(crate) fn ledger_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("ledger")
}

/// The access tokens: in the shared database when `--storage-url` names one, else the data
/// directory's `tokens.json`.
pub(crate) fn token_store(data_dir: &Path) -> anyhow::Result<service::tokens::TokenStore> {
    let path = data_dir.join("tokens.json");
    match crate::config::storage_url() {
        Some(url) => service::tokens::TokenStore::in_database(url, path)
            .context("cannot open the tokens in the storage database"),
        None => Ok(service::tokens::TokenStore::new(path)),
    }
}

/// Opens the ledger where the run keeps it: in the shared database when `--storage-url` names
/// one (with the signing key in the data directory), in the data directory otherwise.
fn open_ledger_with(data_dir: &Path, options: LedgerOptions) -> anyhow::Result<Ledger> {
    match crate::config::storage_url() {
        Some(url) => Ledger::open_postgres(url, &ledger_dir(data_dir).join("keys"), options)
            .context("cannot open the ledger in the storage database"),
        None => Ledger::open(&ledger_dir(data_dir), options)
            .with_context(|| format!("cannot open the ledger in {}", data_dir.display())),
    }
}

/// Opens the ledger of a data directory (or the shared database) for a command-line run.
pub(crate) fn open_ledger(data_dir: &Path) -> anyhow::Result<Ledger> {
    private_data_dir(data_dir)?;
    let note = format!(
        "research-ledger {} (pid {})",
        std::env::args().nth(1).unwrap_or_default(),
        std::process::id()
    );
    open_ledger_with(
        data_dir,
        LedgerOptions {
            lock_note: Some(note),
            limits: crate::config::limits().ledger.clone(),
            origin: crate::config::origin(),
            ..LedgerOptions::default()
        },
    )
}

/// Opens the ledger of a data directory (or the shared database) to read it, changing nothing
/// there (a lock file aside): what every read-only command does, on a read-only copy too.
pub(crate) fn open_ledger_read_only(data_dir: &Path) -> anyhow::Result<Ledger> {
    open_ledger_with(
        data_dir,
        LedgerOptions {
            limits: crate::config::limits().ledger.clone(),
            read_only: true,
            ..LedgerOptions::default()
        },
    )
}

/// Opens the service over a data directory to read it, changing nothing there (its lock file
/// aside): what `replay`, `explain` and `export` do, on a read-only copy too.
pub(crate) fn open_service_read_only(data_dir: &Path) -> anyhow::Result<service::Service> {
    let mut options = crate::config::service_options(data_dir);
    options.ledger.read_only = true;
    service::Service::open(options)
        .with_context(|| format!("cannot open the data directory {}", data_dir.display()))
}

/// Opens the service over a data directory for a command-line run.
pub(crate) fn open_service(data_dir: &Path) -> anyhow::Result<service::Service> {
    private_data_dir(data_dir)?;
    let mut options = crate::config::service_options(data_dir);
    options.ledger.lock_note = Some(format!(
        "research-ledger {} (pid {})",
        std::env::args().nth(1).unwrap_or_default(),
        std::process::id()
    ));
    service::Service::open(options)
        .with_context(|| format!("cannot open the data directory {}", data_dir.display()))
}

/// A progress bar on stderr, drawn only when stderr is a terminal.
pub(crate) fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

/// A spinner on stderr while waiting for a server, drawn only when stderr is a terminal.
pub(crate) fn spinner(what: &str) -> indicatif::ProgressBar {
    let spinner = indicatif::ProgressBar::new_spinner();
    spinner.set_message(what.to_owned());
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    spinner
}

/// Writes `bytes` to `path` so that `path` holds either what it held before or all of
/// `bytes`, never a part: into a new file beside it, synced, then renamed over it, and the
/// rename synced with the folder.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", path.display()))?;
    let mut temporary = name.to_os_string();
    temporary.push(format!(".partial-{}", std::process::id()));
    let temporary = folder.join(temporary);
    let written = (|| -> std::io::Result<()> {
        // Bundles and proofs hold the ledger's contents: for their owner alone.
        let mut file = {
            use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&temporary)?;
            // A leftover of an earlier run keeps its mode through `open`.
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            file
        };
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)?;
        std::fs::File::open(&folder)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.with_context(|| format!("cannot write {}", path.display()))
}
