//! Integration tests of the ledger, in one test binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod append;
mod bundle;
mod concurrency;
mod content;
mod crash;
mod fuzz_regressions;
mod postgres;
mod postgres_tls;
mod proofs;
mod sim;
mod subscribe;

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use ledger::{
    AppendRequest, Causation, Digest, ExpectedVersion, Idempotency, Ledger, LedgerOptions,
    NewEvent, SteppingClock,
};

/// When the test clock starts.
pub fn start_time() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(1_750_000_000, 0).unwrap()
}

/// Options with a deterministic clock and ids.
pub fn options(seed: u64) -> LedgerOptions {
    options_at(start_time(), seed)
}

/// [`options`] with a clock that starts at `start` and steps a millisecond a reading.
pub fn options_at(start: DateTime<Utc>, seed: u64) -> LedgerOptions {
    LedgerOptions {
        clock: Arc::new(SteppingClock::new(start, 1_000)),
        id_seed: Some(seed),
        ..LedgerOptions::default()
    }
}

/// [`options`] without periodic checkpoints: no signed tree covers the last frames unless a
/// test signs one, as after a power loss within a checkpoint interval.
pub fn quiet(seed: u64) -> LedgerOptions {
    LedgerOptions {
        checkpoint_interval: None,
        checkpoint_every_events: None,
        ..options(seed)
    }
}

/// `options` whose segments roll over every few appends.
pub fn small_segments(options: LedgerOptions) -> LedgerOptions {
    LedgerOptions {
        limits: ledger::Limits {
            segment_bytes_max: 4096,
            ..ledger::Limits::default()
        },
        ..options
    }
}

/// Fails unless every event was recorded no earlier than the one before it.
pub fn assert_times_never_decrease(events: &[ledger::RecordedEvent]) {
    for pair in events.windows(2) {
        assert!(
            pair[1].recorded_at >= pair[0].recorded_at,
            "seq {} was recorded at {}, before seq {} at {}",
            pair[1].seq,
            pair[1].recorded_at,
            pair[0].seq,
            pair[0].recorded_at
        );
    }
}

/// The log's segment files in `dir`, in seq order.
pub fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(dir.join("log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    found.sort();
    found
}

/// A ledger over `dir` with the test options.
pub fn open(dir: &Path) -> Ledger {
    Ledger::open(dir, options(1)).expect("ledger opens")
}

/// An event of `kind` carrying `payload`.
pub fn event(kind: &str, payload: &[u8]) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        payload: payload.to_vec(),
        causation: Vec::new(),
    }
}

/// An append of one event per payload to `stream`.
pub fn request(stream: &str, expected: ExpectedVersion, payloads: &[&[u8]]) -> AppendRequest {
    AppendRequest {
        stream: stream.into(),
        expected,
        actor: "tester".into(),
        events: payloads.iter().map(|p| event("noted", p)).collect(),
        idempotency: None,
        content: Vec::new(),
    }
}

/// `request` with an idempotency key.
pub fn keyed(mut request: AppendRequest, key: &str) -> AppendRequest {
    let mut hasher = blake3::Hasher::new();
    hasher.update(request.stream.as_bytes());
    for e in &request.events {
        hasher.update(&e.payload);
    }
    request.idempotency = Some(Idempotency {
        key: key.into(),
        fingerprint: Digest(*hasher.finalize().as_bytes()),
    });
    request
}

/// `event` naming `causes`.
pub fn caused_by(mut event: NewEvent, causes: &[Causation]) -> NewEvent {
    event.causation = causes.to_vec();
    event
}
