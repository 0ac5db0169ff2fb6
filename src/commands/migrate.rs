//! `research-ledger migrate --from A --to B`: moves a whole deployment between a data
//! directory and a PostgreSQL database, either way, and verifies the copy.
//!
//! What moves: the events with their stored bytes, the idempotency records, the checkpoint
//! log with its cosignatures (a whole-ledger bundle, written back with the very bytes it was
//! read with, signing going on with the same key), every content blob the events cite, the
//! tokens, the registered tools' contracts, the pipeline jobs and the corpus's documents. A
//! database's signing key is the one in `--data-dir` (`DATA_DIR/ledger/keys`), where a move into
//! a database puts it too. The destination must hold nothing yet. After the move the
//! destination is opened as any command opens it and checked: `verify` from the first event,
//! the same head and Merkle root, the same checkpoint log, every cited blob present, the same
//! tokens, contracts and jobs, and the corpus's index state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ledger::bundle::{Bundle, Scope};
use ledger::ledger_proof::SigningKey;
use ledger::{Ledger, LedgerOptions};
use service::migration::SharedParts;
use sources::contracts::registry::{FALLBACKS_FILE, TAGS_FILE, TOOLS_DIR};

use crate::Outcome;

/// Arguments of `migrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where the deployment is now: a data directory, or `postgres://USER@HOST:PORT/DB`.
    #[arg(long)]
    from: String,
    /// Where it goes: an empty (or missing) data directory, or a database that holds nothing.
    #[arg(long)]
    to: String,
}

/// One end of a move.
#[derive(Debug, Clone)]
enum End {
    Dir(PathBuf),
    Database(String),
}

impl End {
    fn parse(text: &str) -> anyhow::Result<End> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return crate::config::parse_storage_url(text)
                .map(End::Database)
                .map_err(anyhow::Error::msg);
        }
        Ok(End::Dir(PathBuf::from(text)))
    }

    /// The data directory a service over this end opens, and its storage URL.
    fn service_dir<'a>(&'a self, node: &'a Path) -> (&'a Path, Option<&'a str>) {
        match self {
            End::Dir(dir) => (dir, None),
            End::Database(url) => (node, Some(url)),
        }
    }

    fn name(&self) -> String {
        match self {
            End::Dir(dir) => dir.display().to_string(),
            End::Database(url) => url.clone(),
        }
    }
}

/// What the source holds, read before anything is written.
struct Source {
    bundle: Bundle,
    key: SigningKey,
    parts: SharedParts,
    documents: Vec<sources::Document>,
    index_state: String,
    root: ledger::Digest,
    checkpoints: String,
}

fn open_service(
    dir: &Path,
    url: Option<&str>,
    read_only: bool,
) -> anyhow::Result<service::Service> {
    let mut options = crate::config::service_options(dir);
    options.storage_url = url.map(str::to_owned);
    options.ledger.read_only = read_only;
    service::Service::open(options).with_context(|| format!("cannot open {}", dir.display()))
}

fn read_key(dir: &Path) -> anyhow::Result<SigningKey> {
    let path = dir.join("ledger").join("keys").join("signing.key");
    let hex = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the signing key {}", path.display()))?;
    let mut secret = [0u8; 32];
    hex::decode_to_slice(hex.trim(), &mut secret)
        .map_err(|_| anyhow::anyhow!("{} is not a signing key", path.display()))?;
    Ok(SigningKey::from_secret_bytes(&secret))
}

/// The log as comparable text: every entry, in order.
fn checkpoint_text(ledger: &Ledger) -> anyhow::Result<String> {
    let entries = ledger
        .checkpoint_entries()
        .map_err(|e| anyhow::anyhow!("cannot read the checkpoint log: {e}"))?;
    Ok(serde_json::to_string(&entries)?)
}

fn root_of(ledger: &Ledger) -> anyhow::Result<ledger::Digest> {
    ledger
        .root_at(ledger.head().size)
        .map_err(|e| anyhow::anyhow!("cannot compute the Merkle root: {e}"))
}

/// The contracts (by name), the tag dictionary and the fallback map of a data directory's
/// `contracts/` folder.
type DirContracts = (BTreeMap<String, String>, Option<String>, Option<String>);

/// The contracts, tags and fallbacks of a data directory's `contracts/` folder.
fn dir_contracts(dir: &Path) -> anyhow::Result<DirContracts> {
    let root = dir.join("contracts");
    let mut tools = BTreeMap::new();
    let (mut tags, mut fallbacks) = (None, None);
    for folder in [root.clone(), root.join(TOOLS_DIR)] {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if !path.is_file() || name.starts_with('.') {
                continue;
            }
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            if folder == root && name == TAGS_FILE {
                tags = Some(text);
            } else if folder == root && name == FALLBACKS_FILE {
                fallbacks = Some(text);
            } else if let Ok(contract) = sources::contracts::Contract::parse(&text, None) {
                tools.insert(contract.name, text);
            }
        }
    }
    Ok((tools, tags, fallbacks))
}

/// The tokens, contracts and jobs of a data directory, as the database would keep them.
fn dir_parts(dir: &Path) -> anyhow::Result<SharedParts> {
    let tokens = match std::fs::read_to_string(dir.join("tokens.json")) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).context("cannot read tokens.json"),
    };
    let (contracts, tags, fallbacks) = dir_contracts(dir)?;
    let mut jobs = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(dir.join("jobs")) {
        for entry in entries {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            let id = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned();
            jobs.insert(id, text);
        }
    }
    Ok(SharedParts {
        tokens,
        contracts,
        tags,
        fallbacks,
        jobs,
    })
}

fn read_source(from: &End, node: &Path) -> anyhow::Result<Source> {
    let (dir, url) = from.service_dir(node);
    let service = open_service(dir, url, true)?;
    let bundle = service
        .export(Scope::All, false)
        .map_err(|e| anyhow::anyhow!("cannot export the ledger: {e}"))?;
    let root = root_of(service.ledger())?;
    let checkpoints = checkpoint_text(service.ledger())?;
    service.shutdown();
    drop(service);
    let key = read_key(dir)?;
    let (parts, documents) = match from {
        End::Dir(dir) if !dir.join("corpus").exists() => (dir_parts(dir)?, Vec::new()),
        End::Dir(dir) => {
            let corpus =
                sources::Corpus::open(dir.join("corpus"), sources::CorpusLimits::default())
                    .context("cannot open the corpus")?;
            (dir_parts(dir)?, corpus.documents()?)
        }
        End::Database(url) => {
            let parts = service::migration::read_shared_parts(url)?;
            let store = sources::PostgresDocuments::open_read_only(url)?;
            (parts, store.all()?)
        }
    };
    let index = sources::Corpus::in_memory(sources::CorpusLimits::default())?;
    index.add_documents(&documents)?;
    Ok(Source {
        bundle,
        key,
        parts,
        documents,
        index_state: index.index_state().id,
        root,
        checkpoints,
    })
}

/// Refuses a destination that holds anything.
fn check_empty(to: &End, node: &Path) -> anyhow::Result<()> {
    match to {
        End::Dir(dir) => {
            if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
                bail!(
                    "{} is not empty: migrate into an empty or missing data directory",
                    dir.display()
                );
            }
        }
        End::Database(url) => {
            let found = service::migration::database_contents(url)?;
            if !found.is_empty() {
                bail!(
                    "the database {url} is not empty (it holds {}): migrate into a database that holds nothing",
                    found.join(", ")
                );
            }
            let keys = node.join("ledger").join("keys").join("signing.key");
            if keys.exists() && read_key(node).is_err() {
                bail!("{} does not hold a signing key", keys.display());
            }
        }
    }
    Ok(())
}

pub(crate) fn run(node: &Path, args: &Args) -> anyhow::Result<Outcome> {
    if crate::config::storage_url().is_some() {
        bail!("migrate takes the database as --from or --to, not as --storage-url");
    }
    let (from, to) = (End::parse(&args.from)?, End::parse(&args.to)?);
    if let (End::Dir(a), End::Dir(b)) = (&from, &to) {
        bail!(
            "both {} and {} are data directories: one end of a move is a database",
            a.display(),
            b.display()
        );
    }
    check_empty(&to, node)?;
    let source = read_source(&from, node)?;
    write_destination(&to, node, &source)?;
    let checked = check_destination(&to, node, &source)?;
    say!(
        "migrated {} to {}: {} events, {} content blobs, {} checkpoint log entries, {} idempotency keys, {} contracts, {} jobs, {} corpus documents",
        from.name(),
        to.name(),
        source.bundle.events.len(),
        source.bundle.content.len(),
        source.bundle.checkpoint_log.len(),
        source.bundle.idempotency.len(),
        source.parts.contracts.len(),
        source.parts.jobs.len(),
        source.documents.len()
    );
    for line in &checked {
        say!("{line}");
    }
    Ok(if checked.iter().all(|l| l.starts_with("ok")) {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

fn write_destination(to: &End, node: &Path, source: &Source) -> anyhow::Result<()> {
    let key = || SigningKey::from_secret_bytes(&source.key.to_secret_bytes());
    match to {
        End::Dir(dir) => {
            super::private_data_dir(dir)?;
            let layout = service::Layout::new(dir);
            // The content goes with the events, written before them.
            let (ledger, _) = Ledger::restore(
                &layout.ledger,
                &source.bundle,
                Some(key()),
                LedgerOptions::default(),
            )
            .map_err(|e| anyhow::anyhow!("cannot restore the ledger: {e}"))?;
            ledger.shutdown();
            write_dir_parts(dir, source)?;
            let corpus =
                sources::Corpus::open(dir.join("corpus"), sources::CorpusLimits::default())?;
            corpus.add_documents(&source.documents)?;
        }
        End::Database(url) => {
            super::private_data_dir(node)?;
            restore_into_database(url, node, source)?;
            service::migration::write_shared_parts(url, &source.parts)?;
            let store = sources::PostgresDocuments::open(url)?;
            store.put(&source.documents)?;
        }
    }
    Ok(())
}

/// Restores the ledger into the database, its key in `node`'s key folder: put there, or
/// found there already when `node` is the data directory the ledger came from.
fn restore_into_database(url: &str, node: &Path, source: &Source) -> anyhow::Result<()> {
    let keys = node.join("ledger").join("keys");
    let key = SigningKey::from_secret_bytes(&source.key.to_secret_bytes());
    let staging = if keys.join("signing.key").exists() {
        if read_key(node)?.public_key() != source.key.public_key() {
            bail!(
                "{} holds another signing key than the ledger's",
                keys.display()
            );
        }
        Some(
            node.join("ledger")
                .join(format!(".migrate-keys-{}", std::process::id())),
        )
    } else {
        None
    };
    let key_dir = staging.clone().unwrap_or_else(|| keys.clone());
    let (ledger, _) = Ledger::restore_postgres(
        url,
        &key_dir,
        &source.bundle,
        Some(key),
        LedgerOptions::default(),
    )
    .map_err(|e| anyhow::anyhow!("cannot restore the ledger: {e}"))?;
    ledger.shutdown();
    if let Some(staging) = staging {
        std::fs::remove_dir_all(&staging)
            .with_context(|| format!("cannot remove {}", staging.display()))?;
    }
    Ok(())
}

/// Writes the tokens, contracts and jobs as a data directory keeps them.
fn write_dir_parts(dir: &Path, source: &Source) -> anyhow::Result<()> {
    if let Some(tokens) = &source.parts.tokens {
        super::write_atomically(&dir.join("tokens.json"), tokens.as_bytes())?;
    }
    let tools = dir.join("contracts").join(TOOLS_DIR);
    let parts = &source.parts;
    if !parts.contracts.is_empty() || parts.tags.is_some() || parts.fallbacks.is_some() {
        std::fs::create_dir_all(&tools)?;
    }
    for (name, text) in &parts.contracts {
        super::write_atomically(&tools.join(format!("{name}.yaml")), text.as_bytes())?;
    }
    for (name, text) in [(TAGS_FILE, &parts.tags), (FALLBACKS_FILE, &parts.fallbacks)] {
        if let Some(text) = text {
            super::write_atomically(&dir.join("contracts").join(name), text.as_bytes())?;
        }
    }
    if !source.parts.jobs.is_empty() {
        std::fs::create_dir_all(dir.join("jobs"))?;
    }
    for (id, text) in &source.parts.jobs {
        super::write_atomically(
            &dir.join("jobs").join(format!("{id}.json")),
            text.as_bytes(),
        )?;
    }
    Ok(())
}

/// Opens the destination as a command would and compares it with the source, one line per
/// check, each starting `ok` or `MISMATCH`.
fn check_destination(to: &End, node: &Path, source: &Source) -> anyhow::Result<Vec<String>> {
    let (dir, url) = to.service_dir(node);
    let parts = match to {
        End::Dir(dir) => dir_parts(dir)?,
        End::Database(url) => service::migration::read_shared_parts(url)?,
    };
    let service = open_service(dir, url, false)?;
    let ledger = service.ledger();
    let verified = ledger.verify_from_scratch(&mut |_, _| {});
    let line = |ok: bool, what: String| format!("{} {what}", if ok { "ok" } else { "MISMATCH" });
    let mut lines = vec![line(
        verified.is_intact(),
        match &verified.failure {
            None => format!("verify: {} events intact", verified.size),
            Some(f) => format!("verify: failed at seq {}: {}", f.seq, f.problem),
        },
    )];
    let root = root_of(ledger)?;
    lines.push(line(
        ledger.head().size == source.bundle.events.len() as u64 && root == source.root,
        format!("head: {} events, root {}", ledger.head().size, root),
    ));
    lines.push(line(
        checkpoint_text(ledger)? == source.checkpoints,
        "checkpoint log: the same entries, signatures and cosignatures".into(),
    ));
    let missing = source
        .bundle
        .content
        .iter()
        .filter(|b| service.content(&research::Hash32(b.hash.0)).is_err())
        .count();
    lines.push(line(
        missing == 0,
        format!(
            "content: {} blobs, {missing} missing",
            source.bundle.content.len()
        ),
    ));
    lines.push(line(
        parts == source.parts,
        format!(
            "tokens, {} contracts and {} jobs as in the source",
            parts.contracts.len(),
            parts.jobs.len()
        ),
    ));
    let state = service.corpus().index_state();
    lines.push(line(
        state.id == source.index_state,
        format!(
            "corpus: {} documents, index state {}",
            state.documents, state.id
        ),
    ));
    service.shutdown();
    Ok(lines)
}
