//! `research-ledger key`: show the signing key's public half, or rotate it.

use std::path::Path;

use anyhow::Context;
use ledger::CheckpointEntry;

use crate::Outcome;

/// Arguments of `key`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Print the public key that signs checkpoints (hex, then as the C2SP note verifier key
    /// `origin+key ID+base64` that checks its checkpoint notes), its fingerprint, and the chain
    /// of keys before it.
    Show,
    /// Replace the signing key: the old key signs a statement that introduces the new one.
    Rotate,
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    let ledger = match args.action {
        Action::Show => super::open_ledger_read_only(data_dir)?,
        Action::Rotate => super::open_ledger(data_dir)?,
    };
    match args.action {
        Action::Show => {
            let key = ledger
                .public_key()
                .map_err(|reason| anyhow::anyhow!("no usable signing key: {reason}"))?;
            let vkey = ledger
                .verifier_key()
                .map_err(|reason| anyhow::anyhow!("no verifier key: {reason}"))?;
            say!("{key}");
            say!("{vkey}");
            tell!("fingerprint {}", key.fingerprint());
            tell!("origin {}", ledger.origin());
            for (i, entry) in ledger.checkpoint_entries()?.iter().enumerate() {
                match entry {
                    CheckpointEntry::KeyIntroduced {
                        public_key,
                        tree_size,
                        reason,
                        ..
                    } => tell!(
                        "entry {}: key {} introduced at tree size {tree_size} ({reason})",
                        i + 1,
                        public_key.fingerprint()
                    ),
                    CheckpointEntry::Rotation(r) => tell!(
                        "entry {}: key {} handed over to {} at tree size {}",
                        i + 1,
                        r.old_key_fingerprint,
                        r.new_public_key.fingerprint(),
                        r.tree_size
                    ),
                    CheckpointEntry::Recovery(r) => {
                        tell!("entry {}: {}", i + 1, r.summary());
                    }
                    CheckpointEntry::Cosignature(c) => tell!(
                        "entry {}: witness {} cosigned tree size {}",
                        i + 1,
                        c.witness.name(),
                        c.tree_size
                    ),
                    CheckpointEntry::Checkpoint(_) => {}
                }
            }
        }
        Action::Rotate => {
            let statement = ledger.rotate_key().context("cannot rotate the key")?;
            say!("{}", serde_json::to_string_pretty(&statement)?);
            tell!(
                "key {} handed over to {} at tree size {}",
                statement.old_key_fingerprint,
                statement.new_public_key.fingerprint(),
                statement.tree_size
            );
        }
    }
    Ok(Outcome::Passed)
}
