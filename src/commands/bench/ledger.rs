//! `research-ledger bench ledger`: how fast the ledger appends durably, replays, verifies and
//! proves on this machine, next to raw sled and raw blake3 measured in the same run.
//!
//! The run, in order, with nothing measured running beside anything else it does:
//!
//! 1. a few alternating rounds of: one writer appending, each append acknowledged (synced)
//!    before the next; raw file writes and raw sled inserts with one sync each; many writer
//!    threads appending at once, sharing syncs through the ledger's group commit; the frames
//!    of the log counted, which says how many events each sync carried; raw file writes and
//!    raw sled inserts grouped exactly as those frames were;
//! 2. the ledger reopened and replayed, with and without full verification, a few times;
//! 3. inclusion proofs generated against a checkpoint covering every event, and verified;
//! 4. raw blake3 on one core.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use ledger::{Ledger, LedgerOptions};
use ledger_proof::{ProofFile, Verified, verify_proof_file};

use super::baseline::{FileSync, SledSync, blake3_rate};
use super::frames::{self, Grouping};
use super::report::{Baselines, Figures, GroupCommit, Latency, Parameters, Ratio, Report, Syncs};
use super::workload::{PAYLOAD_BYTES, Rng, append_request, median, quantile, rate};
use crate::Outcome;

/// The single writer appends this fraction of `--events`: at one sync per event it is by far
/// the slowest run, and a tenth is enough for a steady rate.
const SEQUENTIAL_SHARE: u64 = 10;
/// Alternating rounds of appends and their baselines (fewer when there are fewer appends).
const APPEND_ROUNDS: usize = 5;
/// The ledger is reopened and replayed at least this many times, and the median round is
/// reported...
const REPLAY_ROUNDS_MIN: usize = 3;
/// ...and until the rounds have taken this long together, so that a small ledger, replayed in
/// a few milliseconds, is still measured over enough time to be steady...
const REPLAY_DURATION_MIN: Duration = Duration::from_secs(1);
/// ...but never more than this many times.
const REPLAY_ROUNDS_MAX: usize = 50;
/// Most inclusion proofs generated and verified.
const PROOFS_MAX: u64 = 5_000;
/// How long the blake3 baseline runs.
const BLAKE3_DURATION: Duration = Duration::from_secs(1);
/// The ratio to the same-sync sled baseline that concurrent durable appends aim for.
const CONCURRENT_APPENDS_TARGET: f64 = 0.5;
/// The ratio to blake3 that replay with full verification aims for.
const REPLAY_VERIFY_TARGET: f64 = 0.25;

/// Arguments of `bench ledger`. The benchmark never touches `--data-dir`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,

    /// Events the concurrent writers append together; the single writer appends a tenth as
    /// many (at least one). Everything else scales with the ledger this builds.
    #[arg(long, value_name = "N", default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    events: u64,

    /// Concurrent writer threads.
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u16).range(1..=4096))]
    writers: u16,

    /// Write into this directory (new or empty) and leave what was written there; by default a
    /// temporary directory, removed afterwards.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Where the run writes: a temporary directory removed on drop, or one the user chose.
enum Place {
    Temporary(tempfile::TempDir),
    Kept(PathBuf),
}

impl Place {
    fn new(dir: Option<&Path>) -> anyhow::Result<Place> {
        match dir {
            None => Ok(Place::Temporary(
                tempfile::Builder::new()
                    .prefix("research-ledger-bench-")
                    .tempdir()
                    .context("cannot create a temporary directory")?,
            )),
            Some(dir) => {
                if dir.exists() {
                    let mut entries = std::fs::read_dir(dir)
                        .with_context(|| format!("cannot read {}", dir.display()))?;
                    // A ledger or anything else already there must not be mixed with, or
                    // mistaken for, what the benchmark writes.
                    if entries.next().is_some() {
                        bail!(
                            "{} is not empty; give a new or empty directory for the benchmark",
                            dir.display()
                        );
                    }
                } else {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                }
                Ok(Place::Kept(dir.to_owned()))
            }
        }
    }

    fn path(&self) -> &Path {
        match self {
            Place::Temporary(t) => t.path(),
            Place::Kept(p) => p,
        }
    }
}

/// Says what the run is doing, on a terminal only: the report on stdout stays clean.
fn phase(what: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("{what}…");
    }
}

pub(super) fn run(args: &Args) -> anyhow::Result<Outcome> {
    let place = Place::new(args.dir.as_deref())?;
    let root = place.path();
    let ledger_dir = root.join("ledger");
    let writers = usize::from(args.writers);
    let sequential = (args.events / SEQUENTIAL_SHARE).max(1);
    let concurrent = args.events;
    let appends = run_appends(root, &ledger_dir, writers, sequential, concurrent)?;
    let size = sequential + concurrent;

    phase("replaying");
    let mut verify_rates = Vec::new();
    let mut replay_rates = Vec::new();
    let mut replaying = Duration::ZERO;
    let mut reopened = None;
    while verify_rates.len() < REPLAY_ROUNDS_MIN
        || (replaying < REPLAY_DURATION_MIN && verify_rates.len() < REPLAY_ROUNDS_MAX)
    {
        // Drop the previous round's ledger first: the directory is locked while one is open.
        drop(reopened.take());
        let ledger = open(&ledger_dir)?;
        let (verify_rate, verify_time) = verify_from_scratch(&ledger, size)?;
        let (replay_rate, replay_time) = replay(&ledger, size)?;
        verify_rates.push(verify_rate);
        replay_rates.push(replay_rate);
        replaying += verify_time + replay_time;
        reopened = Some(ledger);
    }
    let replay_rounds = verify_rates.len();
    let ledger = reopened.ok_or_else(|| anyhow!("no replay round ran"))?;

    phase("inclusion proofs");
    let proofs = size.min(PROOFS_MAX);
    let (generated, verified, checkpoint_tree_size) = prove(&ledger, proofs)?;
    ledger.shutdown();
    drop(ledger);

    phase("raw blake3");
    let blake3 = blake3_rate(PAYLOAD_BYTES, BLAKE3_DURATION);

    let figures = Figures {
        durable_appends_1_writer_per_s: rate(sequential, appends.one.ledger),
        durable_appends_concurrent_per_s: rate(concurrent, appends.many.ledger),
        replay_verify_events_per_s: median(verify_rates),
        replay_events_per_s: median(replay_rates),
        inclusion_proofs_generated_per_s: generated,
        inclusion_proofs_verified_per_s: verified,
    };
    let baselines = Baselines {
        file_sync_each_appends_per_s: rate(sequential, appends.one.file),
        file_sync_grouped_appends_per_s: rate(concurrent, appends.many.file),
        sled_sync_each_inserts_per_s: rate(sequential, appends.one.sled),
        sled_sync_grouped_inserts_per_s: rate(concurrent, appends.many.sled),
        blake3_hashes_per_s: blake3,
    };
    let ratios = vec![
        Ratio::new(
            (
                "durable_appends_1_writer_per_s",
                figures.durable_appends_1_writer_per_s,
            ),
            (
                "sled_sync_each_inserts_per_s",
                baselines.sled_sync_each_inserts_per_s,
            ),
            None,
        ),
        Ratio::new(
            (
                "durable_appends_1_writer_per_s",
                figures.durable_appends_1_writer_per_s,
            ),
            (
                "file_sync_each_appends_per_s",
                baselines.file_sync_each_appends_per_s,
            ),
            None,
        ),
        Ratio::new(
            (
                "durable_appends_concurrent_per_s",
                figures.durable_appends_concurrent_per_s,
            ),
            (
                "sled_sync_grouped_inserts_per_s",
                baselines.sled_sync_grouped_inserts_per_s,
            ),
            Some(CONCURRENT_APPENDS_TARGET),
        ),
        Ratio::new(
            (
                "durable_appends_concurrent_per_s",
                figures.durable_appends_concurrent_per_s,
            ),
            (
                "file_sync_grouped_appends_per_s",
                baselines.file_sync_grouped_appends_per_s,
            ),
            None,
        ),
        Ratio::new(
            (
                "replay_verify_events_per_s",
                figures.replay_verify_events_per_s,
            ),
            ("blake3_hashes_per_s", baselines.blake3_hashes_per_s),
            Some(REPLAY_VERIFY_TARGET),
        ),
        Ratio::new(
            ("replay_events_per_s", figures.replay_events_per_s),
            ("blake3_hashes_per_s", baselines.blake3_hashes_per_s),
            None,
        ),
    ];
    let syncs = |g: &Grouping| Syncs {
        syncs: g.syncs,
        events: g.events,
        events_per_sync: g.events_per_sync(),
        largest: g.largest,
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let latencies = &appends.latencies;
    let report = Report {
        bench: "ledger",
        parameters: Parameters {
            payload_bytes: PAYLOAD_BYTES,
            stored_event_bytes: appends.stored_event_bytes,
            sequential_appends: sequential,
            concurrent_appends: concurrent,
            writers,
            append_rounds: appends.rounds,
            streams: "each writer appends to a stream of its own",
            expected_version: "any",
            replayed_events: size,
            replay_rounds,
            proofs,
            checkpoint_tree_size,
            dir: root.display().to_string(),
            dir_kept: matches!(place, Place::Kept(_)),
        },
        figures,
        baselines,
        ratios,
        group_commit: GroupCommit {
            sequential: syncs(&appends.one.grouping),
            concurrent: syncs(&appends.many.grouping),
            concurrent_latency_ms: Latency {
                p50: ms(quantile(latencies, 0.5)),
                p99: ms(quantile(latencies, 0.99)),
                max: ms(quantile(latencies, 1.0)),
            },
            checkpoint_syncs: appends.checkpoint_syncs,
        },
        notes: notes(appends.value_bytes, appends.checkpoint_syncs, replay_rounds),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(Outcome::Passed)
}

/// Time spent by the ledger and by each baseline on the same events with the same syncs.
#[derive(Debug)]
struct Timed {
    ledger: Duration,
    file: Duration,
    sled: Duration,
    /// How the ledger's frames grouped the events.
    grouping: Grouping,
}

/// What the append rounds measured.
#[derive(Debug)]
struct Appends {
    rounds: usize,
    one: Timed,
    many: Timed,
    /// Every concurrent append's latency, sorted.
    latencies: Vec<Duration>,
    checkpoint_syncs: u64,
    stored_event_bytes: f64,
    /// Size of the baselines' values: the mean stored event, rounded.
    value_bytes: usize,
}

/// The append runs and their baselines, in alternating rounds: on a machine shared with other
/// work, a burst of someone else's disk traffic then slows the ledger and its baselines alike
/// instead of whichever happened to run at that moment. Each round: the single writer, its
/// baselines, the concurrent writers, their baselines. The ledger is closed before each
/// baseline so that its background index flush never overlaps one.
fn run_appends(
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
        let ledger = open(ledger_dir)?;
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
        let ledger = open(ledger_dir)?;
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

fn open(dir: &Path) -> anyhow::Result<Ledger> {
    Ledger::open(
        dir,
        LedgerOptions {
            lock_note: Some(format!(
                "research-ledger bench ledger (pid {})",
                std::process::id()
            )),
            ..LedgerOptions::default()
        },
    )
    .with_context(|| format!("cannot open the ledger in {}", dir.display()))
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
fn append_concurrently(
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

/// `verify_from_scratch` on a freshly opened ledger. Events per second, and the time taken.
fn verify_from_scratch(ledger: &Ledger, size: u64) -> anyhow::Result<(f64, Duration)> {
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
fn replay(ledger: &Ledger, size: u64) -> anyhow::Result<(f64, Duration)> {
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
fn prove(ledger: &Ledger, proofs: u64) -> anyhow::Result<(f64, f64, u64)> {
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

/// What a reader needs to interpret the figures.
fn notes(value_bytes: usize, checkpoint_syncs: u64, replay_rounds: usize) -> Vec<String> {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    vec![
        format!(
            "Appends carry one event of {PAYLOAD_BYTES} payload bytes and expect any version. The single writer waits for each acknowledgement (the segment's fdatasync) before the next append; the concurrent writers each append to a stream of their own, through the blocking append, all released at once. Rates exclude opening the ledger and making payloads."
        ),
        format!(
            "Appends and their baselines alternate in {APPEND_ROUNDS} rounds (fewer for very few appends) and each rate pools its rounds, so that other work on the machine weighs on the ledger and its baselines alike."
        ),
        format!(
            "Syncs are counted from the frames in the log's segment files: each frame is one write and one fdatasync. The checkpoint log added {checkpoint_syncs} more syncs during the appends (the default periodic checkpoints)."
        ),
        format!(
            "Raw file baselines: {value_bytes}-byte records (the mean stored event, envelope and hash included) appended to one file by one thread, each group (one record, or as many as each of the ledger's frames held, frame by frame) with one write and one fdatasync: the system calls of the ledger's log and nothing else, the floor under any durable append on this disk."
        ),
        format!(
            "Raw sled baselines: sled 0.34 with its background flusher off, {value_bytes}-byte values under 8-byte keys, one thread, grouped as the file baselines are (one insert, or one atomic batch per frame of the ledger). After each group: flush(), which ends in sync_file_range and is not durable by itself, then fsync of sled's db file, of any snap.* file and blobs/ file, of blobs/ and of the directory, so that a group is as durable as an acknowledged append. No chaining, hashing, indexing or queueing."
        ),
        format!(
            "Replay: the ledger is closed and reopened before each of {replay_rounds} rounds (at least {REPLAY_ROUNDS_MIN}, and for at least {} s together) and the median round is reported. Its files were just written, so they are read from the page cache: these are processor figures, not disk reads. Replay + full verify is verify_from_scratch: every event decoded and re-hashed, every link and stream version checked, the Merkle tree rebuilt and compared with every signed root, every checkpoint signature checked. Plain replay is read_range, which decodes each event and checks its own hash, folded over the payloads.",
            REPLAY_DURATION_MIN.as_secs()
        ),
        format!(
            "blake3: one thread hashing distinct {PAYLOAD_BYTES}-byte messages for {} s. Verification hashes each stored event (about {value_bytes} bytes) and adds two Merkle hashes per event.",
            BLAKE3_DURATION.as_secs()
        ),
        "Proofs: inclusion_proof for pseudo-random seqs against one checkpoint covering every event, written just before; then verify_proof_file with the ledger's public key (the checkpoint's Ed25519 signature and the RFC 9162 path).".to_owned(),
        format!(
            "Measured on {cores} cores as this machine had them, shared with whatever else ran: compare ratios between machines, not rates."
        ),
    ]
}
