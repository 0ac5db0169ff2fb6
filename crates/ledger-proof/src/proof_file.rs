//! Proof files: an inclusion or consistency proof together with the signed checkpoints it
//! stands on, as the ledger hands them to auditors, and the one check an auditor runs on them.
//!
//! An inclusion file:
//!
//! ```json
//! {"kind": "inclusion", "tree_size": 7, "leaf_index": 3,
//!  "event_hash": "<64 hex>", "leaf_hash": "<64 hex>", "path": ["<64 hex>", ...],
//!  "checkpoint": {<checkpoint>}, "key_rotations": [{<rotation>}, ...]}
//! ```
//!
//! `event_hash` is the ledger's hash of the event (the leaf's data); `leaf_hash` is its Merkle
//! leaf hash `SHA-256(0x00 ‖ event_hash)`, stated so the file can be checked with RFC 9162 tools.
//!
//! A consistency file:
//!
//! ```json
//! {"kind": "consistency", "first_size": 4, "second_size": 7, "path": ["<64 hex>", ...],
//!  "first_checkpoint": {<checkpoint>}, "second_checkpoint": {<checkpoint>},
//!  "key_rotations": [...]}
//! ```
//!
//! `key_rotations` (may be empty or absent) links the auditor's trusted key to the keys that
//! signed the checkpoints. Unknown fields are refused: a verifier must never pass over something
//! it does not understand.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::checkpoint::Checkpoint;
use crate::keys::PublicKey;
use crate::rotation::{ChainError, KeyChain, KeyRotation, RotationError};
use crate::verify::{ConsistencyError, InclusionError, verify_consistency, verify_inclusion};
use crate::{Digest, MerkleHasher, Sha256};

/// The largest proof file accepted, in bytes. A real proof file is a few kilobytes (a path has
/// at most 64 hashes); the bound keeps a hostile file from costing more than that to refuse.
pub const PROOF_FILE_BYTES_MAX: usize = 1 << 20;

/// A proof file of either kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProofFile {
    /// One event is in the log.
    Inclusion(InclusionProofFile),
    /// A later log extends an earlier one.
    Consistency(ConsistencyProofFile),
}

/// Proof that one event is leaf `leaf_index` of the tree a checkpoint signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InclusionProofFile {
    /// Size of the tree the proof is against; must equal the checkpoint's.
    pub tree_size: u64,
    /// Position of the event in the log (its leaf index).
    pub leaf_index: u64,
    /// The event's hash: the leaf's data.
    pub event_hash: Digest,
    /// The Merkle leaf hash `SHA-256(0x00 ‖ event_hash)`.
    pub leaf_hash: Digest,
    /// The audit path, from the leaf's sibling upwards.
    pub path: Vec<Digest>,
    /// The signed checkpoint whose root the path leads to.
    pub checkpoint: Checkpoint,
    /// Rotation statements from the auditor's trusted key to the checkpoint's key.
    #[serde(default)]
    pub key_rotations: Vec<KeyRotation>,
}

/// Proof that the tree of one checkpoint extends the tree of an earlier one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsistencyProofFile {
    /// Size of the earlier tree; must equal the first checkpoint's.
    pub first_size: u64,
    /// Size of the later tree; must equal the second checkpoint's.
    pub second_size: u64,
    /// The consistency proof, in RFC 9162 order.
    pub path: Vec<Digest>,
    /// The earlier signed checkpoint (typically the one the auditor kept).
    pub first_checkpoint: Checkpoint,
    /// The later signed checkpoint.
    pub second_checkpoint: Checkpoint,
    /// Rotation statements from the auditor's trusted key to the checkpoints' keys.
    #[serde(default)]
    pub key_rotations: Vec<KeyRotation>,
}

impl InclusionProofFile {
    /// The file for `event_hash` at `leaf_index` with `path` against `checkpoint`; the tree
    /// size and leaf hash are taken from those, so they agree.
    pub fn new(
        leaf_index: u64,
        event_hash: Digest,
        path: Vec<Digest>,
        checkpoint: Checkpoint,
        key_rotations: Vec<KeyRotation>,
    ) -> Self {
        Self {
            tree_size: checkpoint.tree_size,
            leaf_index,
            event_hash,
            leaf_hash: Sha256.leaf(event_hash.as_bytes()),
            path,
            checkpoint,
            key_rotations,
        }
    }
}

impl ConsistencyProofFile {
    /// The file for `path` between two checkpoints; the sizes are taken from them.
    pub fn new(
        path: Vec<Digest>,
        first_checkpoint: Checkpoint,
        second_checkpoint: Checkpoint,
        key_rotations: Vec<KeyRotation>,
    ) -> Self {
        Self {
            first_size: first_checkpoint.tree_size,
            second_size: second_checkpoint.tree_size,
            path,
            first_checkpoint,
            second_checkpoint,
            key_rotations,
        }
    }
}

/// What a proof file was found to prove.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verified {
    /// The event with `event_hash` is leaf `leaf_index` of the log signed by `checkpoint`.
    Inclusion {
        /// Leaf index of the event.
        leaf_index: u64,
        /// The event's hash.
        event_hash: Digest,
        /// The checkpoint it is included under.
        checkpoint: Checkpoint,
    },
    /// The log signed by `second` extends the log signed by `first`: nothing was removed,
    /// changed or reordered in between, only appended.
    Consistency {
        /// The earlier checkpoint.
        first: Checkpoint,
        /// The later checkpoint.
        second: Checkpoint,
    },
}

/// Why a proof file was refused.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProofFileError {
    /// The file is larger than [`PROOF_FILE_BYTES_MAX`]: not a proof file this verifier reads.
    #[error("the proof file has {bytes} bytes, more than the {max} accepted")]
    TooLarge {
        /// Size of the file.
        bytes: usize,
        /// The most accepted.
        max: usize,
    },
    /// The text is not a proof file: not JSON, an unknown kind, a missing or unknown field, or
    /// a malformed value (hex, time, key).
    #[error("not a proof file: {0}")]
    Json(#[from] serde_json::Error),
    /// The rotation statements do not link the trusted key to the signing keys.
    #[error("key rotation: {0}")]
    Rotation(#[from] RotationError),
    /// A checkpoint is not validly signed by a key of the chain.
    #[error("checkpoint: {0}")]
    Checkpoint(#[from] ChainError),
    /// The proof states another tree size than the checkpoint it stands on: it is a proof about
    /// a tree nobody signed.
    #[error("the proof is for tree size {stated}, its checkpoint signs tree size {signed}")]
    SizeMismatch {
        /// Size the proof states.
        stated: u64,
        /// Size the checkpoint signs.
        signed: u64,
    },
    /// The stated leaf hash is not the leaf hash of the stated event hash: the file was altered
    /// or built for another event.
    #[error("leaf hash {stated} is not the leaf hash {computed} of event hash {event_hash}")]
    LeafHashMismatch {
        /// The event hash stated.
        event_hash: Digest,
        /// The leaf hash stated.
        stated: Digest,
        /// The leaf hash of the event hash.
        computed: Digest,
    },
    /// The inclusion proof does not hold.
    #[error("inclusion: {0}")]
    Inclusion(#[from] InclusionError),
    /// The consistency proof does not hold.
    #[error("consistency: {0}")]
    Consistency(#[from] ConsistencyError),
}

impl ProofFile {
    /// Parses a proof file, refusing anything over [`PROOF_FILE_BYTES_MAX`] bytes.
    pub fn from_json(text: &str) -> Result<Self, ProofFileError> {
        if text.len() > PROOF_FILE_BYTES_MAX {
            return Err(ProofFileError::TooLarge {
                bytes: text.len(),
                max: PROOF_FILE_BYTES_MAX,
            });
        }
        Ok(serde_json::from_str(text)?)
    }
}

/// Checks a proof file against the auditor's `trusted` key: first that every checkpoint is
/// signed by a key the rotation statements lead to from `trusted`, valid at that checkpoint;
/// then that the proof's sizes are the checkpoints'; then the RFC 9162 math.
pub fn verify_proof_file(
    file: &ProofFile,
    trusted: &PublicKey,
) -> Result<Verified, ProofFileError> {
    match file {
        ProofFile::Inclusion(file) => {
            let chain = KeyChain::from_rotations(*trusted, &file.key_rotations)?;
            chain.verify_checkpoint(&file.checkpoint)?;
            same_size(file.tree_size, &file.checkpoint)?;
            let computed = Sha256.leaf(file.event_hash.as_bytes());
            if computed != file.leaf_hash {
                return Err(ProofFileError::LeafHashMismatch {
                    event_hash: file.event_hash,
                    stated: file.leaf_hash,
                    computed,
                });
            }
            verify_inclusion(
                &Sha256,
                file.leaf_index,
                file.tree_size,
                &file.leaf_hash,
                &file.path,
                &file.checkpoint.root,
            )?;
            Ok(Verified::Inclusion {
                leaf_index: file.leaf_index,
                event_hash: file.event_hash,
                checkpoint: file.checkpoint.clone(),
            })
        }
        ProofFile::Consistency(file) => {
            let chain = KeyChain::from_rotations(*trusted, &file.key_rotations)?;
            chain.verify_checkpoint(&file.first_checkpoint)?;
            chain.verify_checkpoint(&file.second_checkpoint)?;
            same_size(file.first_size, &file.first_checkpoint)?;
            same_size(file.second_size, &file.second_checkpoint)?;
            verify_consistency(
                &Sha256,
                file.first_size,
                file.second_size,
                &file.first_checkpoint.root,
                &file.second_checkpoint.root,
                &file.path,
            )?;
            Ok(Verified::Consistency {
                first: file.first_checkpoint.clone(),
                second: file.second_checkpoint.clone(),
            })
        }
    }
}

/// Parses and checks a proof file in one step; see [`verify_proof_file`].
pub fn verify_proof_file_json(text: &str, trusted: &PublicKey) -> Result<Verified, ProofFileError> {
    verify_proof_file(&ProofFile::from_json(text)?, trusted)
}

fn same_size(stated: u64, checkpoint: &Checkpoint) -> Result<(), ProofFileError> {
    if stated != checkpoint.tree_size {
        return Err(ProofFileError::SizeMismatch {
            stated,
            signed: checkpoint.tree_size,
        });
    }
    Ok(())
}
