//! `research-ledger prove` and `research-ledger verify-proof`: proofs for auditors.
//!
//! `prove SEQ` proves that one event is in the tree a signed checkpoint covers; `prove
//! --consistency A B` that the tree of checkpoint size B extends that of size A. Both print a
//! proof file (JSON) that `verify-proof` checks offline, with no data directory, against a
//! public key the auditor trusts. `verify-proof --since SAVED` proves, in one step, that the
//! ledger today only grew from a checkpoint the auditor saved.
//!
//! With `--server URL`, `prove` asks the server that holds the data directory
//! (`GET /v1/proofs/inclusion`, `GET /v1/proofs/consistency`) and writes the same proof file;
//! `verify-proof` checks it offline like any other. `verify-proof --since SAVED --server URL`
//! asks for the path from the saved tree to today's and checks it against the saved
//! checkpoint.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ledger::ledger_proof::{
    Checkpoint, ConsistencyProofFile, Cosignature, Note, ProofFile, PublicKey, Verified,
    VerifierKey, verify_proof_file, verify_proof_file_json,
};
use serde::Deserialize;

use crate::Outcome;
use crate::remote::{Remote, ServerArgs};

/// Arguments of `prove`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProveArgs {
    /// The seq of the event to prove.
    #[arg(required_unless_present = "consistency")]
    seq: Option<u64>,
    /// The tree size of the checkpoint to prove against (default: the latest). A proof never
    /// writes a checkpoint: a running server writes one within its checkpoint interval, and
    /// `research-ledger checkpoint` writes one on a data directory.
    #[arg(long, conflicts_with = "consistency")]
    tree_size: Option<u64>,
    /// Prove that the checkpoint of tree size B extends the one of tree size A.
    #[arg(long, num_args = 2, value_names = ["A", "B"], conflicts_with = "seq")]
    consistency: Option<Vec<u64>>,
    /// Write the proof to this file instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    remote: ServerArgs,
}

/// Arguments of `verify-proof`.
#[derive(Debug, clap::Args)]
pub(crate) struct VerifyArgs {
    /// A proof file written by `prove`.
    #[arg(required_unless_present = "since")]
    file: Option<PathBuf>,
    /// A checkpoint saved earlier — its JSON, or the signed note `GET /checkpoint` serves,
    /// with any witness cosignatures on it: prove from the data directory (or, with
    /// `--server`, from the server's proof) that the ledger only grew since.
    #[arg(long, conflicts_with = "file")]
    since: Option<PathBuf>,
    /// The public key the auditor trusts (64 hex digits, or the log's verifier key
    /// `origin+key ID+base64`): the ledger's first key or any key of its chain.
    #[arg(long)]
    public_key: String,
    /// With `--since` a note: a witness whose valid cosignature on it is required (its
    /// verifier key, type 0x04); may be given more than once.
    #[arg(long = "witness", value_name = "VKEY", requires = "since")]
    witnesses: Vec<String>,
    #[command(flatten)]
    remote: ServerArgs,
}

fn write_out(text: &str, out: Option<&Path>) -> anyhow::Result<()> {
    match out {
        Some(path) => std::fs::write(path, format!("{text}\n"))
            .with_context(|| format!("cannot write {}", path.display())),
        None => {
            say!("{text}");
            Ok(())
        }
    }
}

pub(crate) fn prove(data_dir: &Path, args: &ProveArgs) -> anyhow::Result<Outcome> {
    let consistency = match &args.consistency {
        Some(sizes) => {
            let [first, second] = sizes[..] else {
                bail!("--consistency takes two tree sizes");
            };
            Some((first, second))
        }
        None => None,
    };
    let file = match args.remote.remote()? {
        Some(remote) => prove_remote(&remote, consistency, args)?,
        None => {
            let ledger = super::open_ledger_read_only(data_dir)?;
            match (consistency, args.seq) {
                (Some((first, second)), _) => {
                    ProofFile::Consistency(ledger.consistency_proof(first, second)?)
                }
                (None, Some(seq)) => {
                    ProofFile::Inclusion(ledger.inclusion_proof_covering(seq, args.tree_size)?)
                }
                (None, None) => bail!("give a seq or --consistency A B"),
            }
        }
    };
    write_out(&serde_json::to_string_pretty(&file)?, args.out.as_deref())?;
    Ok(Outcome::Passed)
}

/// A proof from the server (`GET /v1/proofs/…`). The file is the server's word until
/// `verify-proof` checks it.
#[derive(Debug, Deserialize)]
struct RemoteProof {
    proof: ProofFile,
}

fn prove_remote(
    remote: &Remote,
    consistency: Option<(u64, u64)>,
    args: &ProveArgs,
) -> anyhow::Result<ProofFile> {
    let answer: RemoteProof = match (consistency, args.seq) {
        (Some((first, second)), _) => remote.get(
            "/v1/proofs/consistency",
            &[("first", first.to_string()), ("second", second.to_string())],
        )?,
        (None, Some(seq)) => {
            let mut query = vec![("seq", seq.to_string())];
            if let Some(size) = args.tree_size {
                query.push(("tree_size", size.to_string()));
            }
            remote.get("/v1/proofs/inclusion", &query)?
        }
        (None, None) => bail!("give a seq or --consistency A B"),
    };
    Ok(answer.proof)
}

fn trusted_key(text: &str) -> anyhow::Result<PublicKey> {
    super::audit::parse_key(Some(&text.to_owned()))?
        .ok_or_else(|| anyhow::anyhow!("--public-key is required"))
}

/// The checkpoint an auditor saved: its JSON, or a signed note (the log's signature checked
/// under `key`, and a valid cosignature required from each of `witnesses`).
fn saved_checkpoint(
    text: &str,
    key: &PublicKey,
    witnesses: &[VerifierKey],
) -> anyhow::Result<Checkpoint> {
    if text.trim_start().starts_with('{') {
        if !witnesses.is_empty() {
            bail!("--witness needs the saved checkpoint as a note, which carries cosignatures");
        }
        return serde_json::from_str(text).context("the saved checkpoint is not a checkpoint");
    }
    let note = Note::parse(text).context("the saved checkpoint is not a signed note")?;
    let (origin, ..) = ledger::ledger_proof::checkpoint::parse_body(&note.text)
        .context("the saved note is not a checkpoint")?;
    let vkey = VerifierKey::ed25519(&origin, *key)?;
    let checkpoint = Checkpoint::from_note(&note, &vkey)
        .context("the saved checkpoint is not signed by the trusted key")?;
    for witness in witnesses {
        let line = note
            .signatures
            .iter()
            .find(|s| s.is_by(witness))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the saved checkpoint carries no cosignature by {}",
                    witness.name()
                )
            })?;
        Cosignature::from_line(line, witness, &checkpoint)
            .with_context(|| format!("the cosignature by {}", witness.name()))?;
        tell!("cosigned by witness {}", witness.name());
    }
    Ok(checkpoint)
}

pub(crate) fn verify(data_dir: &Path, args: &VerifyArgs) -> anyhow::Result<Outcome> {
    let key = trusted_key(&args.public_key)?;
    let verdict = match (&args.file, &args.since) {
        (Some(file), _) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            verify_proof_file_json(&text, &key)
        }
        (None, Some(saved)) => {
            let text = std::fs::read_to_string(saved)
                .with_context(|| format!("cannot read {}", saved.display()))?;
            let witnesses = super::audit::parse_witnesses(&args.witnesses)?;
            let saved = saved_checkpoint(&text, &key, &witnesses).with_context(|| {
                format!("{} is not a checkpoint you can stand on", saved.display())
            })?;
            if let Some(remote) = args.remote.remote()? {
                let proof = growth_from_server(&remote, saved)?;
                return report(verify_proof_file(&ProofFile::Consistency(proof), &key));
            }
            let ledger = super::open_ledger_read_only(data_dir)?;
            let latest = ledger.latest_checkpoint()?.map_or(0, |c| c.tree_size);
            if latest < ledger.head().size {
                tell!(
                    "the latest checkpoint covers {latest} of {} events; the proof stands on it",
                    ledger.head().size
                );
            }
            // A checkpoint the auditor kept that signs more events than the ledger has is
            // the evidence of a loss, whatever else the ledger says.
            if saved.tree_size > ledger.head().size && saved.verify(&key).is_ok() {
                say!(
                    "FAILED: the checkpoint you kept signs a tree of {} events, but the ledger holds {}: events from seq {} on were lost or the log was replaced",
                    saved.tree_size,
                    ledger.head().size,
                    ledger.head().size
                );
                return Ok(Outcome::Failed);
            }
            let proof = ledger.consistency_since(saved)?;
            verify_proof_file(&ProofFile::Consistency(proof), &key)
        }
        (None, None) => bail!("give a proof file or --since SAVED_CHECKPOINT"),
    };
    report(verdict)
}

/// The server's proof that its ledger today extends the tree of `saved`, made to stand on
/// `saved` itself: the path the server computed is checked against the root the auditor kept,
/// never against the server's own record of that checkpoint, so a server whose history was
/// rewritten cannot pass.
fn growth_from_server(remote: &Remote, saved: Checkpoint) -> anyhow::Result<ConsistencyProofFile> {
    let answer: RemoteProof = remote.get(
        "/v1/proofs/consistency",
        &[("first", saved.tree_size.to_string())],
    )?;
    let ProofFile::Consistency(proof) = answer.proof else {
        bail!("the server answered a consistency request with another kind of proof");
    };
    Ok(ConsistencyProofFile {
        first_checkpoint: saved,
        ..proof
    })
}

/// Prints the verdict on a proof; the outcome says whether it holds.
fn report(
    verdict: Result<Verified, ledger::ledger_proof::ProofFileError>,
) -> anyhow::Result<Outcome> {
    match verdict {
        Ok(Verified::Inclusion {
            leaf_index,
            event_hash,
            checkpoint,
        }) => {
            say!(
                "valid: event {event_hash} is seq {leaf_index} of the {} events signed at {} by key {}",
                checkpoint.tree_size,
                checkpoint.time,
                checkpoint.key_fingerprint
            );
            Ok(Outcome::Passed)
        }
        Ok(Verified::Consistency { first, second }) => {
            say!(
                "valid: the {} events signed at {} are the first {} of the {} signed at {}; the ledger only grew",
                first.tree_size,
                first.time,
                first.tree_size,
                second.tree_size,
                second.time
            );
            Ok(Outcome::Passed)
        }
        Ok(other) => {
            say!("valid: {other:?}");
            Ok(Outcome::Passed)
        }
        Err(e) => {
            say!("INVALID: {e}");
            Ok(Outcome::Failed)
        }
    }
}
