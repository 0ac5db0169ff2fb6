//! The history of signing keys a checkpoint log records, walked in one place.
//!
//! A `key_introduced` entry starts an era: the ledger's first key, or a key started after an
//! import without the old one, which breaks the chain of keys (and says why). Each rotation in
//! an era hands over from the key in force to the next, signed by the former. Whoever needs the
//! keys — the writer adopting its key at open, verification checking every signature, a
//! bundle's check, a restore — walks the entries with [`KeyWalk`], entry by entry, or takes the
//! whole [`KeyHistory`] at once.

use ledger_proof::{KeyChain, KeyRotation, PublicKey, RotationError, Timestamp};

use crate::storage::CheckpointEntry;

/// One era of the key history: a key introduced and the rotations after it, up to the next key
/// introduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyEra {
    /// Index (0-based) of the `key_introduced` entry.
    pub(crate) entry: usize,
    /// The key introduced.
    pub(crate) first: PublicKey,
    /// The log's origin, as the entry names it.
    pub(crate) origin: String,
    /// The tree size at the introduction.
    pub(crate) tree_size: u64,
    /// Why it was introduced.
    pub(crate) reason: String,
    /// The rotations of the era, each with its entry index, in order.
    pub(crate) rotations: Vec<(usize, KeyRotation)>,
}

impl KeyEra {
    /// The key that signs at the end of the era, as the statements name it (their signatures
    /// are checked by [`KeyEra::chain`]).
    pub(crate) fn last_key(&self) -> PublicKey {
        self.rotations
            .last()
            .map_or(self.first, |(_, r)| r.new_public_key)
    }

    /// Whether `key` signs at some point of the era.
    pub(crate) fn holds(&self, key: &PublicKey) -> bool {
        self.first == *key || self.rotations.iter().any(|(_, r)| r.new_public_key == *key)
    }

    /// The chain of keys of the era from its first key through every rotation, each rotation's
    /// signature checked; an error names the entry index of the rotation refused.
    pub(crate) fn chain(&self) -> Result<KeyChain, (usize, RotationError)> {
        let rotations: Vec<KeyRotation> = self.rotations.iter().map(|(_, r)| r.clone()).collect();
        KeyChain::from_first(self.first, &rotations).map_err(|e| {
            let position = match &e {
                RotationError::WrongOldKey { position, .. }
                | RotationError::Forged { position, .. }
                | RotationError::GoesBack { position, .. }
                | RotationError::KeyReused { position, .. } => *position,
                _ => 0,
            };
            let entry = self.rotations.get(position).map_or(self.entry, |(i, _)| *i);
            (entry, e)
        })
    }
}

/// What one entry did to the history, as [`KeyWalk::step`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyStep {
    /// The first key introduced.
    Introduced,
    /// A key introduced after another era: the chain of keys breaks here.
    Break,
    /// A rotation, accepted into the chain.
    Rotated,
    /// An entry that signs with the key in force (a checkpoint, a recovery statement) or is
    /// not the log's (a cosignature).
    Other,
}

/// The walk through a checkpoint log's keys, one entry at a time.
#[derive(Debug, Default)]
pub(crate) struct KeyWalk {
    eras: Vec<KeyEra>,
    chain: Option<KeyChain>,
    last_signed: Option<(u64, Timestamp)>,
}

impl KeyWalk {
    /// Takes entry `index`. A rotation is checked against the key in force (its signature, its
    /// order); an error says why, in words for an auditor.
    pub(crate) fn step(
        &mut self,
        index: usize,
        entry: &CheckpointEntry,
    ) -> Result<KeyStep, String> {
        if let Some(at) = entry_time(entry) {
            self.last_signed = Some(at);
        }
        match entry {
            CheckpointEntry::KeyIntroduced {
                public_key,
                tree_size,
                reason,
                origin,
                ..
            } => {
                let step = if self.eras.is_empty() {
                    KeyStep::Introduced
                } else {
                    KeyStep::Break
                };
                self.eras.push(KeyEra {
                    entry: index,
                    first: *public_key,
                    origin: origin.clone(),
                    tree_size: *tree_size,
                    reason: reason.clone(),
                    rotations: Vec::new(),
                });
                self.chain = Some(KeyChain::new(*public_key));
                Ok(step)
            }
            CheckpointEntry::Rotation(r) => {
                let Some(era) = self.eras.last_mut() else {
                    return Err("a rotation before any key was introduced".into());
                };
                era.rotations.push((index, r.clone()));
                let chain = era.chain().map_err(|(_, e)| e.to_string())?;
                self.chain = Some(chain);
                Ok(KeyStep::Rotated)
            }
            CheckpointEntry::Checkpoint(_)
            | CheckpointEntry::Recovery(_)
            | CheckpointEntry::Cosignature(_) => Ok(KeyStep::Other),
        }
    }

    /// The chain of keys in force after the entries taken so far.
    pub(crate) fn chain(&self) -> Option<&KeyChain> {
        self.chain.as_ref()
    }

    /// The era of the entries taken so far.
    pub(crate) fn era(&self) -> Option<&KeyEra> {
        self.eras.last()
    }

    /// The history of every entry taken.
    pub(crate) fn finish(self) -> KeyHistory {
        KeyHistory {
            eras: self.eras,
            last_signed: self.last_signed,
        }
    }
}

/// The whole key history of a checkpoint log.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyHistory {
    /// Every era, in order.
    pub(crate) eras: Vec<KeyEra>,
    /// Tree size and time of the last entry that has them.
    pub(crate) last_signed: Option<(u64, Timestamp)>,
}

impl KeyHistory {
    /// Walks every entry, rotations recorded as the log names them, not checked: what the
    /// writer needs to know which key the log says signs now. [`KeyEra::chain`] checks them.
    pub(crate) fn of(entries: &[CheckpointEntry]) -> KeyHistory {
        let mut walk = KeyWalk::default();
        for (i, entry) in entries.iter().enumerate() {
            if let (CheckpointEntry::Rotation(r), Some(era)) = (entry, walk.eras.last_mut()) {
                era.rotations.push((i, r.clone()));
                walk.last_signed = Some((r.tree_size, r.time));
                continue;
            }
            // Nothing but a rotation can fail a step.
            let _ = walk.step(i, entry);
        }
        walk.finish()
    }

    /// The key the log says signs now: the last era's last key.
    pub(crate) fn current(&self) -> Option<PublicKey> {
        self.eras.last().map(KeyEra::last_key)
    }

    /// The log's origin, as the last key introduced names it.
    pub(crate) fn origin(&self) -> Option<&str> {
        self.eras.last().map(|e| e.origin.as_str())
    }

    /// The eras after the first: where the chain of keys breaks.
    pub(crate) fn breaks(&self) -> &[KeyEra] {
        self.eras.get(1..).unwrap_or(&[])
    }
}

/// The tree size and time an entry states, if it states them.
fn entry_time(entry: &CheckpointEntry) -> Option<(u64, Timestamp)> {
    match entry {
        CheckpointEntry::KeyIntroduced {
            tree_size, time, ..
        } => Some((*tree_size, *time)),
        CheckpointEntry::Checkpoint(c) => Some((c.tree_size, c.time)),
        CheckpointEntry::Rotation(r) => Some((r.tree_size, r.time)),
        CheckpointEntry::Recovery(r) => Some((r.tree_size, r.time)),
        CheckpointEntry::Cosignature(_) => None,
    }
}
