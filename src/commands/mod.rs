//! One module per command. Each maps the library's typed errors to messages exactly once.

pub(crate) mod audit;
pub(crate) mod bench;
pub(crate) mod checkpoint;
pub(crate) mod contracts;
pub(crate) mod demo;
pub(crate) mod ingest;
pub(crate) mod key;
pub(crate) mod mcp;
pub(crate) mod prove;
pub(crate) mod serve;
pub(crate) mod token;
pub(crate) mod verify;

use std::path::Path;

use anyhow::Context;
use ledger::{Ledger, LedgerOptions};

/// The ledger's directory inside the data directory.
pub(crate) fn ledger_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("ledger")
}

/// Opens the ledger of a data directory for a command-line run.
pub(crate) fn open_ledger(data_dir: &Path) -> anyhow::Result<Ledger> {
    let note = format!(
        "research-ledger {} (pid {})",
        std::env::args().nth(1).unwrap_or_default(),
        std::process::id()
    );
    Ledger::open(
        &ledger_dir(data_dir),
        LedgerOptions {
            lock_note: Some(note),
            limits: crate::config::limits().ledger.clone(),
            ..LedgerOptions::default()
        },
    )
    .with_context(|| format!("cannot open the ledger in {}", data_dir.display()))
}

/// Opens the service over a data directory for a command-line run.
pub(crate) fn open_service(data_dir: &Path) -> anyhow::Result<service::Service> {
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
