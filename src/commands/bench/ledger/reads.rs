//! The read runs of `bench ledger`: full verification, plain replay and inclusion proofs, each
//! checked as well as timed, so that a figure can never come from a run that did not do its work.

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use ledger::Ledger;
use ledger_proof::{ProofFile, Verified, verify_proof_file};

use super::workload::Rng;
use crate::commands::bench::stats::rate;

/// `verify_from_scratch` on a freshly opened ledger. Events per second, and the time taken.
pub(super) fn verify_from_scratch(ledger: &Ledger, size: u64) -> anyhow::Result<(f64, Duration)> {
    let started = Instant::now();
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    let elapsed = started.elapsed();
    if let Some(failure) = &report.failure {
        bail!(
            "the benchmark's ledger does not verify at seq {}: {}",
            failure.seq,
            failure.problem
        );
    }
    ensure!(
        report.checked == size,
        "verification checked {} of {size} events",
        report.checked
    );
    Ok((rate(report.checked, elapsed), elapsed))
}

/// Every event read with `read_range` (which decodes it and checks its own hash), folded into
/// a sum of payload bytes so that nothing read goes unused. Events per second, and the time
/// taken.
pub(super) fn replay(ledger: &Ledger, size: u64) -> anyhow::Result<(f64, Duration)> {
    let chunk = ledger.limits().read_events_max;
    let started = Instant::now();
    let mut next = 0u64;
    let mut payload_bytes = 0u64;
    while next < size {
        let events = ledger.read_range(next, chunk).context("replay")?;
        ensure!(!events.is_empty(), "replay found nothing at seq {next}");
        for event in &events {
            ensure!(
                event.seq == next,
                "replay read seq {} where {next} was next",
                event.seq
            );
            payload_bytes += event.payload.len() as u64;
            next += 1;
        }
    }
    let elapsed = started.elapsed();
    std::hint::black_box(payload_bytes);
    Ok((rate(size, elapsed), elapsed))
}

/// `proofs` inclusion proofs for pseudo-random events against a checkpoint written now, then
/// each verified with the ledger's public key. Proofs generated and verified per second, and
/// the checkpoint's tree size.
pub(super) fn prove(ledger: &Ledger, proofs: u64) -> anyhow::Result<(f64, f64, u64)> {
    let checkpoint = ledger.checkpoint().context("checkpoint")?;
    let key = ledger.public_key().map_err(anyhow::Error::msg)?;
    let size = checkpoint.tree_size;
    let mut rng = Rng::new(17);
    let seqs: Vec<u64> = (0..proofs).map(|_| rng.below(size)).collect();

    let started = Instant::now();
    let files = seqs
        .iter()
        .map(|&seq| ledger.inclusion_proof(seq, Some(size)))
        .collect::<Result<Vec<_>, _>>()
        .context("inclusion proof")?;
    let generated = rate(proofs, started.elapsed());

    let files: Vec<ProofFile> = files.into_iter().map(ProofFile::Inclusion).collect();
    let started = Instant::now();
    let outcomes = files
        .iter()
        .map(|file| verify_proof_file(file, &key))
        .collect::<Result<Vec<_>, _>>()
        .context("a proof the ledger generated does not verify")?;
    let verified = rate(proofs, started.elapsed());
    for (seq, outcome) in seqs.iter().zip(&outcomes) {
        ensure!(
            matches!(outcome, Verified::Inclusion { leaf_index, .. } if leaf_index == seq),
            "the proof for seq {seq} proves something else"
        );
    }
    Ok((generated, verified, size))
}
