//! The log's side of C2SP `tlog-witness`: `serve --witness URL,VKEY` pushes each new
//! checkpoint, with the consistency proof from the last one the witness cosigned, to every
//! configured witness, and keeps the cosignatures they return in the checkpoint log (where
//! `GET /checkpoint` and export bundles carry them).
//!
//! A thread of its own looks at the latest checkpoint once a second. What a witness last
//! cosigned is known from the cosignatures the checkpoint log keeps; a witness that holds
//! another size answers 409 with it, and the push is made again from there. A witness that
//! refuses (a fork, a bad signature) or cannot be reached is logged and asked again with the
//! next checkpoint: the log never waits for a witness.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ledger::Ledger;
use ledger::ledger_proof::witness::AddCheckpoint;
use ledger::ledger_proof::{Checkpoint, Cosignature, NoteSignature, VerifierKey};

/// One witness: where it listens (its submission prefix) and its verifier key.
#[derive(Debug, Clone)]
pub(crate) struct WitnessTarget {
    pub(crate) url: String,
    pub(crate) key: VerifierKey,
}

impl WitnessTarget {
    /// Parses `URL,VKEY`.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let (url, key) = text
            .split_once(',')
            .ok_or_else(|| anyhow::anyhow!("--witness is URL,VKEY, not {text:?}"))?;
        let key = VerifierKey::parse_typed(key, ledger::ledger_proof::note::TYPE_COSIGNATURE_V1)
            .map_err(|e| anyhow::anyhow!("--witness {text:?}: {e}"))?;
        Ok(Self {
            url: url.trim_end_matches('/').to_owned(),
            key,
        })
    }
}

/// How often the pusher looks for a new checkpoint.
const PUSH_EVERY: Duration = Duration::from_secs(1);
/// Longest one request to a witness may take.
const WITNESS_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `serve` with the pusher pushing beside it, and stops the pusher once `serve` ends.
pub(crate) async fn while_serving<T>(
    ledger: Ledger,
    witnesses: Vec<WitnessTarget>,
    serve: impl std::future::Future<Output = T>,
) -> T {
    let stop = Arc::new(AtomicBool::new(false));
    let pusher = start(ledger, witnesses, Arc::clone(&stop));
    let served = serve.await;
    stop.store(true, Ordering::Relaxed);
    if let Some(pusher) = pusher {
        let _ = pusher.join();
    }
    served
}

/// Starts the pusher; it stops when `stop` is set.
fn start(
    ledger: Ledger,
    witnesses: Vec<WitnessTarget>,
    stop: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    if witnesses.is_empty() {
        return None;
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(WITNESS_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    std::thread::Builder::new()
        .name("witness-pusher".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for witness in &witnesses {
                    if let Err(e) = push_latest(&ledger, &agent, witness) {
                        tracing::warn!(witness = %witness.key.name(), error = %e, "the witness did not cosign");
                    }
                }
                std::thread::sleep(PUSH_EVERY);
            }
        })
        .ok()
}

/// Pushes the latest checkpoint to one witness, if it has not cosigned it.
fn push_latest(
    ledger: &Ledger,
    agent: &ureq::Agent,
    witness: &WitnessTarget,
) -> anyhow::Result<()> {
    let Some((checkpoint, cosignatures)) = ledger.latest_cosigned_checkpoint()? else {
        return Ok(());
    };
    if cosignatures.iter().any(|c| c.witness == witness.key) {
        return Ok(());
    }
    let mut old = ledger
        .last_cosigned_size(&witness.key)?
        .min(checkpoint.tree_size);
    let note = ledger
        .checkpoint_note()?
        .ok_or_else(|| anyhow::anyhow!("no checkpoint note"))?;
    for _ in 0..2 {
        let proof = ledger.consistency_path(old, checkpoint.tree_size)?;
        let body = AddCheckpoint::render(old, &proof, &note);
        let mut response = agent
            .post(format!("{}/add-checkpoint", witness.url))
            .send(body.as_bytes())?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string()?;
        match status {
            200 => return keep(ledger, witness, &checkpoint, &text),
            409 => {
                // The witness holds another size: go again from it, if this log has it.
                let held: u64 = text.trim().parse().map_err(|_| {
                    anyhow::anyhow!("a 409 without the size the witness holds: {text:?}")
                })?;
                if held > checkpoint.tree_size {
                    anyhow::bail!(
                        "the witness holds a tree of {held} events, more than the {} this log signs",
                        checkpoint.tree_size
                    );
                }
                old = held;
            }
            other => anyhow::bail!("HTTP {other}: {}", text.trim()),
        }
    }
    anyhow::bail!("the witness kept answering 409")
}

/// Keeps the witness's cosignature lines of `checkpoint`.
fn keep(
    ledger: &Ledger,
    witness: &WitnessTarget,
    checkpoint: &Checkpoint,
    lines: &str,
) -> anyhow::Result<()> {
    let mut kept = false;
    for line in lines.lines().filter(|l| !l.is_empty()) {
        let signature = NoteSignature::parse_line(line)?;
        if !signature.is_by(&witness.key) {
            continue;
        }
        let cosignature = Cosignature::from_line(&signature, &witness.key, checkpoint)?;
        ledger.record_cosignature(cosignature)?;
        kept = true;
    }
    if !kept {
        anyhow::bail!("the answer holds no cosignature by {}", witness.key.name());
    }
    tracing::info!(witness = %witness.key.name(), tree_size = checkpoint.tree_size, "cosigned");
    Ok(())
}
