//! Key rotation: handing the signing role from one key to the next, and checking which key
//! could sign which checkpoint.
//!
//! A new key is introduced by a statement that the *old* key signs, fixing the tree size, root
//! and time of the handover. It is a checkpoint note of the log (`checkpoint.rs`) with one more
//! extension line naming the new key as a C2SP verifier key; the old key's signature covers
//! exactly the body
//!
//! ```text
//! {origin}\n{tree_size}\n{base64 root}\ntime {time}\nrotate-to {origin}+{key ID}+{base64(0x01 ‖ new key)}\n
//! ```
//!
//! so any tool that reads the log's checkpoints reads it as one, and only a reader that knows
//! the extension takes it as a handover. Binding the handover to a tree state means that a
//! thief of a retired key cannot sign a "checkpoint" for a later log: the retired key's
//! validity ends at the handover.
//!
//! An auditor starts from a key it trusts and walks the statements forward ([`KeyChain`]). Each
//! key is valid from its handover (tree size and time) up to and including the next one, both
//! bounds inclusive: the checkpoint at the handover itself may be signed by either key.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::checkpoint::{Checkpoint, CheckpointError, checkpoint_body};
use crate::keys::{BadSignature, Fingerprint, PublicKey, Signature, SigningKey};
use crate::note::{Note, NoteError, NoteSignature, VerifierKey};
use crate::{Digest, Timestamp};

/// A statement, signed by the old key, that from this tree state on `new_public_key` signs.
///
/// JSON: `{"origin": "…", "tree_size": 7, "root": "<64 hex>", "time": "2025-03-01T09:30:00Z",
/// "old_key_fingerprint": "<16 hex>", "new_public_key": "<64 hex>", "signature": "<128 hex>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRotation {
    /// The log's origin line.
    pub origin: String,
    /// Tree size at the handover.
    pub tree_size: u64,
    /// Tree root at the handover.
    pub root: Digest,
    /// Time of the handover.
    pub time: Timestamp,
    /// Fingerprint of the key handing over, which signs this statement.
    pub old_key_fingerprint: Fingerprint,
    /// The key that signs from now on.
    pub new_public_key: PublicKey,
    /// Ed25519 signature by the old key over [`KeyRotation::signed_text`].
    pub signature: Signature,
}

impl KeyRotation {
    /// The exact text a rotation statement's signature covers.
    pub fn body(
        origin: &str,
        tree_size: u64,
        root: &Digest,
        time: &Timestamp,
        new_public_key: &PublicKey,
    ) -> Result<String, NoteError> {
        let new_key = VerifierKey::ed25519(origin, *new_public_key)?;
        Ok(format!(
            "{}rotate-to {new_key}\n",
            checkpoint_body(origin, tree_size, root, time)
        ))
    }

    /// The old key's statement handing over to `new_public_key` at this tree state.
    pub fn sign(
        old_key: &SigningKey,
        origin: &str,
        new_public_key: PublicKey,
        tree_size: u64,
        root: Digest,
        time: Timestamp,
    ) -> Result<Self, NoteError> {
        let text = Self::body(origin, tree_size, &root, &time, &new_public_key)?;
        Ok(Self {
            origin: origin.to_owned(),
            tree_size,
            root,
            time,
            old_key_fingerprint: old_key.fingerprint(),
            new_public_key,
            signature: old_key.sign(text.as_bytes()),
        })
    }

    /// The statement as a signed note of the old key.
    pub fn note(&self, old_key: PublicKey) -> Result<Note, NoteError> {
        let text = Self::body(
            &self.origin,
            self.tree_size,
            &self.root,
            &self.time,
            &self.new_public_key,
        )?;
        let vkey = VerifierKey::ed25519(&self.origin, old_key)?;
        Ok(Note {
            text,
            signatures: vec![NoteSignature {
                name: self.origin.clone(),
                id: vkey.id(),
                bytes: self.signature.0.to_vec(),
            }],
        })
    }

    /// The tree state this statement hands over at.
    pub fn handover(&self) -> Handover {
        Handover {
            tree_size: self.tree_size,
            root: self.root,
            time: self.time,
        }
    }

    fn verify_signature(&self, old_key: &PublicKey) -> Result<(), BadSignature> {
        let text = Self::body(
            &self.origin,
            self.tree_size,
            &self.root,
            &self.time,
            &self.new_public_key,
        )
        .map_err(|_| BadSignature)?;
        old_key.verify(text.as_bytes(), &self.signature)
    }
}

/// The tree state at which one key handed over to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handover {
    /// Tree size at the handover.
    pub tree_size: u64,
    /// Tree root at the handover.
    pub root: Digest,
    /// Time of the handover.
    pub time: Timestamp,
}

/// One key and the stretch of the log it may sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEpoch {
    key: PublicKey,
    from: Option<Handover>,
    until: Option<Handover>,
}

impl KeyEpoch {
    /// The key.
    pub fn key(&self) -> &PublicKey {
        &self.key
    }

    /// The key's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.key.fingerprint()
    }

    /// The handover that introduced the key; `None` for the key trust starts from.
    pub fn valid_from(&self) -> Option<&Handover> {
        self.from.as_ref()
    }

    /// The handover that retired the key; `None` while it is the current key.
    pub fn valid_until(&self) -> Option<&Handover> {
        self.until.as_ref()
    }
}

/// Why a rotation statement was refused while building a [`KeyChain`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RotationError {
    /// The statement hands over from another key than the one in force. A statement is missing
    /// between the two (a gap in the chain), or the statements are out of order.
    #[error("statement {position} hands over from key {named}, but key {in_force} is in force")]
    WrongOldKey {
        /// Position of the statement in the list given.
        position: usize,
        /// Fingerprint the statement names as the old key.
        named: Fingerprint,
        /// Fingerprint of the key in force at that point of the chain.
        in_force: Fingerprint,
    },
    /// The statement's signature does not verify under the key in force: it was forged or
    /// altered. The key it introduces must not be trusted.
    #[error("statement {position} introducing key {new_key} is not signed by key {in_force}")]
    Forged {
        /// Position of the statement in the list given.
        position: usize,
        /// Fingerprint of the key the statement tries to introduce.
        new_key: Fingerprint,
        /// Fingerprint of the key that should have signed it.
        in_force: Fingerprint,
    },
    /// The handover lies before the one that introduced the key in force (smaller tree size or
    /// earlier time): the statements are out of order or backdated.
    #[error(
        "statement {position} hands over at tree size {tree_size}, before key {in_force} was introduced"
    )]
    GoesBack {
        /// Position of the statement in the list given.
        position: usize,
        /// Tree size the statement names.
        tree_size: u64,
        /// Fingerprint of the key in force.
        in_force: Fingerprint,
    },
    /// The statement introduces a key (or a key with the same fingerprint) already used in the
    /// chain. Reusing a key would make "which key signed when" ambiguous.
    #[error("statement {position} introduces key {fingerprint}, which the chain already used")]
    KeyReused {
        /// Position of the statement in the list given.
        position: usize,
        /// Fingerprint of the reused key.
        fingerprint: Fingerprint,
    },
    /// No statement starts from or introduces the trusted key: these statements belong to
    /// another chain, or the trusted key is the wrong one.
    #[error("the rotation statements neither start from nor introduce the trusted key {trusted}")]
    TrustedKeyNotInChain {
        /// Fingerprint of the trusted key.
        trusted: Fingerprint,
    },
}

/// Why a checkpoint was refused by a [`KeyChain`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ChainError {
    /// The checkpoint names a key that is not in the chain: it was signed by a key the auditor
    /// has no reason to trust.
    #[error(
        "checkpoint at tree size {tree_size} names key {fingerprint}, which is not in the key chain"
    )]
    UnknownKey {
        /// Tree size the checkpoint states.
        tree_size: u64,
        /// Fingerprint it names.
        fingerprint: Fingerprint,
    },
    /// The checkpoint was signed by a key after that key was retired (a larger tree size or a
    /// later time than its handover). Whoever holds a retired key must not be able to extend
    /// the log, so such a checkpoint is treated as forged.
    #[error(
        "checkpoint at tree size {tree_size} is signed by key {fingerprint}, retired at tree size {retired_at}"
    )]
    RetiredKey {
        /// Tree size the checkpoint states.
        tree_size: u64,
        /// Fingerprint of the retired key.
        fingerprint: Fingerprint,
        /// Tree size at which the key handed over.
        retired_at: u64,
    },
    /// The checkpoint was signed by a key for a tree state before the key was introduced (a
    /// smaller tree size or an earlier time). A new key cannot vouch for history it did not see.
    #[error(
        "checkpoint at tree size {tree_size} is signed by key {fingerprint}, introduced at tree size {introduced_at}"
    )]
    NotYetValid {
        /// Tree size the checkpoint states.
        tree_size: u64,
        /// Fingerprint of the key.
        fingerprint: Fingerprint,
        /// Tree size at which the key was introduced.
        introduced_at: u64,
    },
    /// The checkpoint's root differs from another signed root of the same tree size (a
    /// handover or another checkpoint): the log was forked.
    #[error("tree size {tree_size} has two signed roots, {root} and {other_root}")]
    Fork {
        /// The tree size in question.
        tree_size: u64,
        /// The checkpoint's root.
        root: Digest,
        /// The other signed root for the same size.
        other_root: Digest,
    },
    /// Checkpoints listed out of order (a smaller tree size or an earlier time after a larger
    /// one): a list of checkpoints must follow the log's growth.
    #[error("checkpoint at tree size {tree_size} follows one at tree size {previous_size}")]
    OutOfOrder {
        /// Tree size of the previous checkpoint in the list.
        previous_size: u64,
        /// Tree size of the checkpoint that breaks the order.
        tree_size: u64,
    },
    /// The signature is wrong under the key the chain assigns.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

/// The keys an auditor accepts, each with the stretch of the log it may sign, built from one
/// trusted key and the rotation statements that follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChain {
    retired: Vec<KeyEpoch>,
    current: KeyEpoch,
}

impl KeyChain {
    /// A chain of one trusted key, valid for every tree state.
    pub fn new(trusted: PublicKey) -> Self {
        Self {
            retired: Vec::new(),
            current: KeyEpoch {
                key: trusted,
                from: None,
                until: None,
            },
        }
    }

    /// Builds the chain from `trusted` through `rotations`, given in the order they were made.
    ///
    /// The statements may start with the one signed by the trusted key, or earlier: then they
    /// are taken from the one after the statement that introduced the trusted key. Every
    /// statement taken must be signed by the key in force and hand over no earlier than that
    /// key's own introduction.
    pub fn from_rotations(
        trusted: PublicKey,
        rotations: &[KeyRotation],
    ) -> Result<Self, RotationError> {
        let fingerprint = trusted.fingerprint();
        let introduced = rotations.iter().position(|r| r.new_public_key == trusted);
        let mentioned = rotations
            .iter()
            .any(|r| r.old_key_fingerprint == fingerprint);
        let start = match (rotations.first(), introduced) {
            (Some(first), _) if first.old_key_fingerprint == fingerprint => 0,
            (_, Some(position)) => position + 1,
            // The trusted key hands over somewhere, but not first: the walk from the start
            // reports where the order breaks.
            _ if mentioned || rotations.is_empty() => 0,
            _ => {
                return Err(RotationError::TrustedKeyNotInChain {
                    trusted: fingerprint,
                });
            }
        };
        let mut chain = Self::new(trusted);
        for (position, rotation) in rotations.iter().enumerate().skip(start) {
            chain.rotate(position, rotation)?;
        }
        Ok(chain)
    }

    /// The chain of a checkpoint log's era: from its first key through every rotation after
    /// it, in order, each of which must hand over from the key in force.
    pub fn from_first(first: PublicKey, rotations: &[KeyRotation]) -> Result<Self, RotationError> {
        let mut chain = Self::new(first);
        for (position, rotation) in rotations.iter().enumerate() {
            chain.rotate(position, rotation)?;
        }
        Ok(chain)
    }

    /// Accepts one more rotation statement (at `position` in the caller's list, for errors).
    fn rotate(&mut self, position: usize, rotation: &KeyRotation) -> Result<(), RotationError> {
        let in_force = self.current.fingerprint();
        if rotation.old_key_fingerprint != in_force {
            return Err(RotationError::WrongOldKey {
                position,
                named: rotation.old_key_fingerprint,
                in_force,
            });
        }
        let new_key = rotation.new_public_key.fingerprint();
        if rotation.verify_signature(&self.current.key).is_err() {
            return Err(RotationError::Forged {
                position,
                new_key,
                in_force,
            });
        }
        if let Some(from) = &self.current.from
            && (rotation.tree_size < from.tree_size || rotation.time < from.time)
        {
            return Err(RotationError::GoesBack {
                position,
                tree_size: rotation.tree_size,
                in_force,
            });
        }
        if self.epochs().any(|epoch| epoch.fingerprint() == new_key) {
            return Err(RotationError::KeyReused {
                position,
                fingerprint: new_key,
            });
        }
        let handover = rotation.handover();
        let next = KeyEpoch {
            key: rotation.new_public_key,
            from: Some(handover),
            until: None,
        };
        let mut retiring = std::mem::replace(&mut self.current, next);
        retiring.until = Some(handover);
        self.retired.push(retiring);
        Ok(())
    }

    /// Every key of the chain in order, the trusted key first and the current key last.
    pub fn epochs(&self) -> impl Iterator<Item = &KeyEpoch> {
        self.retired.iter().chain(std::iter::once(&self.current))
    }

    /// The key that signs now.
    pub fn current(&self) -> &KeyEpoch {
        &self.current
    }

    /// Checks a checkpoint: the key it names must be in the chain and valid at the checkpoint's
    /// tree size and time, its signature must verify under that key, and its root must agree
    /// with any handover at the same tree size. Returns the key's epoch.
    pub fn verify_checkpoint(&self, checkpoint: &Checkpoint) -> Result<&KeyEpoch, ChainError> {
        let tree_size = checkpoint.tree_size;
        let epoch = self
            .epochs()
            .find(|epoch| epoch.fingerprint() == checkpoint.key_fingerprint)
            .ok_or(ChainError::UnknownKey {
                tree_size,
                fingerprint: checkpoint.key_fingerprint,
            })?;
        checkpoint.verify(&epoch.key)?;
        if let Some(from) = &epoch.from
            && (tree_size < from.tree_size || checkpoint.time < from.time)
        {
            return Err(ChainError::NotYetValid {
                tree_size,
                fingerprint: epoch.fingerprint(),
                introduced_at: from.tree_size,
            });
        }
        if let Some(until) = &epoch.until
            && (tree_size > until.tree_size || checkpoint.time > until.time)
        {
            return Err(ChainError::RetiredKey {
                tree_size,
                fingerprint: epoch.fingerprint(),
                retired_at: until.tree_size,
            });
        }
        if let Some(handover) = self
            .retired
            .iter()
            .filter_map(|epoch| epoch.until.as_ref())
            .find(|h| h.tree_size == tree_size && h.root != checkpoint.root)
        {
            return Err(ChainError::Fork {
                tree_size,
                root: checkpoint.root,
                other_root: handover.root,
            });
        }
        Ok(epoch)
    }

    /// Checks a list of checkpoints in the order the log made them: each one as
    /// [`KeyChain::verify_checkpoint`] does, tree sizes and times never going back, and one root
    /// per tree size.
    pub fn verify_checkpoints(&self, checkpoints: &[Checkpoint]) -> Result<(), ChainError> {
        let mut previous: Option<&Checkpoint> = None;
        for checkpoint in checkpoints {
            self.verify_checkpoint(checkpoint)?;
            if let Some(previous) = previous {
                if checkpoint.tree_size < previous.tree_size || checkpoint.time < previous.time {
                    return Err(ChainError::OutOfOrder {
                        previous_size: previous.tree_size,
                        tree_size: checkpoint.tree_size,
                    });
                }
                if checkpoint.tree_size == previous.tree_size && checkpoint.root != previous.root {
                    return Err(ChainError::Fork {
                        tree_size: checkpoint.tree_size,
                        root: checkpoint.root,
                        other_root: previous.root,
                    });
                }
            }
            previous = Some(checkpoint);
        }
        Ok(())
    }
}
