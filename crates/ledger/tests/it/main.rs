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

/// Options with a deterministic clock and ids.
pub fn options(seed: u64) -> LedgerOptions {
    LedgerOptions {
        clock: Arc::new(SteppingClock::new(
            DateTime::<Utc>::from_timestamp(1_750_000_000, 0).unwrap(),
            1_000,
        )),
        id_seed: Some(seed),
        ..LedgerOptions::default()
    }
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
