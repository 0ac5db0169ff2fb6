//! The auditor's commands: `replay`, `explain`, `export`, `verify-bundle` and `import`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ledger::bundle::Scope;
use ledger::ledger_proof::{PublicKey, SigningKey};
use ledger::{Ledger, LedgerOptions};
use serde_json::json;

use crate::Outcome;

/// Largest bundle `verify-bundle` and `import` read.
const BUNDLE_BYTES_MAX: usize = 4 * 1024 * 1024 * 1024;

/// Arguments of `replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// The task.
    task: String,
    /// Show the task as it stood at this version (time travel).
    #[arg(long)]
    at: Option<u64>,
    /// Re-derive every score, adjudication and conclusion from the events it cites; exit 1
    /// naming the first event that disagrees.
    #[arg(long)]
    check: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn replay(data_dir: &Path, args: &ReplayArgs) -> anyhow::Result<Outcome> {
    let service = super::open_service(data_dir)?;
    let state = service
        .state_at(&args.task, args.at)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let summary = state
        .summary()
        .with_context(|| format!("task {} has no state", args.task))?;
    let check = if args.check {
        Some(
            service
                .replay_check(&args.task)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        )
    } else {
        None
    };
    let passed = check
        .as_ref()
        .is_none_or(|c| c.disagreement.is_none() && c.matches_live_state);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "task_id": args.task,
                "version": state.version(),
                "summary": summary,
                "evidence": state.evidence_views(),
                "conflicts": state.conflict_views(),
                "conclusion": state.conclusion_card(None),
                "check": check,
            }))?
        );
    } else {
        println!("task {} at version {}", args.task, state.version());
        println!("{}", summary.text());
        if let Some(card) = state.conclusion_card(None) {
            println!("\n{}", card.markdown);
        }
        if let Some(check) = &check {
            match &check.disagreement {
                None => println!(
                    "\ncheck: {} events replayed; every derived value of {} events re-derived bit for bit{}",
                    check.events,
                    check.rederived,
                    if check.matches_live_state {
                        "; the replayed state is the live state"
                    } else {
                        ""
                    }
                ),
                Some(d) => println!(
                    "\ncheck FAILED at seq {} (version {}, {}, hash {}): {}",
                    d.seq, d.version, d.kind, d.hash, d.detail
                ),
            }
            if check.disagreement.is_none() && !check.matches_live_state {
                println!(
                    "check FAILED: the state replayed from the ledger is not the state the read model holds; rebuild the projections"
                );
            }
        }
    }
    service.shutdown();
    Ok(if passed {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

/// Arguments of `explain`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExplainArgs {
    /// The task.
    task: String,
}

pub(crate) fn explain(data_dir: &Path, args: &ExplainArgs) -> anyhow::Result<Outcome> {
    let service = super::open_service(data_dir)?;
    let explained = service
        .explanation(&args.task)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some((markdown, recorded)) = explained else {
        bail!("task {} has no conclusion to explain yet", args.task);
    };
    println!("{markdown}");
    if !recorded {
        eprintln!(
            "(derived now from the ledger; the task has not recorded an explanation of this verdict)"
        );
    }
    service.shutdown();
    Ok(Outcome::Passed)
}

/// Arguments of `export`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// The tasks to export.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    tasks: Vec<String>,
    /// Export the whole ledger (the backup format `import` restores).
    #[arg(long)]
    all: bool,
    /// Where to write the bundle.
    #[arg(long)]
    out: PathBuf,
    /// Leave out the full texts of evidence (their hashes stay in the events).
    #[arg(long)]
    without_content: bool,
}

pub(crate) fn export(data_dir: &Path, args: &ExportArgs) -> anyhow::Result<Outcome> {
    let service = super::open_service(data_dir)?;
    let scope = if args.all {
        Scope::All
    } else {
        Scope::Tasks(args.tasks.clone())
    };
    let bundle = service
        .export(scope, args.without_content)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let text = serde_json::to_vec_pretty(&bundle)?;
    let mut file = std::fs::File::create(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    file.write_all(&text)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    eprintln!(
        "wrote {}: {} events, {} content blobs, standing on the checkpoint of {} events signed by key {}",
        args.out.display(),
        bundle.events.len(),
        bundle.content.len(),
        bundle.checkpoint.tree_size,
        bundle.checkpoint.key_fingerprint
    );
    service.shutdown();
    Ok(Outcome::Passed)
}

/// Arguments of `verify-bundle`.
#[derive(Debug, clap::Args)]
pub(crate) struct VerifyBundleArgs {
    /// The bundle.
    file: PathBuf,
    /// The public key you trust (64 hex digits); without it, the first key inside the bundle
    /// is trusted, and the command says so.
    #[arg(long)]
    public_key: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn read_bundle(path: &Path) -> anyhow::Result<String> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    if size > BUNDLE_BYTES_MAX as u64 {
        bail!(
            "{} is {size} bytes, over the limit of {BUNDLE_BYTES_MAX}",
            path.display()
        );
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

fn parse_key(hex: Option<&String>) -> anyhow::Result<Option<PublicKey>> {
    hex.map(|h| {
        h.parse()
            .map_err(|e| anyhow::anyhow!("--public-key is not a public key: {e}"))
    })
    .transpose()
}

pub(crate) fn verify_bundle(args: &VerifyBundleArgs) -> anyhow::Result<Outcome> {
    let trusted = parse_key(args.public_key.as_ref())?;
    let text = read_bundle(&args.file)?;
    match service::audit::verify_bundle_text(&text, BUNDLE_BYTES_MAX, trusted) {
        Ok((_, report)) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                if report.trusted_key_from_bundle {
                    println!(
                        "trusting the key inside the bundle, fingerprint {} (pass --public-key to check against a key you hold)",
                        report.trusted_key.fingerprint()
                    );
                }
                for note in &report.key_chain_breaks {
                    println!("WARNING: the chain of signing keys breaks: {note}");
                }
                println!(
                    "valid: {} events of {} task(s), {} content blobs, {} signed checkpoints; all in the tree of {} events signed by the ledger",
                    report.events,
                    report.tasks.len(),
                    report.content,
                    report.checkpoints,
                    report.tree_size
                );
            }
            Ok(Outcome::Passed)
        }
        Err(failure) => {
            println!("INVALID at {}: {}", failure.location, failure.problem);
            Ok(Outcome::Failed)
        }
    }
}

/// Arguments of `import`.
#[derive(Debug, clap::Args)]
pub(crate) struct ImportArgs {
    /// A whole-ledger bundle (`export --all`).
    file: PathBuf,
    /// The signing key backed up with the old ledger (its `ledger/keys/signing.key`): signing
    /// goes on with it. Without it a new key starts, and the break in the key chain is recorded.
    #[arg(long)]
    key: Option<PathBuf>,
    /// Check the bundle against this public key rather than the first key inside it.
    #[arg(long)]
    public_key: Option<String>,
}

pub(crate) fn import(data_dir: &Path, args: &ImportArgs) -> anyhow::Result<Outcome> {
    let trusted = parse_key(args.public_key.as_ref())?;
    let text = read_bundle(&args.file)?;
    let (bundle, report) =
        match service::audit::verify_bundle_text(&text, BUNDLE_BYTES_MAX, trusted) {
            Ok(ok) => ok,
            Err(failure) => {
                println!(
                    "INVALID at {}: {}; nothing was imported",
                    failure.location, failure.problem
                );
                return Ok(Outcome::Failed);
            }
        };
    let key = match &args.key {
        None => None,
        Some(path) => {
            let hex = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let mut secret = [0u8; 32];
            hex::decode_to_slice(hex.trim(), &mut secret)
                .map_err(|_| anyhow::anyhow!("{} is not a signing key", path.display()))?;
            Some(SigningKey::from_secret_bytes(&secret))
        }
    };
    let layout = service::Layout::new(data_dir);
    if layout.ledger.join("log").exists() || layout.ledger.join("keys").exists() {
        bail!(
            "{} already holds a ledger; import into an empty data directory",
            data_dir.display()
        );
    }
    // The content first, so no restored event cites a blob that is not there.
    let blobs = sources::BlobStore::open(&layout.blobs, sources::BlobOptions::default())?;
    for blob in &bundle.content {
        let stored = blobs.put(&blob.bytes.0)?;
        if stored.0 != blob.hash.0 {
            bail!("content {} does not have its hash", blob.hash);
        }
    }
    let (ledger, restored) =
        Ledger::restore(&layout.ledger, &bundle, key, LedgerOptions::default())
            .map_err(|e| anyhow::anyhow!("cannot restore: {e}"))?;
    ledger.shutdown();
    drop(ledger);
    let service = super::open_service(data_dir)?;
    let verified = service.ledger().verify_from_scratch(&mut |_, _| {});
    println!(
        "imported {} events, {} idempotency keys, {} checkpoint log entries and {} content blobs into {} (bundle checked against key {})",
        restored.events,
        restored.idempotency_keys,
        restored.checkpoint_entries,
        bundle.content.len(),
        data_dir.display(),
        report.trusted_key.fingerprint()
    );
    if let Some(note) = &restored.key_chain_break {
        println!("WARNING: no signing key was given, so a new key signs from here on: {note}");
    }
    match &verified.failure {
        None => println!("verified: {} events intact", verified.size),
        Some(f) => println!("verification FAILED at seq {}: {}", f.seq, f.problem),
    }
    service.shutdown();
    Ok(if verified.is_intact() {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}
