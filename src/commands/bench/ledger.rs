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

mod appends;
mod baseline;
mod checkpoint_reads;
mod frames;
mod postgres;
mod reads;
mod report;
mod workload;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow};
use ledger::{Ledger, LedgerOptions};

pub(super) use self::appends::append_concurrently;
use self::appends::{APPEND_ROUNDS, run_appends};
use self::baseline::{blake3_rate, sha256_node_rate};
use self::frames::Grouping;
use self::reads::{prove, replay, verify_from_scratch};
use self::report::{Baselines, Figures, GroupCommit, Latency, Parameters, Ratio, Report, Syncs};
use self::workload::PAYLOAD_BYTES;
use super::stats::{median, quantile, rate};
use super::{Scratch, phase};
use crate::Outcome;

/// The single writer appends this fraction of `--events`: at one sync per event it is by far
/// the slowest run, and a tenth is enough for a steady rate.
const SEQUENTIAL_SHARE: u64 = 10;
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
/// The ratios reported: figure, baseline, and the ratio the product aims for where it has one.
/// Concurrent durable appends aim at half of raw sled with the same syncs; replay with full
/// verification at a quarter of raw blake3 on one core.
const RATIOS: [(&str, &str, Option<f64>); 7] = [
    (
        "durable_appends_1_writer_per_s",
        "sled_sync_each_inserts_per_s",
        None,
    ),
    (
        "durable_appends_1_writer_per_s",
        "file_sync_each_appends_per_s",
        None,
    ),
    (
        "durable_appends_concurrent_per_s",
        "sled_sync_grouped_inserts_per_s",
        Some(0.5),
    ),
    (
        "durable_appends_concurrent_per_s",
        "file_sync_grouped_appends_per_s",
        None,
    ),
    (
        "replay_verify_events_per_s",
        "blake3_hashes_per_s",
        Some(0.25),
    ),
    ("replay_events_per_s", "blake3_hashes_per_s", None),
    (
        "replay_verify_events_per_s",
        "sha256_node_hashes_per_s",
        None,
    ),
];

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

    /// Entries of the long checkpoint log the reads that serve checkpoints are measured on
    /// (a server writing all day checkpoints every second: some 86,000 a day).
    #[arg(long, value_name = "N", default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(checkpoint_reads::SHORT_LOG_ENTRIES + 1..=10_000_000))]
    checkpoints: u64,

    /// Write into this directory (new or empty) and leave what was written there; by default a
    /// temporary directory, removed afterwards.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// `bench ledger --storage-url`: see [`postgres`].
pub(super) fn run_postgres(url: &str, args: &Args) -> anyhow::Result<Outcome> {
    postgres::run(url, args.json, args.events, usize::from(args.writers))
}

pub(super) fn run(args: &Args) -> anyhow::Result<Outcome> {
    let scratch = Scratch::new(args.dir.as_deref())?;
    let root = scratch.path();
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
        let ledger = open_ledger(&ledger_dir)?;
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

    phase("reads that serve checkpoints, as the checkpoint log grows");
    let checkpoint_reads = checkpoint_reads::measure(&root.join("checkpoints"), args.checkpoints)?;

    phase("raw blake3 and SHA-256");
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
        sha256_node_hashes_per_s: sha256_node_rate(BLAKE3_DURATION),
    };
    let ratios = Ratio::all(&figures, &baselines, &RATIOS)?;
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
            dir_kept: scratch.kept(),
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
        checkpoint_reads,
        notes: notes(appends.value_bytes, appends.checkpoint_syncs, replay_rounds),
    };
    if args.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::output::text(&report.to_text());
    }
    Ok(Outcome::Passed)
}

/// How the appends of a run were grouped into syncs.
fn syncs(g: &Grouping) -> Syncs {
    Syncs {
        syncs: g.syncs,
        events: g.events,
        events_per_sync: g.events_per_sync(),
        largest: g.largest,
    }
}

/// Opens (creating if needed) the benchmark's ledger in `dir`, with the product's defaults:
/// the figures are those of the ledger as it ships.
pub(in crate::commands::bench) fn open_ledger(dir: &Path) -> anyhow::Result<Ledger> {
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
            "blake3: one thread hashing distinct {PAYLOAD_BYTES}-byte messages for {} s. Verification hashes each stored event (about {value_bytes} bytes) with blake3 and adds two Merkle hashes per event, SHA-256 of 33 and 65 bytes; SHA-256: one thread hashing distinct 65-byte node inputs for as long.",
            BLAKE3_DURATION.as_secs()
        ),
        "Proofs: inclusion_proof for pseudo-random seqs against one checkpoint covering every event, written just before; then verify_proof_file with the ledger's public key (the checkpoint's Ed25519 signature and the RFC 9162 path).".to_owned(),
        format!(
            "Reads that serve checkpoints: a ledger of its own, filled with --checkpoints events, then written one event and one signed checkpoint at a time; the reads take turns in 7 rounds of at least 60 ms each (the median round reported) when its checkpoint log holds {} entries and again at --checkpoints entries, when its tree is about twice as large (a proof one node longer). Before each length's reads the ledger is closed and opened again 5 times (the median open reported): an open checks the checkpoint log. The ratio is the long log's rate over the short one's: near 1 when a read does not grow with the checkpoint log.",
            checkpoint_reads::SHORT_LOG_ENTRIES
        ),
        format!(
            "Measured on {cores} cores as this machine had them, shared with whatever else ran: compare ratios between machines, not rates."
        ),
    ]
}
