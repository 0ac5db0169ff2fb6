//! The append runs of `bench ledger` and their baselines: one writer, then many, each followed
//! by raw file appends and raw sled inserts with the same syncs.

use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, ensure};
use ledger::Ledger;

use super::baseline::{FileSync, SledSync};
use super::frames::{self, Grouping};
use super::open_ledger;
use super::workload::{Rng, append_request};
use crate::commands::bench::phase;

/// Alternating rounds of appends and their baselines (fewer when there are fewer appends).
pub(super) const APPEND_ROUNDS: usize = 5;

/// Time spent by the ledger and by each baseline on the same events with the same syncs.
#[derive(Debug)]
pub(super) struct Timed {
    pub(super) ledger: Duration,
    pub(super) file: Duration,
    pub(super) sled: Duration,
    /// How the ledger's frames grouped the events.
    pub(super) grouping: Grouping,
}

/// What the append rounds measured.
#[derive(Debug)]
pub(super) struct Appends {
    pub(super) rounds: usize,
    /// The single writer.
    pub(super) one: Timed,
    /// The concurrent writers.
    pub(super) many: Timed,
    /// Every concurrent append's latency, sorted.
    pub(super) latencies: Vec<Duration>,
    /// Entries the ledger wrote to its checkpoint log while appending.
    pub(super) checkpoint_syncs: u64,
    /// Mean stored size of an event, from the log.
    pub(super) stored_event_bytes: f64,
    /// Size of the baselines' values: the mean stored event, rounded.
    pub(super) value_bytes: usize,
}

/// The append runs and their baselines, in alternating rounds: on a machine shared with other
/// work, a burst of someone else's disk traffic then slows the ledger and its baselines alike
/// instead of whichever happened to run at that moment. Each round: the single writer, its
/// baselines, the concurrent writers, their baselines. The ledger is closed before each
/// baseline so that its background index flush never overlaps one.
pub(super) fn run_appends(
    root: &Path,
    ledger_dir: &Path,
    writers: usize,
    sequential: u64,
    concurrent: u64,
) -> anyhow::Result<Appends> {
    let rounds = APPEND_ROUNDS.min(sequential as usize).max(1);
    let mut sled_each = SledSync::open(&root.join("sled-each"))?;
    let mut sled_grouped = SledSync::open(&root.join("sled-grouped"))?;
    create_dir(&root.join("file"))?;
    let mut file_each = FileSync::create(&root.join("file/each.log"))?;
    let mut file_grouped = FileSync::create(&root.join("file/grouped.log"))?;
    let mut rng = Rng::new(1);
    let mut one = Timed::default();
    let mut many = Timed::default();
    let mut one_runs = Vec::with_capacity(rounds);
    let mut many_runs = Vec::with_capacity(rounds);
    let mut latencies = Vec::with_capacity(concurrent as usize);
    let mut checkpoint_syncs = 0u64;
    let mut value_bytes = None;

    for round in 0..rounds {
        let share =
            |total: u64| total / rounds as u64 + u64::from((round as u64) < total % rounds as u64);
        phase(&format!("round {} of {rounds}: 1 writer", round + 1));
        let ledger = open_ledger(ledger_dir)?;
        let entries = ledger.checkpoint_entries()?.len();
        let from = ledger.head().size;
        let n = share(sequential);
        one.ledger += append_sequentially(&ledger, n, &mut rng)?;
        let to = ledger.head().size;
        checkpoint_syncs += (ledger.checkpoint_entries()?.len() - entries) as u64;
        ledger.shutdown();
        drop(ledger);
        ensure!(to - from == n, "{n} appends wrote {} events", to - from);
        one_runs.push(from..to);
        let value_bytes = *match &mut value_bytes {
            Some(v) => v,
            None => value_bytes.insert(mean_stored_bytes(ledger_dir)?.round() as usize),
        };
        let each = vec![1; n as usize];
        one.file += file_each.append_grouped(&each, value_bytes, &mut rng)?;
        one.sled += sled_each.insert_grouped(&each, value_bytes, &mut rng)?;

        phase(&format!(
            "round {} of {rounds}: {writers} writers",
            round + 1
        ));
        let ledger = open_ledger(ledger_dir)?;
        let entries = ledger.checkpoint_entries()?.len();
        let from = ledger.head().size;
        let n = share(concurrent);
        let (elapsed, round_latencies) = append_concurrently(&ledger, writers, n)?;
        many.ledger += elapsed;
        latencies.extend(round_latencies);
        let to = ledger.head().size;
        checkpoint_syncs += (ledger.checkpoint_entries()?.len() - entries) as u64;
        ledger.shutdown();
        drop(ledger);
        ensure!(to - from == n, "{n} appends wrote {} events", to - from);
        many_runs.push(from..to);
        // The baselines replay the groups this round's frames hold, frame by frame.
        let groups: Vec<u64> = frames::read_log(&ledger_dir.join("log"))?
            .iter()
            .filter(|f| (from..to).contains(&f.first_seq))
            .map(|f| f.events)
            .collect();
        many.file += file_grouped.append_grouped(&groups, value_bytes, &mut rng)?;
        many.sled += sled_grouped.insert_grouped(&groups, value_bytes, &mut rng)?;
    }

    let frames = frames::read_log(&ledger_dir.join("log"))?;
    one.grouping = Grouping::of(&frames, &one_runs);
    many.grouping = Grouping::of(&frames, &many_runs);
    ensure!(
        one.grouping.events == sequential && many.grouping.events == concurrent,
        "the log's frames hold {} and {} events, but {sequential} and {concurrent} were appended",
        one.grouping.events,
        many.grouping.events
    );
    let stored: u64 = frames.iter().map(|f| f.event_bytes).sum();
    let events: u64 = frames.iter().map(|f| f.events).sum();
    latencies.sort();
    Ok(Appends {
        rounds,
        one,
        many,
        latencies,
        checkpoint_syncs,
        stored_event_bytes: stored as f64 / events.max(1) as f64,
        value_bytes: value_bytes.unwrap_or(0),
    })
}

impl Default for Timed {
    fn default() -> Self {
        Timed {
            ledger: Duration::ZERO,
            file: Duration::ZERO,
            sled: Duration::ZERO,
            grouping: Grouping {
                syncs: 0,
                events: 0,
                largest: 0,
            },
        }
    }
}

/// The mean stored size of the events in the log so far.
fn mean_stored_bytes(ledger_dir: &Path) -> anyhow::Result<f64> {
    let frames = frames::read_log(&ledger_dir.join("log"))?;
    let stored: u64 = frames.iter().map(|f| f.event_bytes).sum();
    let events: u64 = frames.iter().map(|f| f.events).sum();
    ensure!(events > 0, "the log holds no events");
    Ok(stored as f64 / events as f64)
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// One writer, each append acknowledged before the next. The time the appends took.
fn append_sequentially(ledger: &Ledger, appends: u64, rng: &mut Rng) -> anyhow::Result<Duration> {
    let mut timed = Duration::ZERO;
    for _ in 0..appends {
        // The payload is made off the clock: it is the caller's work, not the ledger's.
        let request = append_request("bench-sequential", rng);
        let started = Instant::now();
        ledger.append(request).context("append")?;
        timed += started.elapsed();
    }
    Ok(timed)
}

/// `writers` threads appending `appends` events between them, each to a stream of its own, all
/// released at once. The time from their release to the last acknowledgement, and every
/// append's latency.
pub(in crate::commands::bench) fn append_concurrently(
    ledger: &Ledger,
    writers: usize,
    appends: u64,
) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let start = Barrier::new(writers + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let share =
                    appends / writers as u64 + u64::from((w as u64) < appends % writers as u64);
                let ledger = ledger.clone();
                let start = &start;
                s.spawn(move || -> anyhow::Result<Vec<Duration>> {
                    let stream = format!("bench-writer-{w:04}");
                    // Each writer its own payloads; the seed also depends on how much was
                    // appended before, so that no round repeats another's bytes.
                    let mut rng = Rng::new((ledger.head().size << 16) | w as u64);
                    let mut latencies = Vec::with_capacity(share as usize);
                    start.wait();
                    for _ in 0..share {
                        let request = append_request(&stream, &mut rng);
                        let started = Instant::now();
                        ledger.append(request).context("append")?;
                        latencies.push(started.elapsed());
                    }
                    Ok(latencies)
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        let mut latencies = Vec::with_capacity(appends as usize);
        for handle in handles {
            let writer = handle
                .join()
                .map_err(|_| anyhow!("a writer thread panicked"))?;
            latencies.extend(writer?);
        }
        Ok((started.elapsed(), latencies))
    })
}
