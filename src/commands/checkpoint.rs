//! `research-ledger checkpoint`: write a signed checkpoint and print it.
//!
//! The JSON on stdout is what an auditor keeps: later, `verify-proof --since` proves from it
//! that the ledger only grew.

use std::path::Path;

use anyhow::Context;

use crate::Outcome;

/// Arguments of `checkpoint`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(data_dir: &Path, _args: &Args) -> anyhow::Result<Outcome> {
    let ledger = super::open_ledger(data_dir)?;
    let checkpoint = ledger.checkpoint().context("cannot write a checkpoint")?;
    println!("{}", serde_json::to_string_pretty(&checkpoint)?);
    eprintln!(
        "checkpoint of {} events signed by key {}",
        checkpoint.tree_size, checkpoint.key_fingerprint
    );
    Ok(Outcome::Passed)
}
