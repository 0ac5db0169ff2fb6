//! The auditor's commands: `replay`, `explain`, `export`, `verify-bundle` and `import`.
//!
//! `replay`, `explain` and `export` also run against a server that holds the data directory
//! (`--server URL`). The server is not taken at its word: the commands fetch the task's events
//! as an export bundle (`GET /v1/export`), check it offline as `verify-bundle` does — every
//! event's bytes, its place in the signed tree, the signed manifest — and then replay,
//! re-derive and explain those events with the same code that runs on a data directory
//! ([`service::audit::Replay`], [`service::audit::fold_events`],
//! [`service::audit::explain_state`]). Folding the bundle's events in memory needs neither a
//! data directory nor a whole-ledger bundle, which restoring one into a temporary directory
//! would. The one thing only the server can say is whether its read model holds the state the
//! events give; `replay --check` asks for that state's hash (`GET /v1/tasks/{id}/head`) before
//! fetching the events, and compares it with the state the events give at that version.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ledger::bundle::{Bundle, BundleFailure, BundleReport, Scope};
use ledger::ledger_proof::{PublicKey, SigningKey, VerifierKey};
use ledger::{Ledger, LedgerOptions, RecordedEvent};
use research::TaskState;
use serde::Deserialize;
use serde_json::json;
use service::audit::{Replay, ReplayCheck};

use crate::Outcome;
use crate::remote::{Remote, ServerArgs, path_segment};

/// Largest bundle `verify-bundle` and `import` read.
const BUNDLE_BYTES_MAX: usize = 4 * 1024 * 1024 * 1024;

/// `--server`, `--token`, and the key a bundle fetched from the server must be signed under.
#[derive(Debug, clap::Args)]
pub(crate) struct BundleServerArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// With `--server`: the public key (64 hex digits) the fetched bundle must be signed under;
    /// without it, the first key inside the bundle is trusted, and the command says so.
    #[arg(long, value_name = "HEX")]
    public_key: Option<String>,
}

impl BundleServerArgs {
    /// The server to act through, with the key to trust; none to act on the data directory.
    fn remote(&self) -> anyhow::Result<Option<(Remote, Option<PublicKey>)>> {
        match self.server.remote()? {
            Some(remote) => Ok(Some((remote, parse_key(self.public_key.as_ref())?))),
            None if self.public_key.is_some() => {
                bail!("--public-key checks a bundle fetched with --server; give --server URL")
            }
            None => Ok(None),
        }
    }
}

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
    #[command(flatten)]
    remote: BundleServerArgs,
}

pub(crate) fn replay(data_dir: &Path, args: &ReplayArgs) -> anyhow::Result<Outcome> {
    if let Some((remote, trusted)) = args.remote.remote()? {
        return replay_remote(&remote, trusted, args);
    }
    let service = super::open_service_read_only(data_dir)?;
    let state = service
        .state_at(&args.task, args.at)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let check = if args.check {
        Some(
            service
                .replay_check(&args.task)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        )
    } else {
        None
    };
    let outcome = show_replay(args, &state, check.as_ref())?;
    service.shutdown();
    Ok(outcome)
}

/// A task's version and state hash in a server's read model (`GET /v1/tasks/{id}/head`).
#[derive(Debug, Deserialize)]
struct TaskHead {
    version: u64,
    state_hash: String,
}

fn replay_remote(
    remote: &Remote,
    trusted: Option<PublicKey>,
    args: &ReplayArgs,
) -> anyhow::Result<Outcome> {
    // Read before the events, so the bundle holds at least the version it is for.
    let live: Option<TaskHead> = if args.check {
        Some(remote.get(&format!("/v1/tasks/{}/head", path_segment(&args.task)), &[])?)
    } else {
        None
    };
    let events = match fetch_task_events(remote, &args.task, trusted)? {
        Ok(events) => events,
        Err(failure) => return Ok(invalid_bundle(&failure)),
    };
    let state = service::audit::fold_events(&args.task, &events, args.at)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let check = match live {
        None => None,
        Some(live) => {
            let mut replay = Replay::new();
            for event in &events {
                replay.feed(event);
            }
            let matches = service::audit::fold_events(&args.task, &events, Some(live.version))
                .is_ok_and(|at_live| {
                    service::projections::state_hash(&at_live).to_hex() == live.state_hash
                });
            Some(
                replay
                    .finish(&args.task, matches)
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            )
        }
    };
    show_replay(args, &state, check.as_ref())
}

/// Prints a task's state and the outcome of its replay check, alike for a data directory
/// and for a bundle from a server.
fn show_replay(
    args: &ReplayArgs,
    state: &TaskState,
    check: Option<&ReplayCheck>,
) -> anyhow::Result<Outcome> {
    let summary = state
        .summary()
        .with_context(|| format!("task {} has no state", args.task))?;
    let passed = check.is_none_or(|c| c.disagreement.is_none() && c.matches_live_state);
    if args.json {
        say!(
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
        say!("task {} at version {}", args.task, state.version());
        say!("{}", summary.text());
        if let Some(card) = state.conclusion_card(None) {
            say!("\n{}", card.markdown);
        }
        if let Some(check) = check {
            match &check.disagreement {
                None => say!(
                    "\ncheck: {} events replayed; every derived value of {} events re-derived bit for bit{}",
                    check.events,
                    check.rederived,
                    if check.matches_live_state {
                        "; the replayed state is the live state"
                    } else {
                        ""
                    }
                ),
                Some(d) => say!(
                    "\ncheck FAILED at seq {} (version {}, {}, hash {}): {}",
                    d.seq,
                    d.version,
                    d.kind,
                    d.hash,
                    d.detail
                ),
            }
            if check.disagreement.is_none() && !check.matches_live_state {
                say!(
                    "check FAILED: the state replayed from the ledger is not the state the read model holds; rebuild the projections"
                );
            }
        }
    }
    Ok(if passed {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

/// The events of one task from a server, in an export bundle checked here as `verify-bundle`
/// checks one (what it found goes to stderr); the failure when the bundle does not check out.
fn fetch_task_events(
    remote: &Remote,
    task: &str,
    trusted: Option<PublicKey>,
) -> anyhow::Result<Result<Vec<RecordedEvent>, BundleFailure>> {
    let query = [
        ("task", task.to_owned()),
        ("without_content", "true".to_owned()),
    ];
    let text = remote.get_text("/v1/export", &query, BUNDLE_BYTES_MAX as u64)?;
    let (bundle, report) =
        match service::audit::verify_bundle_text(&text, BUNDLE_BYTES_MAX, trusted) {
            Ok(checked) => checked,
            Err(failure) => return Ok(Err(failure)),
        };
    tell!("the export bundle from {} checks out:", remote.server());
    print_bundle_report(&report, &mut std::io::stderr())?;
    let events =
        service::audit::bundle_task_events(&bundle, task).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Ok(events))
}

/// Reports a bundle that does not check out, as `verify-bundle` does: a check failed.
fn invalid_bundle(failure: &BundleFailure) -> Outcome {
    say!("INVALID at {}: {}", failure.location, failure.problem);
    Outcome::Failed
}

/// Arguments of `explain`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExplainArgs {
    /// The task.
    task: String,
    #[command(flatten)]
    remote: BundleServerArgs,
}

pub(crate) fn explain(data_dir: &Path, args: &ExplainArgs) -> anyhow::Result<Outcome> {
    let explained = match args.remote.remote()? {
        Some((remote, trusted)) => {
            let events = match fetch_task_events(&remote, &args.task, trusted)? {
                Ok(events) => events,
                Err(failure) => return Ok(invalid_bundle(&failure)),
            };
            service::audit::fold_events(&args.task, &events, None)
                .and_then(|state| service::audit::explain_state(&state))
                .map_err(|e| anyhow::anyhow!("{e}"))?
        }
        None => {
            let service = super::open_service_read_only(data_dir)?;
            let explained = service
                .explanation(&args.task)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            service.shutdown();
            explained
        }
    };
    let Some((markdown, recorded)) = explained else {
        bail!("task {} has no conclusion to explain yet", args.task);
    };
    say!("{markdown}");
    if !recorded {
        tell!(
            "(derived now from the ledger; the task has not recorded an explanation of this verdict)"
        );
    }
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
    #[command(flatten)]
    remote: BundleServerArgs,
}

pub(crate) fn export(data_dir: &Path, args: &ExportArgs) -> anyhow::Result<Outcome> {
    if let Some((remote, trusted)) = args.remote.remote()? {
        return export_remote(&remote, trusted, args);
    }
    let service = super::open_service_read_only(data_dir)?;
    let scope = if args.all {
        Scope::All
    } else {
        Scope::Tasks(args.tasks.clone())
    };
    let bundle = service
        .export(scope, args.without_content)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    write_bundle(&args.out, &bundle)?;
    // A read never signs, so what no checkpoint covers yet stays out of the bundle: say so
    // rather than let a bundle of "all" look like the whole ledger.
    let head = service.ledger().head().size;
    if head > bundle.checkpoint.tree_size {
        tell!(
            "note: the ledger holds {} events after that checkpoint, which no checkpoint covers yet and the bundle leaves out; `research-ledger checkpoint` signs one",
            head - bundle.checkpoint.tree_size
        );
    }
    service.shutdown();
    Ok(Outcome::Passed)
}

/// Writes a bundle to `out` (whole or not at all) and says what it holds.
fn write_bundle(out: &Path, bundle: &Bundle) -> anyhow::Result<()> {
    super::write_atomically(out, &serde_json::to_vec_pretty(bundle)?)?;
    tell!(
        "wrote {}: {} events, {} content blobs, standing on the checkpoint of {} events signed by key {}",
        out.display(),
        bundle.events.len(),
        bundle.content.len(),
        bundle.checkpoint.tree_size,
        bundle.checkpoint.key_fingerprint
    );
    Ok(())
}

/// Fetches the bundle from the server (`GET /v1/export`), writes it, then checks the file
/// written as `verify-bundle` would; a bundle that does not check out is kept, for the
/// evidence, and the command fails.
fn export_remote(
    remote: &Remote,
    trusted: Option<PublicKey>,
    args: &ExportArgs,
) -> anyhow::Result<Outcome> {
    let mut query: Vec<(&str, String)> = if args.all {
        vec![("all", "true".to_owned())]
    } else {
        args.tasks.iter().map(|t| ("task", t.clone())).collect()
    };
    if args.without_content {
        query.push(("without_content", "true".to_owned()));
    }
    let spinner = super::spinner(&format!("exporting from {}", remote.server()));
    let text = remote.get_text("/v1/export", &query, BUNDLE_BYTES_MAX as u64);
    spinner.finish_and_clear();
    let bundle: Bundle = serde_json::from_str(&text?).with_context(|| {
        format!(
            "the server at {} did not answer with an export bundle",
            remote.server()
        )
    })?;
    write_bundle(&args.out, &bundle)?;
    drop(bundle);
    let text = read_bundle(&args.out)?;
    match service::audit::verify_bundle_text(&text, BUNDLE_BYTES_MAX, trusted) {
        Ok((_, report)) => {
            print_bundle_report(&report, &mut std::io::stderr())?;
            Ok(Outcome::Passed)
        }
        Err(failure) => {
            tell!(
                "INVALID at {}: {} ({} is kept as evidence)",
                failure.location,
                failure.problem,
                args.out.display()
            );
            Ok(Outcome::Failed)
        }
    }
}

/// Arguments of `verify-bundle`.
#[derive(Debug, clap::Args)]
pub(crate) struct VerifyBundleArgs {
    /// The bundle.
    file: PathBuf,
    /// The public key you trust (64 hex digits, or the log's note verifier key
    /// `origin+key ID+base64`); without it, the first key inside the bundle is trusted, and the
    /// command says so.
    #[arg(long)]
    public_key: Option<String>,
    /// A witness whose cosignature of the bundle's checkpoint is required, as its verifier key
    /// (`name+key ID+base64`, type 0x04); may be given more than once.
    #[arg(long = "witness", value_name = "VKEY")]
    witnesses: Vec<String>,
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

/// A public key given as 64 hex digits or as a note verifier key of type 0x01.
pub(crate) fn parse_key(text: Option<&String>) -> anyhow::Result<Option<PublicKey>> {
    text.map(|t| {
        if t.contains('+') {
            return VerifierKey::parse_typed(t, ledger::ledger_proof::note::TYPE_ED25519)
                .map(|v| *v.key())
                .map_err(|e| anyhow::anyhow!("--public-key is not a verifier key: {e}"));
        }
        t.parse()
            .map_err(|e| anyhow::anyhow!("--public-key is not a public key: {e}"))
    })
    .transpose()
}

/// Witness verifier keys (type 0x04).
pub(crate) fn parse_witnesses(texts: &[String]) -> anyhow::Result<Vec<VerifierKey>> {
    texts
        .iter()
        .map(|t| {
            VerifierKey::parse_typed(t, ledger::ledger_proof::note::TYPE_COSIGNATURE_V1).map_err(
                |e| anyhow::anyhow!("--witness {t:?} is not a witness's verifier key: {e}"),
            )
        })
        .collect()
}

/// What the check of a valid bundle found, in words.
fn print_bundle_report(report: &BundleReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    if report.trusted_key_from_bundle {
        writeln!(
            out,
            "trusting the key inside the bundle, fingerprint {} (pass --public-key to check against a key you hold)",
            report.trusted_key.fingerprint()
        )?;
    }
    for note in &report.key_chain_breaks {
        writeln!(out, "WARNING: the chain of signing keys breaks: {note}")?;
    }
    for witness in &report.witnesses {
        writeln!(out, "cosigned by witness {witness}")?;
    }
    writeln!(
        out,
        "valid: {} events of {} task(s), {} content blobs, {} signed checkpoints; all in the tree of {} events signed by the ledger",
        report.events,
        report.tasks.len(),
        report.content,
        report.checkpoints,
        report.tree_size
    )
}

pub(crate) fn verify_bundle(args: &VerifyBundleArgs) -> anyhow::Result<Outcome> {
    let trusted = parse_key(args.public_key.as_ref())?;
    let witnesses = parse_witnesses(&args.witnesses)?;
    let text = read_bundle(&args.file)?;
    match service::audit::verify_bundle_witnessed(&text, BUNDLE_BYTES_MAX, trusted, witnesses) {
        Ok((_, report)) => {
            if args.json {
                say!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                if let Err(e) = print_bundle_report(&report, &mut std::io::stdout().lock()) {
                    crate::output::stop(&e)
                }
            }
            Ok(Outcome::Passed)
        }
        Err(failure) => Ok(invalid_bundle(&failure)),
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

/// Restores the ledger of `bundle` where the run keeps it: the storage database or the data
/// directory.
fn restore_ledger(
    layout: &service::Layout,
    bundle: &Bundle,
    key: Option<SigningKey>,
) -> anyhow::Result<(Ledger, ledger::RestoreReport)> {
    match crate::config::storage_url() {
        Some(url) => Ledger::restore_postgres(
            url,
            &layout.ledger.join("keys"),
            bundle,
            key,
            LedgerOptions::default(),
        ),
        None => Ledger::restore(&layout.ledger, bundle, key, LedgerOptions::default()),
    }
    .map_err(|e| anyhow::anyhow!("cannot restore: {e}"))
}

pub(crate) fn import(data_dir: &Path, args: &ImportArgs) -> anyhow::Result<Outcome> {
    let trusted = parse_key(args.public_key.as_ref())?;
    let text = read_bundle(&args.file)?;
    let (bundle, report) =
        match service::audit::verify_bundle_text(&text, BUNDLE_BYTES_MAX, trusted) {
            Ok(ok) => ok,
            Err(failure) => {
                say!(
                    "INVALID at {}: {}; nothing was imported",
                    failure.location,
                    failure.problem
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
    // Refused before the data directory is made: a refused import leaves nothing behind.
    Ledger::check_restore(&bundle, key.as_ref())
        .map_err(|e| anyhow::anyhow!("cannot restore: {e}"))?;
    super::private_data_dir(data_dir)?;
    let layout = service::Layout::new(data_dir);
    let url = crate::config::storage_url();
    if layout.ledger.join("keys").exists() || (url.is_none() && layout.ledger.join("log").exists())
    {
        bail!(
            "{} already holds a ledger; import into an empty data directory",
            data_dir.display()
        );
    }
    // The content goes with the events: the restore writes it first, so no restored event
    // cites a blob that is not there.
    let (ledger, restored) = restore_ledger(&layout, &bundle, key)?;
    ledger.shutdown();
    drop(ledger);
    let service = super::open_service(data_dir)?;
    let verified = service.ledger().verify_from_scratch(&mut |_, _| {});
    say!(
        "imported {} events, {} idempotency keys, {} checkpoint log entries and {} content blobs into {} (bundle checked against key {})",
        restored.events,
        restored.idempotency_keys,
        restored.checkpoint_entries,
        restored.content,
        data_dir.display(),
        report.trusted_key.fingerprint()
    );
    if let Some(note) = &restored.key_chain_break {
        say!("WARNING: no signing key was given, so a new key signs from here on: {note}");
    }
    match &verified.failure {
        None => say!("verified: {} events intact", verified.size),
        Some(f) => say!("verification FAILED at seq {}: {}", f.seq, f.problem),
    }
    service.shutdown();
    Ok(if verified.is_intact() {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}
