//! `research-ledger checkpoint`: write a signed checkpoint and print it.
//!
//! The JSON on stdout is what an auditor keeps: later, `verify-proof --since` proves from it
//! that the ledger only grew. With `--server URL` the server that holds the data directory
//! writes it (`POST /v1/checkpoints`, admins only).

use std::path::Path;

use anyhow::Context;
use ledger::ledger_proof::Checkpoint;

use crate::Outcome;
use crate::remote::ServerArgs;

/// Arguments of `checkpoint`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    remote: ServerArgs,
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    let checkpoint: Checkpoint = match args.remote.remote()? {
        Some(remote) => remote.post("/v1/checkpoints", &serde_json::json!({}))?,
        None => {
            let ledger = super::open_ledger(data_dir)?;
            ledger.checkpoint().context("cannot write a checkpoint")?
        }
    };
    say!("{}", serde_json::to_string_pretty(&checkpoint)?);
    tell!(
        "checkpoint of {} events signed by key {}",
        checkpoint.tree_size,
        checkpoint.key_fingerprint
    );
    Ok(Outcome::Passed)
}
