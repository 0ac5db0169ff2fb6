//! What the ledger checks before it takes a write, and the two things recovery may do to the
//! log, each signed before it is done: cut a torn write, and accept a loss.
//!
//! Storage compares the log with every durable record of its length when it opens; here the
//! ledger also checks every signed entry of the checkpoint log against the log — its signature
//! under the key chain, and the root the log gives at the size it signs. Any doubt and the
//! ledger refuses appends, until an operator accepts the loss with [`Ledger::accept_loss`].

use std::path::Path;
use std::sync::Arc;

use ledger_proof::{
    Digest, MerkleHasher, RecoveryAction, RecoveryFacts, RecoveryStatement, Sha256, SigningKey,
};

use super::{Ledger, LedgerOptions, Writer};
use crate::storage::{CheckpointEntry, PendingCut, Standing, StorageError, standings};
use crate::tree::StoredNodes;
use crate::verify;

/// What [`Ledger::accept_loss`] did.
#[derive(Debug, Clone)]
pub struct AcceptedLoss {
    /// The signed statement now in the checkpoint log.
    pub statement: RecoveryStatement,
    /// What was moved out of the log into `recovered/`, and where.
    pub moved: Vec<String>,
    /// What the ledger found wrong, that the statement accepts.
    pub accepted: Vec<String>,
}

/// The newest checkpoints whose signature and root an open checks in full; older ones have
/// their tree size checked against the log, and `verify` checks them all.
const OPEN_CHECKPOINTS_CHECKED: usize = 1024;

/// Longest `detail` a statement carries: what was found, cut to a line an operator can read.
const DETAIL_CHARS_MAX: usize = 2000;

impl Ledger {
    /// Opens the ledger in `dir` and, if it refuses writes because its log holds less than a
    /// durable record says it held, or is damaged, or a signed entry of its checkpoint log does
    /// not verify, records that an operator accepted the loss (`reason`, one line) in a
    /// statement the ledger's key signs, then moves whatever lies past the part of the log that
    /// checks out into `recovered/`. The returned ledger is closed; open the directory again to
    /// go on from the kept part.
    pub fn accept_loss(
        dir: &Path,
        options: LedgerOptions,
        reason: &str,
    ) -> Result<AcceptedLoss, StorageError> {
        if options.read_only {
            return Err(StorageError::Failed(
                "a loss cannot be accepted on a ledger opened read-only".into(),
            ));
        }
        let (ledger, accepted) = Ledger::open_embedded(dir, options, Some(reason))?;
        ledger.shutdown();
        match accepted {
            Some(Ok(accepted)) => Ok(accepted),
            Some(Err(why)) => Err(StorageError::Failed(why)),
            None => Err(StorageError::Failed(
                "the ledger found nothing wrong: there is no loss to accept".into(),
            )),
        }
    }

    /// What the ledger found wrong when it opened, storage's findings first: while there is
    /// anything here, every append is refused.
    pub fn problems(&self) -> Vec<String> {
        let core = self.core();
        let mut out: Vec<String> = core
            .storage
            .problems()
            .into_iter()
            .map(|p| match p.seq {
                Some(seq) => format!("at seq {seq}: {}", p.detail),
                None => p.detail,
            })
            .collect();
        out.extend(
            core.open_problems
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        out
    }

    /// What recovery did to the log, as the checkpoint log's signed statements record it
    /// (torn writes cut, losses accepted), and what storage noted on open that is not a
    /// problem.
    pub fn recovery_notes(&self) -> Vec<String> {
        let mut notes = self
            .core()
            .checkpoint_view(|v| v.notes().to_vec())
            .unwrap_or_default();
        notes.extend(self.core().storage.notes());
        notes
    }
}

impl Writer {
    /// The checks made before the writer starts, and what they lead to: a cut of a torn write,
    /// or, when asked, the acceptance of a loss.
    pub(super) fn check_on_open(
        &mut self,
        accept_loss: Option<&str>,
    ) -> Option<Result<AcceptedLoss, String>> {
        let storage = Arc::clone(&self.core.storage);
        if !storage.is_read_only()
            && let Err(problem) = self.check_signed_entries()
        {
            self.core
                .open_problems
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(problem.clone());
            self.core.poison(format!(
                "the ledger found a problem when it opened: {problem}"
            ));
        }
        if let Some(reason) = accept_loss {
            return Some(self.accept(reason));
        }
        if self.core.poisoned().is_none()
            && let Some(cut) = storage.pending_cut()
            && let Err(e) = self.cut(&cut)
        {
            self.core.poison(format!(
                "a torn write at the end of the log could not be cut: {e}"
            ));
        }
        None
    }

    /// Every counting entry of the checkpoint log: signed under the key chain, and signing the
    /// root the log has at its size (from the stored tree, checked when it was stored).
    ///
    /// Every entry's tree size is checked against the log, every key, rotation and recovery
    /// statement in full, and the newest [`OPEN_CHECKPOINTS_CHECKED`] checkpoints in full
    /// (signature and root): a server that checkpoints every second would otherwise take longer
    /// to start with every day it ran. `verify` checks every one.
    fn check_signed_entries(&mut self) -> Result<(), String> {
        let entries = self.checkpoint_log().map_err(|e| e.to_string())?;
        let recent_from = entries
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, e)| matches!(e, CheckpointEntry::Checkpoint(_)))
            .nth(OPEN_CHECKPOINTS_CHECKED - 1)
            .map_or(0, |(i, _)| i);
        verify::check_signatures(&entries, recent_from, &mut Vec::new())?;
        let standing = standings(&entries);
        let size = self.head.size;
        for (i, entry) in entries.iter().enumerate() {
            if standing[i] != Standing::Counts {
                continue;
            }
            let (Some(tree_size), Some(root)) = (entry.signed_size(), entry.signed_root()) else {
                continue;
            };
            if tree_size > size {
                return Err(format!(
                    "entry {} of the checkpoint log signs a tree of {tree_size} events, but the log holds {size}",
                    i + 1
                ));
            }
            if i < recent_from
                && matches!(
                    entry,
                    CheckpointEntry::Checkpoint(_) | CheckpointEntry::Cosignature(_)
                )
            {
                continue;
            }
            let actual = self.root_at(tree_size)?;
            if actual != root {
                return Err(format!(
                    "entry {} of the checkpoint log signs root {root} for the first {tree_size} events, but the log gives {actual}",
                    i + 1
                ));
            }
        }
        Ok(())
    }

    /// The root the log gives at `tree_size` (at most its size): the frontier's at the head, the
    /// stored tree's below it.
    fn root_at(&self, tree_size: u64) -> Result<Digest, String> {
        if tree_size == self.head.size {
            Ok(self.frontier.root(&Sha256))
        } else if tree_size == 0 {
            Ok(Sha256.empty_root())
        } else {
            ledger_proof::root(&Sha256, &StoredNodes(&*self.core.storage), tree_size)
                .map_err(|e| format!("the root at tree size {tree_size}: {e:?}"))
        }
    }

    /// The key that signs a recovery statement: the one the checkpoint log names, or, when the
    /// checkpoint log lost every key entry, the one on disk.
    fn recovery_key(&self) -> Option<&SigningKey> {
        self.key.as_ref().or(self.unadopted.as_ref())
    }

    /// Cuts a torn write, after recording a signed statement of what is cut. A statement left
    /// by a cut that a crash interrupted is reused rather than made twice.
    fn cut(&mut self, cut: &PendingCut) -> Result<(), String> {
        let entries = self.checkpoint_log().map_err(|e| e.to_string())?;
        let place = format!("byte {} of segment {:020}", cut.offset, cut.segment);
        let earlier = entries.last().filter(|e| {
            matches!(e, CheckpointEntry::Recovery(r)
                if r.action == RecoveryAction::TornWriteCut
                    && r.tree_size == cut.tree_size
                    && r.detail.contains(&place))
        });
        let statement = match earlier {
            Some(entry) => entry.clone(),
            None => {
                let Some(key) = self.key.as_ref() else {
                    return Err("no signing key can sign the statement of the cut".into());
                };
                let facts = RecoveryFacts {
                    action: RecoveryAction::TornWriteCut,
                    tree_size: cut.tree_size,
                    root: self.frontier.root(&Sha256),
                    time: self.signing_time()?,
                    claimed_size: cut.tree_size,
                    disowned_entries: Vec::new(),
                    detail: format!(
                        "{} bytes at {place} ({}; blake3 {}), which no durable record shows acknowledged, kept in recovered/{:020}.seg.{}.torn",
                        cut.bytes, cut.detail, cut.hash, cut.segment, cut.offset
                    ),
                    reason: String::new(),
                };
                CheckpointEntry::Recovery(facts.sign(key).map_err(|e| e.to_string())?)
            }
        };
        let kept = self
            .core
            .storage
            .cut_torn_tail(&statement)
            .map_err(|e| e.to_string())?;
        if let CheckpointEntry::Recovery(r) = &statement {
            self.last_signed = Some((r.tree_size, r.time));
        }
        tracing::warn!(kept = %kept, "cut a torn write at the end of the log");
        Ok(())
    }

    /// Signs and records the acceptance of everything the ledger found wrong.
    fn accept(&mut self, reason: &str) -> Result<AcceptedLoss, String> {
        let storage = Arc::clone(&self.core.storage);
        let mut accepted = self.found_wrong();
        if accepted.is_empty() {
            return Err("the ledger found nothing wrong: there is no loss to accept".into());
        }
        if reason.trim().is_empty() {
            return Err("say why the loss is accepted (a reason of one line)".into());
        }
        let entries = self.checkpoint_log().map_err(|e| e.to_string())?;
        let kept = self.head.size;
        let disowned = self.disowned(&entries, &mut accepted);
        let claimed = entries
            .iter()
            .filter_map(CheckpointEntry::signed_size)
            .chain(std::iter::once(storage.claimed_size()))
            .max()
            .unwrap_or(kept)
            .max(kept);
        let Some(key) = self.recovery_key() else {
            return Err(
                "there is no signing key in the data directory to sign the acceptance".into(),
            );
        };
        let key = SigningKey::from_secret_bytes(&key.to_secret_bytes());
        let mut statements = Vec::new();
        let time = self.signing_time()?;
        if !entries
            .iter()
            .any(|e| matches!(e, CheckpointEntry::KeyIntroduced { .. }))
        {
            statements.push(self.key_reintroduced(&key, kept, time, reason));
        }
        let mut detail = one_line(&accepted.join("; "));
        if detail.chars().count() > DETAIL_CHARS_MAX {
            detail = detail.chars().take(DETAIL_CHARS_MAX).collect::<String>() + "…";
        }
        let statement = RecoveryFacts {
            action: RecoveryAction::LossAccepted,
            tree_size: kept,
            root: self.frontier.root(&Sha256),
            time,
            claimed_size: claimed,
            disowned_entries: disowned,
            detail,
            reason: one_line(reason),
        }
        .sign(&key)
        .map_err(|e| e.to_string())?;
        statements.push(CheckpointEntry::Recovery(statement.clone()));
        let moved = storage
            .accept_loss(&statements)
            .map_err(|e| e.to_string())?;
        Ok(AcceptedLoss {
            statement,
            moved,
            accepted,
        })
    }
}

impl Writer {
    /// Everything the ledger found wrong when it opened: the storage's problems, the checkpoint
    /// log's, and a torn write not cut.
    fn found_wrong(&self) -> Vec<String> {
        let storage = &self.core.storage;
        let mut found: Vec<String> = storage.problems().into_iter().map(|p| p.detail).collect();
        found.extend(
            self.core
                .open_problems
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        if let Some(cut) = storage.pending_cut() {
            found.push(format!(
                "a torn write of {} bytes at byte {} of segment {:020}",
                cut.bytes, cut.offset, cut.segment
            ));
        }
        found
    }

    /// The entries of the checkpoint log an acceptance declares void, by number from 1, with
    /// why added to `accepted`: those that do not verify, and those that sign a root the kept
    /// log does not have. Those that sign a larger tree are given up by the statement itself.
    fn disowned(&self, entries: &[CheckpointEntry], accepted: &mut Vec<String>) -> Vec<u64> {
        let mut disowned = Vec::new();
        for (i, problem) in verify::signature_faults(entries) {
            accepted.push(problem);
            disowned.push(i as u64 + 1);
        }
        let standing = standings(entries);
        for (i, entry) in entries.iter().enumerate() {
            if standing[i] != Standing::Counts || disowned.contains(&(i as u64 + 1)) {
                continue;
            }
            let (Some(tree_size), Some(root)) = (entry.signed_size(), entry.signed_root()) else {
                continue;
            };
            if tree_size > self.head.size {
                continue;
            }
            if !self.root_at(tree_size).is_ok_and(|actual| actual == root) {
                accepted.push(format!(
                    "entry {} of the checkpoint log signs a root the log does not have at size {tree_size}",
                    i + 1
                ));
                disowned.push(i as u64 + 1);
            }
        }
        disowned.sort_unstable();
        disowned.dedup();
        disowned
    }

    /// The key that signs an acceptance when the checkpoint log lost every key entry, introduced
    /// again at the kept size, with the log's origin.
    fn key_reintroduced(
        &self,
        key: &SigningKey,
        kept: u64,
        time: ledger_proof::Timestamp,
        reason: &str,
    ) -> CheckpointEntry {
        CheckpointEntry::KeyIntroduced {
            public_key: key.public_key(),
            tree_size: kept,
            time,
            reason: format!(
                "the checkpoint log named no key when a loss was accepted: {}",
                one_line(reason)
            ),
            origin: if self.origin.is_empty() {
                super::signing::default_origin(&key.public_key())
            } else {
                self.origin.clone()
            },
        }
    }
}

/// `text` with its line breaks turned into spaces.
fn one_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .trim()
        .to_owned()
}
