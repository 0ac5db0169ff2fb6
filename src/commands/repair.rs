//! `research-ledger repair`: what an operator runs when the ledger refuses writes.
//!
//! Without `--accept-loss` it opens the ledger as `serve` would — a torn write that no durable
//! record shows acknowledged is cut, after a signed statement of the cut — and reports what it
//! found: exit 0 when the ledger takes writes again, 1 when it still refuses them. With
//! `--accept-loss --reason TEXT` it records that the operator accepts what was found (events
//! lost from the end of the log, damage past some seq, signed entries of the checkpoint log
//! that do not verify) in a statement the ledger's key signs, moves what lies past the part of
//! the log that checks out into `recovered/`, and opens the ledger again to show that it takes
//! writes. The statement stays in the checkpoint log: every later verification shows it.

use std::path::Path;

use anyhow::{Context, bail};
use ledger::{Ledger, LedgerOptions};

use crate::Outcome;

/// Arguments of `repair`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Accept the loss of what the ledger found missing or damaged, and go on from the part of
    /// the log that checks out. Needs `--reason`.
    #[arg(long, requires = "reason")]
    accept_loss: bool,
    /// Why the loss is accepted (one line; it is signed into the checkpoint log).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
}

fn options() -> LedgerOptions {
    LedgerOptions {
        lock_note: Some(format!(
            "research-ledger repair (pid {})",
            std::process::id()
        )),
        limits: crate::config::limits().ledger.clone(),
        ..LedgerOptions::default()
    }
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    let dir = super::ledger_dir(data_dir);
    if !dir.join("log").is_dir() {
        bail!("there is no ledger in {}", data_dir.display());
    }
    if args.accept_loss {
        let reason = args.reason.as_deref().unwrap_or_default();
        let accepted = Ledger::accept_loss(&dir, options(), reason)
            .context("the loss could not be accepted")?;
        say!(
            "accepted, in a statement signed by key {}:",
            accepted.statement.key_fingerprint
        );
        for problem in &accepted.accepted {
            say!("  - {problem}");
        }
        for moved in &accepted.moved {
            say!("moved {moved}");
        }
        say!(
            "the ledger goes on from its first {} events",
            accepted.statement.tree_size
        );
    }
    let ledger = Ledger::open(&dir, options())
        .with_context(|| format!("cannot open the ledger in {}", data_dir.display()))?;
    for note in ledger.recovery_notes() {
        say!("note: {note}");
    }
    let outcome = match ledger.poisoned() {
        None => {
            say!(
                "the ledger takes writes: {} events, head {}",
                ledger.head().size,
                ledger.head().last_hash
            );
            Outcome::Passed
        }
        Some(reason) => {
            say!("the ledger refuses writes: {reason}");
            for problem in ledger.problems() {
                say!("  - {problem}");
            }
            say!(
                "nothing was changed; to go on from the part of the log that checks out, run\n  research-ledger --data-dir {} repair --accept-loss --reason \"…\"",
                data_dir.display()
            );
            Outcome::Failed
        }
    };
    ledger.shutdown();
    Ok(outcome)
}
