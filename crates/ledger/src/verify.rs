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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::ControlFlow;

use ledger_proof::{Frontier, MerkleHasher, Sha256};
use serde::{Deserialize, Serialize};

use crate::chain::{ChainBreak, ChainChecker};
use crate::envelope::Digest;
use crate::error::ReadError;
use crate::key_history::{KeyStep, KeyWalk};
use crate::ledger::Ledger;
use crate::storage::{CheckpointEntry, Standing, StorageError, standings};

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
    /// What recovery did to the log, signed (torn writes cut, losses accepted), entries of the
    /// checkpoint log given up or declared void by an accepted loss, and what the storage
    /// found on open that is not a problem. Not failures, but an auditor must know.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The first problem, if any.
    pub failure: Option<VerifyFailure>,
    /// Why verification could not finish, when storage could not be read: nothing is known to
    /// be wrong with the log, but it was not all checked.
    #[serde(default)]
    pub incomplete: Option<String>,
}

impl VerifyReport {
    /// True when everything was checked and checked out.
    pub fn is_intact(&self) -> bool {
        self.failure.is_none() && self.incomplete.is_none()
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

/// What a verification found besides the events it checked.
#[derive(Default)]
struct Findings {
    /// Checkpoints whose root and signature were checked.
    checkpoints_checked: u64,
    breaks: Vec<String>,
    notes: Vec<String>,
    failure: Option<VerifyFailure>,
    incomplete: Option<String>,
}

/// Notes for an auditor on the checkpoint log's recovery statements and the entries they give
/// up or declare void.
pub(crate) fn entry_notes(entries: &[CheckpointEntry], standing: &[Standing]) -> Vec<String> {
    let mut notes = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if let CheckpointEntry::Recovery(r) = entry {
            notes.push(format!("entry {}: {}", i + 1, r.summary()));
        }
        match standing[i] {
            Standing::Counts => {}
            Standing::Superseded { by } => notes.push(format!(
                "entry {} signs a tree of {} events, history given up by the accepted loss of entry {}",
                i + 1,
                entry.signed_size().unwrap_or(0),
                by + 1
            )),
            Standing::Disowned { by } => notes.push(format!(
                "entry {} was declared void by the accepted loss of entry {} and is not checked",
                i + 1,
                by + 1
            )),
        }
    }
    notes
}

/// A root some entry of the checkpoint log signed for a tree size.
struct SignedRoot {
    entry: usize,
    root: Digest,
}

/// Why a scan of the events stopped before the end.
enum Stop {
    /// An event, or the log, is not what it should be.
    Failed(VerifyFailure),
    /// Storage could not be read: nothing is known to be wrong, but not everything was checked.
    Unreadable(String),
}

/// What reading a chunk of the log for a scan at `next_seq` (of `size` events) says: nothing
/// (the scan goes on), damage, or that storage could not be read.
fn read_to(visited: Result<usize, StorageError>, next_seq: u64, size: u64) -> Result<(), Stop> {
    match visited {
        Err(StorageError::Corrupt { seq, detail }) => Err(Stop::Failed(VerifyFailure {
            seq: seq.unwrap_or(next_seq),
            problem: detail,
        })),
        Err(e) => Err(Stop::Unreadable(format!(
            "the log could not be read from seq {next_seq}: {}",
            ReadError::Storage(e)
        ))),
        Ok(0) => Err(Stop::Failed(VerifyFailure {
            seq: next_seq,
            problem: format!("the log ends at seq {next_seq} but its head says {size} events"),
        })),
        Ok(_) => Ok(()),
    }
}

/// The roots signed by the entries of the checkpoint log from `from` on that count, by tree
/// size.
fn signed_roots(
    entries: &[CheckpointEntry],
    standing: &[Standing],
    from: usize,
) -> BTreeMap<u64, Vec<SignedRoot>> {
    let mut roots: BTreeMap<u64, Vec<SignedRoot>> = BTreeMap::new();
    for (i, entry) in entries.iter().enumerate().skip(from) {
        if standing[i] != Standing::Counts {
            continue;
        }
        if let (Some(tree_size), Some(root)) = (entry.signed_size(), entry.signed_root()) {
            roots
                .entry(tree_size)
                .or_default()
                .push(SignedRoot { entry: i, root });
        }
    }
    roots
}

/// A root signed for a tree larger than the `scanned` events the log holds: events were
/// removed from its end.
fn events_removed(roots: &BTreeMap<u64, Vec<SignedRoot>>, scanned: u64) -> Option<VerifyFailure> {
    let (&tree_size, signed) = roots.range(scanned + 1..).next()?;
    Some(VerifyFailure {
        seq: scanned,
        problem: format!(
            "entry {} of the checkpoint log signs a tree of {tree_size} events, but the log has {scanned}: events from seq {scanned} on were removed",
            signed.first().map_or(0, |s| s.entry + 1),
        ),
    })
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
        // The checkpoint log: signatures now, roots as the scan reaches their tree sizes.
        let (entries_checked, findings) = match core.storage.checkpoint_entries() {
            Ok(entries) => {
                let findings = self.check(
                    &entries,
                    verified.entries,
                    &mut checker,
                    &mut frontier,
                    size,
                    progress,
                );
                (entries.len(), findings)
            }
            Err(e) => (
                verified.entries,
                Findings {
                    incomplete: Some(format!("the checkpoint log cannot be read: {e}")),
                    ..Findings::default()
                },
            ),
        };
        self.finish(
            &mut verified,
            checker,
            frontier,
            start,
            size,
            entries_checked,
            findings,
        )
    }

    /// Everything a verification checks once the checkpoint log is read: the signatures of
    /// its `entries` from `from_entry` on, the roots they sign, and the events from
    /// `checker`'s next seq up to `size`.
    fn check(
        &self,
        entries: &[CheckpointEntry],
        from_entry: usize,
        checker: &mut ChainChecker,
        frontier: &mut Frontier,
        size: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Findings {
        let storage = &self.core().storage;
        let start = checker.next_seq;
        let mut breaks = Vec::new();
        let mut failure = check_signatures(entries, from_entry, &mut breaks)
            .err()
            .map(|problem| VerifyFailure {
                seq: start,
                problem,
            });
        let standing = standings(entries);
        let mut notes = entry_notes(entries, &standing);
        notes.extend(storage.notes());
        let roots = signed_roots(entries, &standing, from_entry);
        if failure.is_none() {
            failure = self.check_prefix_roots(start, frontier, &roots);
        }
        let mut incomplete = None;
        if failure.is_none() {
            match self.scan(checker, frontier, &roots, size, progress) {
                Ok(()) => failure = events_removed(&roots, checker.next_seq),
                Err(Stop::Failed(f)) => failure = Some(f),
                Err(Stop::Unreadable(why)) => incomplete = Some(why),
            }
        }
        // What storage found when it opened comes first: it read the frames themselves, and a
        // log it stopped short of (damage, a loss) reads as shorter than it is.
        if let Some(problem) = storage.problems().into_iter().next() {
            failure = Some(VerifyFailure {
                seq: problem.seq.unwrap_or(checker.next_seq),
                problem: problem.detail,
            });
        }
        let checkpoints_checked = entries
            .iter()
            .enumerate()
            .skip(from_entry)
            .filter(|(i, e)| {
                standing[*i] == Standing::Counts && matches!(e, CheckpointEntry::Checkpoint(_))
            })
            .count() as u64;
        Findings {
            checkpoints_checked,
            breaks,
            notes,
            failure,
            incomplete,
        }
    }

    /// The roots signed for tree sizes inside the prefix verified earlier (`start` events),
    /// checked against the stored tree, whose root at `start` is first checked against the
    /// frontier recomputed from the events.
    fn check_prefix_roots(
        &self,
        start: u64,
        frontier: &Frontier,
        roots: &BTreeMap<u64, Vec<SignedRoot>>,
    ) -> Option<VerifyFailure> {
        if start == 0 {
            return compare_roots(roots, 0, Ok(Sha256.empty_root()));
        }
        match self.root_at(start) {
            Ok(root) if root == frontier.root(&Sha256) => {}
            Ok(root) => {
                return Some(VerifyFailure {
                    seq: start - 1,
                    problem: format!(
                        "the stored Merkle tree has root {root} at size {start}, the events give {}",
                        frontier.root(&Sha256)
                    ),
                });
            }
            Err(e) => {
                return Some(VerifyFailure {
                    seq: start - 1,
                    problem: format!("the stored Merkle tree cannot be read: {e}"),
                });
            }
        }
        roots.range(..start).find_map(|(&tree_size, _)| {
            let root = if tree_size == 0 {
                Ok(Sha256.empty_root())
            } else {
                self.root_at(tree_size).map_err(|e| e.to_string())
            };
            compare_roots(roots, tree_size, root)
        })
    }

    /// The chain and the tree, event by event from `checker`'s next seq up to `size`, each
    /// event read in place from storage's buffer (nothing is allocated per event), each signed
    /// root compared as the tree reaches its size.
    fn scan(
        &self,
        checker: &mut ChainChecker,
        frontier: &mut Frontier,
        roots: &BTreeMap<u64, Vec<SignedRoot>>,
        size: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), Stop> {
        let storage = &self.core().storage;
        let mut completed = Vec::with_capacity(64);
        while checker.next_seq < size {
            let mut failure = None;
            let visited =
                storage.visit_range(checker.next_seq, VERIFY_CHUNK_EVENTS, &mut |_, bytes| {
                    // Positions are the checker's, not what a frame says: a frame that claims
                    // other seqs is caught by the check of the event's own seq.
                    let seq = checker.next_seq;
                    if seq >= size {
                        return ControlFlow::Break(());
                    }
                    let hash = match checker.check(bytes, &mut |_: &str| Ok(0)) {
                        Ok(event) => event.hash,
                        Err(ChainBreak { seq, problem }) => {
                            failure = Some(self.pinpoint(seq, checker.last_hash, problem));
                            return ControlFlow::Break(());
                        }
                    };
                    completed.clear();
                    if frontier
                        .push_into(&Sha256, hash.as_bytes(), &mut completed)
                        .is_err()
                    {
                        failure = Some(VerifyFailure {
                            seq,
                            problem: "the Merkle tree is full".into(),
                        });
                        return ControlFlow::Break(());
                    }
                    if roots.contains_key(&frontier.size()) {
                        failure = compare_roots(roots, frontier.size(), Ok(frontier.root(&Sha256)));
                        if failure.is_some() {
                            return ControlFlow::Break(());
                        }
                    }
                    ControlFlow::Continue(())
                });
            if let Some(f) = failure {
                return Err(Stop::Failed(f));
            }
            read_to(visited, checker.next_seq, size)?;
            progress(checker.next_seq, size);
        }
        Ok(())
    }

    /// The report of a verification, and the verified prefix it leaves: moved to where the
    /// checks reached when they all passed.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        verified: &mut Verified,
        checker: ChainChecker,
        frontier: Frontier,
        start: u64,
        size: u64,
        entries: usize,
        findings: Findings,
    ) -> VerifyReport {
        let report = VerifyReport {
            size,
            head_hash: checker.last_hash,
            root: frontier.root(&Sha256),
            checked_from: start,
            checked: checker.next_seq - start,
            checkpoints_checked: findings.checkpoints_checked,
            key_chain_breaks: findings.breaks,
            notes: findings.notes,
            failure: findings.failure,
            incomplete: findings.incomplete,
        };
        if let Some(f) = &report.failure {
            self.core().poison(format!(
                "verification failed at seq {}: {}",
                f.seq, f.problem
            ));
        } else if report.incomplete.is_some() {
            // Nothing is known to be wrong, and nothing more is known to be right: the
            // verified prefix stays where it was.
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
            && leaf != Sha256.leaf(previous_hash.as_bytes())
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

/// Every entry of the checkpoint log whose signature does not verify where it stands, with
/// why: [`check_signatures`] run again past each fault it finds.
pub(crate) fn signature_faults(entries: &[CheckpointEntry]) -> Vec<(usize, String)> {
    let mut faults = Vec::new();
    let mut rest: Vec<CheckpointEntry> = entries.to_vec();
    let mut positions: Vec<usize> = (0..entries.len()).collect();
    // Each round finds the first fault left; the faulty entry is then taken out, so that the
    // entries after it are checked as if it were not there. At most one round an entry.
    for _ in 0..entries.len() {
        let mut breaks = Vec::new();
        let Err(problem) = check_signatures(&rest, 0, &mut breaks) else {
            break;
        };
        let Some(number) = problem
            .strip_prefix("entry ")
            .and_then(|p| p.split(':').next())
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n >= 1 && *n <= rest.len())
        else {
            break;
        };
        faults.push((positions[number - 1], problem));
        rest.remove(number - 1);
        positions.remove(number - 1);
    }
    faults
}

/// Checks the signatures of the checkpoint log's entries from `from` on, under the key chain
/// the log records: a key introduced, then rotations signed by the key before. A recovery
/// statement is signed by the key in force where it stands. Entries an accepted loss declared
/// void are not checked; the order of checkpoints starts over after an accepted loss.
pub(crate) fn check_signatures(
    entries: &[CheckpointEntry],
    from: usize,
    breaks: &mut Vec<String>,
) -> Result<(), String> {
    let standing = standings(entries);
    let mut walk = KeyWalk::default();
    let mut previous: Option<(u64, ledger_proof::Timestamp)> = None;
    let mut checkpoints = HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let number = i + 1;
        if matches!(standing[i], Standing::Disowned { .. }) {
            continue;
        }
        let step = walk
            .step(i, entry)
            .map_err(|e| format!("entry {number}: {e}"))?;
        if step == KeyStep::Break
            && let CheckpointEntry::KeyIntroduced {
                public_key,
                tree_size,
                reason,
                ..
            } = entry
        {
            breaks.push(format!(
                "entry {number}: key {} starts a new chain at tree size {tree_size}: {reason}",
                public_key.fingerprint()
            ));
        }
        if matches!(step, KeyStep::Introduced | KeyStep::Break) {
            previous = None;
        }
        check_signed_entry(&walk, entry, i >= from, &mut previous, &mut checkpoints)
            .map_err(|e| format!("entry {number}: {e}"))?;
    }
    Ok(())
}

/// What a checkpoint's body is made of (`Cosignature::cosigns` compares the same): the
/// checkpoints already read, as a cosignature further on is checked against them.
type BodyFields<'e> = (u64, ledger_proof::Digest, ledger_proof::Timestamp, &'e str);

/// One entry that signs with the key in force, or a witness's: a recovery statement (always
/// checked), a checkpoint or a cosignature (when `check` says its turn has come).
fn check_signed_entry<'e>(
    walk: &KeyWalk,
    entry: &'e CheckpointEntry,
    check: bool,
    previous: &mut Option<(u64, ledger_proof::Timestamp)>,
    checkpoints: &mut HashSet<BodyFields<'e>>,
) -> Result<(), String> {
    let chain = walk.chain();
    match entry {
        CheckpointEntry::KeyIntroduced { .. } | CheckpointEntry::Rotation(_) => {}
        CheckpointEntry::Recovery(_) | CheckpointEntry::Checkpoint(_) if chain.is_none() => {
            return Err("a signed entry before any key was introduced".into());
        }
        CheckpointEntry::Recovery(r) => {
            // Rare and decisive: always checked, whatever `from` skips.
            if let Some(chain) = chain {
                r.verify(chain.current().key()).map_err(|e| e.to_string())?;
            }
            *previous = if r.action == ledger_proof::RecoveryAction::LossAccepted {
                None
            } else {
                Some((r.tree_size, r.time))
            };
        }
        CheckpointEntry::Checkpoint(c) => {
            if check && let Some(chain) = chain {
                check_checkpoint(chain, walk.era().map(|e| e.origin.as_str()), c, *previous)?;
            }
            checkpoints.insert((c.tree_size, c.root, c.time, c.origin.as_str()));
            *previous = Some((c.tree_size, c.time));
        }
        CheckpointEntry::Cosignature(c) => {
            if check {
                c.verify().map_err(|e| e.to_string())?;
                if !checkpoints.contains(&(c.tree_size, c.root, c.time, c.origin.as_str())) {
                    return Err(format!(
                        "a cosignature by {} of a checkpoint of size {} the log does not hold before it",
                        c.witness.name(),
                        c.tree_size
                    ));
                }
            }
        }
    }
    Ok(())
}

/// One checkpoint: signed by a key of the chain valid where it stands, of the era's origin, and
/// not older than the entry before it.
fn check_checkpoint(
    chain: &ledger_proof::KeyChain,
    origin: Option<&str>,
    c: &ledger_proof::Checkpoint,
    previous: Option<(u64, ledger_proof::Timestamp)>,
) -> Result<(), String> {
    chain.verify_checkpoint(c).map_err(|e| e.to_string())?;
    if origin.is_some_and(|o| o != c.origin) {
        return Err(format!(
            "the checkpoint of size {} names origin {:?}, not the log's",
            c.tree_size, c.origin
        ));
    }
    if let Some((size, time)) = previous
        && (c.tree_size < size || c.time < time)
    {
        return Err(format!(
            "checkpoint of size {} at {} comes after one of size {size} at {time}",
            c.tree_size, c.time
        ));
    }
    Ok(())
}
