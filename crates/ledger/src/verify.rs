//! Verification: walk the chain and the tree, check every checkpoint, and name the first seq
//! that is not what it should be.
//!
//! Three things are checked. The hash chain, event by event ([`crate::chain`]). The Merkle tree,
//! recomputed from the event hashes, against the root of every checkpoint and every key
//! rotation at its tree size — this is what catches a log cut short, or rewritten with every
//! hash recomputed, that no longer matches what was signed. And every signature, under the key
//! chain that the checkpoint log itself records.
//!
//! The verified prefix is remembered, so verifying a running ledger again checks only what was
//! appended since; [`Ledger::verify_from_scratch`] always starts at seq 0. A failed
//! verification stops further appends: writing on after the record is found damaged would bury
//! the damage under new events.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;

use ledger_proof::{Blake3, Checkpoint, Frontier, KeyChain, KeyRotation, MerkleHasher, PublicKey};
use serde::{Deserialize, Serialize};

use crate::chain::{ChainBreak, ChainChecker};
use crate::envelope::Digest;
use crate::error::ReadError;
use crate::ledger::Ledger;
use crate::storage::{CheckpointEntry, StorageError};

/// How many events verification reads at a time, between two calls of its progress callback.
const VERIFY_CHUNK_EVENTS: usize = 16_384;

/// The prefix of the log already verified, and how far the checkpoint log was checked.
#[derive(Debug, Default, Clone)]
pub(crate) struct Verified {
    pub(crate) size: u64,
    pub(crate) last_hash: Digest,
    pub(crate) versions: HashMap<String, u64>,
    pub(crate) frontier: Frontier,
    /// Entries of the checkpoint log already checked.
    pub(crate) entries: usize,
}

/// What verification found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Events in the ledger when verification ran.
    pub size: u64,
    /// Hash of the last event verified.
    pub head_hash: Digest,
    /// Root of the Merkle tree over the verified events.
    pub root: Digest,
    /// The first seq this run checked (0 from scratch; the end of the verified prefix
    /// otherwise).
    pub checked_from: u64,
    /// How many events this run checked.
    pub checked: u64,
    /// Checkpoints whose root and signature this run checked.
    pub checkpoints_checked: u64,
    /// Places where the chain of signing keys starts over without a statement from the old key
    /// (an import without it). Not a failure, but an auditor must know.
    pub key_chain_breaks: Vec<String>,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyFailure {
    /// The seq.
    pub seq: u64,
    /// Why, for an auditor.
    pub problem: String,
}

/// A root some entry of the checkpoint log signed for a tree size.
struct SignedRoot {
    entry: usize,
    root: Digest,
}

impl Ledger {
    /// Verifies what was appended (and checkpointed) since the last verification.
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
        let mut frontier = verified.frontier.clone();
        let mut failure: Option<VerifyFailure> = None;
        let mut breaks = Vec::new();

        // The checkpoint log: signatures now, roots as the scan reaches their tree sizes.
        let entries = match core.storage.checkpoint_entries() {
            Ok(entries) => entries,
            Err(e) => {
                let entries_checked = verified.entries;
                return self.finish(
                    &mut verified,
                    checker,
                    frontier,
                    start,
                    size,
                    0,
                    entries_checked,
                    breaks,
                    Some(VerifyFailure {
                        seq: start,
                        problem: format!("the checkpoint log cannot be read: {e}"),
                    }),
                );
            }
        };
        if let Err(problem) = check_signatures(&entries, verified.entries, &mut breaks) {
            failure = Some(VerifyFailure {
                seq: start,
                problem,
            });
        }
        let mut roots: BTreeMap<u64, Vec<SignedRoot>> = BTreeMap::new();
        for (i, entry) in entries.iter().enumerate().skip(verified.entries) {
            let signed = match entry {
                CheckpointEntry::Checkpoint(c) => Some((c.tree_size, c.root)),
                CheckpointEntry::Rotation(r) => Some((r.tree_size, r.root)),
                CheckpointEntry::KeyIntroduced { .. } => None,
            };
            if let Some((tree_size, root)) = signed {
                roots
                    .entry(tree_size)
                    .or_default()
                    .push(SignedRoot { entry: i, root });
            }
        }
        // Roots of sizes inside the prefix verified earlier are checked against the stored
        // tree, whose peaks at the verified size are checked against the recomputed frontier.
        if failure.is_none() && start > 0 {
            match self.root_at(start) {
                Ok(root) if root == frontier.root(&Blake3) => {}
                Ok(root) => {
                    failure = Some(VerifyFailure {
                        seq: start - 1,
                        problem: format!(
                            "the stored Merkle tree has root {root} at size {start}, the events give {}",
                            frontier.root(&Blake3)
                        ),
                    });
                }
                Err(e) => {
                    failure = Some(VerifyFailure {
                        seq: start - 1,
                        problem: format!("the stored Merkle tree cannot be read: {e}"),
                    });
                }
            }
        }
        if failure.is_none() {
            let earlier: Vec<u64> = roots.range(..start).map(|(size, _)| *size).collect();
            for tree_size in earlier {
                let root = if tree_size == 0 {
                    Ok(Blake3.empty_root())
                } else {
                    self.root_at(tree_size).map_err(|e| e.to_string())
                };
                if let Some(f) = compare_roots(&roots, tree_size, root) {
                    failure = Some(f);
                    break;
                }
            }
        }
        if failure.is_none() && start == 0 {
            failure = compare_roots(&roots, 0, Ok(Blake3.empty_root()));
        }

        // The chain and the tree, event by event, each event read in place from storage's
        // buffer: nothing is allocated per event.
        let mut completed = Vec::with_capacity(64);
        while failure.is_none() && checker.next_seq < size {
            let from = checker.next_seq;
            let visited = core
                .storage
                .visit_range(from, VERIFY_CHUNK_EVENTS, &mut |_, bytes| {
                    // Positions are the checker's, not what a frame says: a frame that claims
                    // other seqs is caught by the check of the event's own seq.
                    let seq = checker.next_seq;
                    if seq >= size {
                        return ControlFlow::Break(());
                    }
                    let mut base = |_: &str| Ok(0);
                    let hash = match checker.check(bytes, &mut base) {
                        Ok(event) => event.hash,
                        Err(ChainBreak { seq, problem }) => {
                            failure = Some(self.pinpoint(seq, checker.last_hash, problem));
                            return ControlFlow::Break(());
                        }
                    };
                    completed.clear();
                    if frontier
                        .push_into(&Blake3, hash.as_bytes(), &mut completed)
                        .is_err()
                    {
                        failure = Some(VerifyFailure {
                            seq,
                            problem: "the Merkle tree is full".into(),
                        });
                        return ControlFlow::Break(());
                    }
                    if roots.contains_key(&frontier.size())
                        && let Some(f) =
                            compare_roots(&roots, frontier.size(), Ok(frontier.root(&Blake3)))
                    {
                        failure = Some(f);
                        return ControlFlow::Break(());
                    }
                    ControlFlow::Continue(())
                });
            match visited {
                Err(e) => {
                    failure = Some(read_failure(checker.next_seq, e));
                    break;
                }
                Ok(0) => {
                    failure = Some(VerifyFailure {
                        seq: checker.next_seq,
                        problem: format!(
                            "the log ends at seq {} but its head says {size} events",
                            checker.next_seq
                        ),
                    });
                    break;
                }
                Ok(_) => {}
            }
            progress(checker.next_seq, size);
        }
        if failure.is_none()
            && let Some((&tree_size, signed)) = roots.range(checker.next_seq + 1..).next()
        {
            failure = Some(VerifyFailure {
                seq: checker.next_seq,
                problem: format!(
                    "entry {} of the checkpoint log signs a tree of {tree_size} events, but the log has {}: events from seq {} on were removed",
                    signed.first().map_or(0, |s| s.entry + 1),
                    checker.next_seq,
                    checker.next_seq
                ),
            });
        }
        if failure.is_none()
            && let Some(problem) = core.storage.problems().into_iter().next()
        {
            failure = Some(VerifyFailure {
                seq: problem.seq.unwrap_or(checker.next_seq),
                problem: problem.detail,
            });
        }
        let checkpoints_checked = entries
            .iter()
            .skip(verified.entries)
            .filter(|e| matches!(e, CheckpointEntry::Checkpoint(_)))
            .count() as u64;
        self.finish(
            &mut verified,
            checker,
            frontier,
            start,
            size,
            checkpoints_checked,
            entries.len(),
            breaks,
            failure,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        verified: &mut Verified,
        checker: ChainChecker,
        frontier: Frontier,
        start: u64,
        size: u64,
        checkpoints_checked: u64,
        entries: usize,
        key_chain_breaks: Vec<String>,
        failure: Option<VerifyFailure>,
    ) -> VerifyReport {
        let report = VerifyReport {
            size,
            head_hash: checker.last_hash,
            root: frontier.root(&Blake3),
            checked_from: start,
            checked: checker.next_seq - start,
            checkpoints_checked,
            key_chain_breaks,
            failure,
        };
        if let Some(f) = &report.failure {
            self.core().poison(format!(
                "verification failed at seq {}: {}",
                f.seq, f.problem
            ));
        } else {
            *verified = Verified {
                size: checker.next_seq,
                last_hash: checker.last_hash,
                versions: checker.versions,
                frontier,
                entries,
            };
        }
        report
    }

    /// A chain break at `seq` whose `prev_hash` does not match may have been caused by the
    /// event before it being rewritten with a fresh hash of its own. The stored Merkle leaf of
    /// that event, written when it was appended, tells which.
    fn pinpoint(&self, seq: u64, previous_hash: Digest, problem: String) -> VerifyFailure {
        if seq > 0
            && let Ok(Some(leaf)) = self.core().storage.merkle_node(0, seq - 1)
            && leaf != Blake3.leaf(previous_hash.as_bytes())
        {
            return VerifyFailure {
                seq: seq - 1,
                problem: format!(
                    "the event was rewritten: its hash {previous_hash} is not the one the Merkle tree recorded when it was appended (seq {seq} still links to the original)"
                ),
            };
        }
        VerifyFailure { seq, problem }
    }
}

/// Compares every root signed for `tree_size` with the root the log gives at that size.
fn compare_roots(
    roots: &BTreeMap<u64, Vec<SignedRoot>>,
    tree_size: u64,
    actual: Result<Digest, String>,
) -> Option<VerifyFailure> {
    let signed = roots.get(&tree_size)?;
    let seq = tree_size.saturating_sub(1);
    match actual {
        Err(e) => Some(VerifyFailure {
            seq,
            problem: format!("the root at tree size {tree_size} cannot be computed: {e}"),
        }),
        Ok(actual) => signed.iter().find(|s| s.root != actual).map(|s| VerifyFailure {
            seq,
            problem: format!(
                "entry {} of the checkpoint log signs root {} for the first {tree_size} events, but they have root {actual}: the log was rewritten before seq {tree_size}, or the entry was altered",
                s.entry + 1,
                s.root
            ),
        }),
    }
}

/// Checks the signatures of the checkpoint log's entries from `from` on, under the key chain
/// the log records: a key introduced, then rotations signed by the key before.
fn check_signatures(
    entries: &[CheckpointEntry],
    from: usize,
    breaks: &mut Vec<String>,
) -> Result<(), String> {
    let mut first: Option<PublicKey> = None;
    let mut rotations: Vec<KeyRotation> = Vec::new();
    let mut chain: Option<KeyChain> = None;
    let mut previous: Option<&Checkpoint> = None;
    for (i, entry) in entries.iter().enumerate() {
        let number = i + 1;
        match entry {
            CheckpointEntry::KeyIntroduced {
                public_key,
                tree_size,
                reason,
                ..
            } => {
                if first.is_some() {
                    breaks.push(format!(
                        "entry {number}: key {} starts a new chain at tree size {tree_size}: {reason}",
                        public_key.fingerprint()
                    ));
                }
                first = Some(*public_key);
                rotations.clear();
                chain = Some(KeyChain::new(*public_key));
                previous = None;
            }
            CheckpointEntry::Rotation(r) => {
                let Some(key) = first else {
                    return Err(format!(
                        "entry {number}: a rotation before any key was introduced"
                    ));
                };
                rotations.push(r.clone());
                chain = Some(
                    KeyChain::from_rotations(key, &rotations)
                        .map_err(|e| format!("entry {number}: {e}"))?,
                );
            }
            CheckpointEntry::Checkpoint(c) => {
                let Some(chain) = &chain else {
                    return Err(format!(
                        "entry {number}: a checkpoint before any key was introduced"
                    ));
                };
                if i >= from {
                    chain
                        .verify_checkpoint(c)
                        .map_err(|e| format!("entry {number}: {e}"))?;
                    if let Some(p) = previous
                        && (c.tree_size < p.tree_size || c.time < p.time)
                    {
                        return Err(format!(
                            "entry {number}: checkpoint of size {} at {} comes after one of size {} at {}",
                            c.tree_size, c.time, p.tree_size, p.time
                        ));
                    }
                }
                previous = Some(c);
            }
        }
    }
    Ok(())
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
