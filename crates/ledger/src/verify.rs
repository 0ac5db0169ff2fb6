//! Verification: walk the chain and name the first seq that is not what it should be.
//!
//! The verified prefix is remembered, so verifying a running ledger again checks only what was
//! appended since; [`Ledger::verify_from_scratch`] always starts at seq 0. A failed
//! verification stops further appends: writing on after the record is found damaged would
//! bury the damage under new events.

use std::collections::HashMap;

use serde::Serialize;

use crate::chain::{ChainBreak, ChainChecker};
use crate::envelope::Digest;
use crate::error::ReadError;
use crate::ledger::Ledger;
use crate::storage::StorageError;

/// How many events verification reads at a time.
const VERIFY_CHUNK_EVENTS: usize = 4096;

/// The prefix of the log already verified.
#[derive(Debug, Default, Clone)]
pub(crate) struct Verified {
    pub(crate) size: u64,
    pub(crate) last_hash: Digest,
    pub(crate) versions: HashMap<String, u64>,
}

/// What verification found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Events in the ledger when verification ran.
    pub size: u64,
    /// Hash of the last event verified.
    pub head_hash: Digest,
    /// The first seq this run checked (0 from scratch; the end of the verified prefix
    /// otherwise).
    pub checked_from: u64,
    /// How many events this run checked.
    pub checked: u64,
    /// The first problem, if any.
    pub failure: Option<VerifyFailure>,
}

impl VerifyReport {
    /// True when everything checked.
    pub fn is_intact(&self) -> bool {
        self.failure.is_none()
    }
}

/// The first seq that is not what it should be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyFailure {
    /// The seq.
    pub seq: u64,
    /// Why, for an auditor.
    pub problem: String,
}

impl Ledger {
    /// Verifies what was appended since the last verification.
    pub fn verify(&self) -> VerifyReport {
        self.run_verify(false, &mut |_, _| {})
    }

    /// Verifies the whole log from seq 0, calling `progress(done, total)` along the way.
    pub fn verify_from_scratch(&self, progress: &mut dyn FnMut(u64, u64)) -> VerifyReport {
        self.run_verify(true, progress)
    }

    fn run_verify(&self, from_scratch: bool, progress: &mut dyn FnMut(u64, u64)) -> VerifyReport {
        let core = self.core();
        let mut verified = core.verified.lock().unwrap_or_else(|p| p.into_inner());
        if from_scratch {
            *verified = Verified::default();
        }
        let size = core.storage.head().size;
        let start = verified.size;
        let mut checker = ChainChecker::new(verified.size, verified.last_hash);
        checker.versions = std::mem::take(&mut verified.versions);
        let mut failure = None;
        while checker.next_seq < size {
            let raw = match core
                .storage
                .read_range(checker.next_seq, VERIFY_CHUNK_EVENTS)
            {
                Ok(raw) => raw,
                Err(e) => {
                    failure = Some(read_failure(checker.next_seq, e));
                    break;
                }
            };
            if raw.is_empty() {
                failure = Some(VerifyFailure {
                    seq: checker.next_seq,
                    problem: format!(
                        "the log ends at seq {} but its head says {size} events",
                        checker.next_seq
                    ),
                });
                break;
            }
            for event in &raw {
                if event.seq >= size {
                    break;
                }
                let mut base = |_: &str| Ok(0);
                if let Err(ChainBreak { seq, problem }) = checker.check(&event.bytes, &mut base) {
                    failure = Some(VerifyFailure { seq, problem });
                    break;
                }
            }
            if failure.is_some() {
                break;
            }
            progress(checker.next_seq, size);
        }
        if failure.is_none()
            && let Some(problem) = core.storage.problems().into_iter().next()
        {
            failure = Some(VerifyFailure {
                seq: problem.seq.unwrap_or(checker.next_seq),
                problem: problem.detail,
            });
        }
        let report = VerifyReport {
            size,
            head_hash: checker.last_hash,
            checked_from: start,
            checked: checker.next_seq - start,
            failure,
        };
        if let Some(f) = &report.failure {
            core.poison(format!(
                "verification failed at seq {}: {}",
                f.seq, f.problem
            ));
        } else {
            *verified = Verified {
                size: checker.next_seq,
                last_hash: checker.last_hash,
                versions: checker.versions,
            };
        }
        report
    }
}

fn read_failure(at: u64, e: StorageError) -> VerifyFailure {
    match e {
        StorageError::Corrupt { seq, detail } => VerifyFailure {
            seq: seq.unwrap_or(at),
            problem: detail,
        },
        other => VerifyFailure {
            seq: at,
            problem: ReadError::Storage(other).to_string(),
        },
    }
}
