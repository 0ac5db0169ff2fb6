//! Signed checkpoints: a tree size and its root, signed by the ledger's key.
//!
//! A checkpoint is what an auditor keeps. Its signature covers exactly the text
//!
//! ```text
//! research-ledger checkpoint v1\n{tree_size}\n{root_hex}\n{time}\n
//! ```
//!
//! with the size in decimal, the root in lowercase hex and the time in the canonical form of
//! [`Timestamp`]. The first line names what is signed, so a checkpoint signature can never be
//! read as a key rotation statement or anything else the key signs. The key fingerprint is not
//! signed: it only says which key to check with, and checking with the wrong key fails.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::keys::{BadSignature, Fingerprint, PublicKey, Signature, SigningKey};
use crate::{Digest, Timestamp};

/// A signed statement that the ledger's tree had `tree_size` leaves and root `root` at `time`.
///
/// JSON: `{"tree_size": 7, "root": "<64 hex>", "time": "2025-03-01T09:30:00Z",
/// "key_fingerprint": "<16 hex>", "signature": "<128 hex>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// Number of leaves (events) in the tree.
    pub tree_size: u64,
    /// The tree's root.
    pub root: Digest,
    /// When the checkpoint was made.
    pub time: Timestamp,
    /// Fingerprint of the key that signed it.
    pub key_fingerprint: Fingerprint,
    /// Ed25519 signature over [`Checkpoint::signed_text`].
    pub signature: Signature,
}

/// Why a checkpoint was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The checkpoint names another key than the one it is being checked with. Either the
    /// checkpoint was signed by a key the verifier does not trust, or the field was altered.
    #[error("the checkpoint names key {named}, but is checked with key {key}")]
    WrongKey {
        /// Fingerprint the checkpoint names.
        named: Fingerprint,
        /// Fingerprint of the key it was checked with.
        key: Fingerprint,
    },
    /// The signature does not cover this size, root and time under that key: the checkpoint
    /// was altered after signing, or forged.
    #[error("the signature of the checkpoint at tree size {tree_size} does not verify")]
    BadSignature {
        /// The tree size the checkpoint states.
        tree_size: u64,
    },
}

impl Checkpoint {
    /// The exact text a checkpoint's signature covers.
    pub fn signed_text(tree_size: u64, root: &Digest, time: &Timestamp) -> String {
        format!("research-ledger checkpoint v1\n{tree_size}\n{root}\n{time}\n")
    }

    /// Signs a checkpoint for the tree of `tree_size` leaves with root `root`.
    pub fn sign(key: &SigningKey, tree_size: u64, root: Digest, time: Timestamp) -> Self {
        let signature = key.sign(Self::signed_text(tree_size, &root, &time).as_bytes());
        Self {
            tree_size,
            root,
            time,
            key_fingerprint: key.fingerprint(),
            signature,
        }
    }

    /// Checks that `key` signed this checkpoint as it stands.
    pub fn verify(&self, key: &PublicKey) -> Result<(), CheckpointError> {
        if self.key_fingerprint != key.fingerprint() {
            return Err(CheckpointError::WrongKey {
                named: self.key_fingerprint,
                key: key.fingerprint(),
            });
        }
        let text = Self::signed_text(self.tree_size, &self.root, &self.time);
        key.verify(text.as_bytes(), &self.signature)
            .map_err(|BadSignature| CheckpointError::BadSignature {
                tree_size: self.tree_size,
            })
    }
}
