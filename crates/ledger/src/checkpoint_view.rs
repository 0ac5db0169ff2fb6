//! What the reads that serve checkpoints need of the checkpoint log — the latest checkpoint
//! that counts, the witness cosignatures recorded of it, the current era of keys, the notes of
//! what recovery did — kept up to date as entries are appended, so that no such read walks
//! the whole log. A ledger written all day checkpoints every second (some 86,000 entries a
//! day), and `GET /checkpoint`, `/health`, tiles and every proof are asked for all the time.
//!
//! Checkpoints and cosignatures, nearly every entry there is, are taken in one at a time. Any
//! other entry (a key introduced, a rotation, a statement of recovery) can change what the
//! entries before it count for, so the view is then computed again from the whole log; such
//! entries are rare.

use std::collections::HashMap;
use std::iter;

use ledger_proof::{Checkpoint, Cosignature, KeyRotation, PublicKey, VerifierKey};

use crate::key_history::KeyHistory;
use crate::storage::{CheckpointEntry, counting_checkpoints, standings};
use crate::verify;

/// The checkpoint log's first [`CheckpointView::seen`] entries, as the reads need them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CheckpointView {
    seen: u64,
    latest: Option<Checkpoint>,
    /// The cosignatures recorded after the latest checkpoint that cosign it (a cosignature
    /// is recorded only of a checkpoint the log already holds).
    cosignatures: Vec<Cosignature>,
    /// The current era's keys: the one introduced, then each rotation's new key.
    keys: Vec<PublicKey>,
    rotations: Vec<KeyRotation>,
    notes: Vec<String>,
    /// The largest tree size each witness cosigned, by its verifier key.
    cosigned: HashMap<String, u64>,
    /// How many signed checkpoints count.
    counting: u64,
}

impl CheckpointView {
    /// The view of `entries`, computed from every one of them.
    pub(crate) fn of(entries: &[CheckpointEntry]) -> CheckpointView {
        let standing = standings(entries);
        let latest = counting_checkpoints(entries, &standing).next_back();
        let cosignatures = latest.map_or_else(Vec::new, |(at, latest)| {
            entries[at + 1..]
                .iter()
                .filter_map(|e| match e {
                    CheckpointEntry::Cosignature(c) if c.cosigns(latest) => Some(c.clone()),
                    _ => None,
                })
                .collect()
        });
        let history = KeyHistory::of(entries);
        let (keys, rotations) = history.eras.last().map_or_else(Default::default, |era| {
            (
                iter::once(era.first)
                    .chain(era.rotations.iter().map(|(_, r)| r.new_public_key))
                    .collect(),
                era.rotations.iter().map(|(_, r)| r.clone()).collect(),
            )
        });
        let mut cosigned = HashMap::new();
        for entry in entries {
            if let CheckpointEntry::Cosignature(c) = entry {
                note_cosigned(&mut cosigned, c);
            }
        }
        CheckpointView {
            counting: counting_checkpoints(entries, &standing).count() as u64,
            cosigned,
            seen: entries.len() as u64,
            latest: latest.map(|(_, c)| c.clone()),
            cosignatures,
            keys,
            rotations,
            notes: verify::entry_notes(entries, &standing),
        }
    }

    /// How many entries of the log the view covers: its first `seen`.
    pub(crate) fn seen(&self) -> u64 {
        self.seen
    }

    /// Takes in `new`, the entries of the log past its first `from`, when they reach past what
    /// the view covers; `all` reads the whole log, for an entry that is neither a checkpoint nor
    /// a cosignature.
    pub(crate) fn extend<E>(
        &mut self,
        from: u64,
        new: Vec<CheckpointEntry>,
        all: impl FnOnce() -> Result<Vec<CheckpointEntry>, E>,
    ) -> Result<(), E> {
        // What another reader took in meanwhile is skipped; a view never goes back.
        let Some(skip) = self.seen.checked_sub(from) else {
            *self = CheckpointView::of(&all()?);
            return Ok(());
        };
        let rebuilds = |e: &CheckpointEntry| {
            !matches!(
                e,
                CheckpointEntry::Checkpoint(_) | CheckpointEntry::Cosignature(_)
            )
        };
        // Entries read from the log's start, no fewer than the view covers, are the whole log:
        // nothing to read again.
        if from == 0 && new.len() as u64 >= self.seen && new.iter().any(rebuilds) {
            *self = CheckpointView::of(&new);
            return Ok(());
        }
        let new: Vec<CheckpointEntry> = new
            .into_iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .collect();
        if new.iter().any(rebuilds) {
            *self = CheckpointView::of(&all()?);
            return Ok(());
        }
        for entry in new {
            self.seen += 1;
            match entry {
                CheckpointEntry::Checkpoint(c) => {
                    self.counting += 1;
                    self.latest = Some(c);
                    self.cosignatures.clear();
                }
                CheckpointEntry::Cosignature(c) => {
                    note_cosigned(&mut self.cosigned, &c);
                    if self.latest.as_ref().is_some_and(|l| c.cosigns(l)) {
                        self.cosignatures.push(c);
                    }
                }
                CheckpointEntry::KeyIntroduced { .. }
                | CheckpointEntry::Rotation(_)
                | CheckpointEntry::Recovery(_) => {}
            }
        }
        Ok(())
    }

    /// The latest signed checkpoint that counts: not one of history given up by an accepted
    /// loss.
    pub(crate) fn latest(&self) -> Option<&Checkpoint> {
        self.latest.as_ref()
    }

    /// The witness cosignatures recorded of [`CheckpointView::latest`].
    pub(crate) fn cosignatures(&self) -> &[Cosignature] {
        &self.cosignatures
    }

    /// The rotation statements since the current chain of keys began.
    pub(crate) fn rotations(&self) -> &[KeyRotation] {
        &self.rotations
    }

    /// The key of the current era whose fingerprint `checkpoint` names.
    pub(crate) fn key_of(&self, checkpoint: &Checkpoint) -> Option<PublicKey> {
        self.keys
            .iter()
            .find(|k| k.fingerprint() == checkpoint.key_fingerprint)
            .copied()
    }

    /// How many signed checkpoints count (not those of history given up by an accepted loss).
    pub(crate) fn counting(&self) -> u64 {
        self.counting
    }

    /// The largest tree size `witness` cosigned, 0 when it cosigned none.
    pub(crate) fn last_cosigned(&self, witness: &VerifierKey) -> u64 {
        self.cosigned
            .get(&witness.to_string())
            .copied()
            .unwrap_or(0)
    }

    /// What recovery did, as the log's statements record it.
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }
}

fn note_cosigned(cosigned: &mut HashMap<String, u64>, c: &Cosignature) {
    let size = cosigned.entry(c.witness.to_string()).or_default();
    *size = (*size).max(c.tree_size);
}
