//! The reads that serve checkpoints, on a checkpoint log of a few entries and again once it
//! holds many: a server checkpoints every second while it is written, so after a day of
//! writes its log holds some 86,000 checkpoints, and `GET /checkpoint`, `/health` and every
//! proof are asked of it all the time. Each read's rate on the long log is reported beside its
//! rate on the short one, measured in the same run on the same ledger: a ratio near 1 says the
//! read does not grow with the log. So is an open of the ledger, which checks the checkpoint
//! log and so reads every entry of it.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use ledger::{Ledger, LedgerOptions, NewEvent};
use serde::Serialize;

use super::workload::{PAYLOAD_BYTES, Rng, append_request};
use crate::commands::bench::stats::{median, rate};

/// The short log the reads are first measured on: its entries (the key introduced, then
/// checkpoints).
pub(super) const SHORT_LOG_ENTRIES: u64 = 16;
/// Events appended at once while the ledger is filled.
const BULK_EVENTS: u64 = 256;
/// The reads take turns in this many rounds, and each read's median round is reported: what
/// else the ledger does just after it was written (its index catching up) falls on all alike.
const READ_ROUNDS: usize = 7;
/// In each round, each read is repeated for at least this long...
const READ_DURATION_MIN: Duration = Duration::from_millis(60);
/// ...and at least this many times.
const READS_MIN: u64 = 10;
/// The ledger is closed and opened again this many times on each length of the log, and the
/// median open reported.
const OPENS: usize = 5;

/// Rates of the reads on one length of the checkpoint log.
#[derive(Debug, Clone, Serialize)]
pub(super) struct ReadRates {
    /// Entries of the checkpoint log when they were measured.
    pub(super) entries: u64,
    /// `checkpoint_note`: the latest checkpoint as `GET /checkpoint` serves it.
    pub(super) notes_per_s: f64,
    /// `inclusion_proof` of a pseudo-random event against the latest checkpoint.
    pub(super) proofs_per_s: f64,
    /// `latest_checkpoint` and `recovery_notes`: what `/health` reads of the ledger.
    pub(super) health_per_s: f64,
    /// `Ledger::open` after a clean close, its checks on open included: opens per second.
    pub(super) opens_per_s: f64,
}

/// The reads on the short log and on the long one.
#[derive(Debug, Clone, Serialize)]
pub(super) struct CheckpointReads {
    pub(super) short: ReadRates,
    pub(super) long: ReadRates,
    /// How long writing the long log took, in seconds (an append and a checkpoint at a time).
    pub(super) written_secs: f64,
}

impl CheckpointReads {
    /// Each read: what it is, its unit, its rate on the short log and on the long one, and the
    /// long log's rate over the short log's.
    pub(super) fn rows(&self) -> [(&'static str, &'static str, f64, f64, f64); 4] {
        let row = |label, unit, short: f64, long: f64| {
            (
                label,
                unit,
                short,
                long,
                long / short.max(f64::MIN_POSITIVE),
            )
        };
        [
            row(
                "checkpoint note (GET /checkpoint)",
                "reads/s",
                self.short.notes_per_s,
                self.long.notes_per_s,
            ),
            row(
                "inclusion proof, latest checkpoint",
                "reads/s",
                self.short.proofs_per_s,
                self.long.proofs_per_s,
            ),
            row(
                "what /health reads",
                "reads/s",
                self.short.health_per_s,
                self.long.health_per_s,
            ),
            row(
                "open after a clean close",
                "opens/s",
                self.short.opens_per_s,
                self.long.opens_per_s,
            ),
        ]
    }
}

/// Writes a ledger in `dir` of `entries` events, then one event and one checkpoint at a time
/// until its checkpoint log holds `entries`, measuring the reads when it holds
/// [`SHORT_LOG_ENTRIES`] and at the end. So the short log's reads are made on a tree of about
/// `entries` events and the long log's on one of about twice as many: a proof's path is one
/// node longer, and the checkpoint log is `entries / 16` times as long.
pub(super) fn measure(dir: &Path, entries: u64) -> anyhow::Result<CheckpointReads> {
    ensure!(
        entries > SHORT_LOG_ENTRIES,
        "the long checkpoint log must hold more than {SHORT_LOG_ENTRIES} entries"
    );
    let ledger = open(dir)?;
    let mut rng = Rng::new(29);
    let mut appended = 0;
    while appended < entries {
        let mut request = append_request("bulk", &mut rng);
        let event = request.events.remove(0);
        let n = (entries - appended).min(BULK_EVENTS);
        request.events = (0..n)
            .map(|_| NewEvent {
                payload: rng.bytes(PAYLOAD_BYTES),
                ..event.clone()
            })
            .collect();
        ledger.append(request).context("append")?;
        appended += n;
    }
    // The key's introduction is the first entry.
    let mut written = ledger.checkpoint_entries()?.len() as u64;
    grow(&ledger, &mut rng, &mut written, SHORT_LOG_ENTRIES)?;
    let (ledger, opens) = reopen(dir, ledger)?;
    let short = read_rates(&ledger, SHORT_LOG_ENTRIES, opens)?;
    let started = Instant::now();
    grow(&ledger, &mut rng, &mut written, entries)?;
    let written_secs = started.elapsed().as_secs_f64();
    let (ledger, opens) = reopen(dir, ledger)?;
    let long = read_rates(&ledger, entries, opens)?;
    ensure!(
        ledger.checkpoint_entries()?.len() as u64 == entries,
        "the checkpoint log does not hold the entries written"
    );
    ledger.shutdown();
    Ok(CheckpointReads {
        short,
        long,
        written_secs,
    })
}

/// One event and one checkpoint at a time until the checkpoint log holds `to` entries.
fn grow(ledger: &Ledger, rng: &mut Rng, written: &mut u64, to: u64) -> anyhow::Result<()> {
    while *written < to {
        ledger
            .append(append_request("checkpointed", rng))
            .context("append")?;
        ledger.checkpoint().context("checkpoint")?;
        *written += 1;
    }
    Ok(())
}

fn open(dir: &Path) -> anyhow::Result<Ledger> {
    Ledger::open(
        dir,
        LedgerOptions {
            // Only the checkpoints written here: the log's length is the run's to choose.
            checkpoint_interval: None,
            lock_note: Some(format!(
                "research-ledger bench ledger (pid {})",
                std::process::id()
            )),
            ..LedgerOptions::default()
        },
    )
    .with_context(|| format!("cannot open the ledger in {}", dir.display()))
}

/// Closes `ledger` and opens it again [`OPENS`] times: the ledger last opened, and the median
/// opens per second.
fn reopen(dir: &Path, mut ledger: Ledger) -> anyhow::Result<(Ledger, f64)> {
    let mut rates = Vec::new();
    for _ in 0..OPENS {
        ledger.shutdown();
        // Its files are let go (the lock among them) when the last handle goes.
        drop(ledger);
        let started = Instant::now();
        ledger = open(dir)?;
        rates.push(rate(1, started.elapsed()));
    }
    Ok((ledger, median(rates)))
}

fn read_rates(ledger: &Ledger, entries: u64, opens_per_s: f64) -> anyhow::Result<ReadRates> {
    let size = ledger.head().size;
    let mut rng = Rng::new(31);
    let (mut notes, mut proofs, mut health) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..READ_ROUNDS {
        notes.push(repeat(|| {
            ensure!(ledger.checkpoint_note()?.is_some(), "no checkpoint note");
            Ok(())
        })?);
        proofs.push(repeat(|| {
            ledger.inclusion_proof(rng.below(size), None)?;
            Ok(())
        })?);
        health.push(repeat(|| {
            ensure!(
                ledger.latest_checkpoint()?.is_some(),
                "no latest checkpoint"
            );
            std::hint::black_box(ledger.recovery_notes());
            Ok(())
        })?);
    }
    Ok(ReadRates {
        entries,
        notes_per_s: median(notes),
        proofs_per_s: median(proofs),
        health_per_s: median(health),
        opens_per_s,
    })
}

/// Reads per second of `read`, repeated for at least [`READ_DURATION_MIN`] and
/// [`READS_MIN`] times.
fn repeat(mut read: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut n = 0u64;
    while n < READS_MIN || started.elapsed() < READ_DURATION_MIN {
        read()?;
        n += 1;
    }
    Ok(rate(n, started.elapsed()))
}
