//! Witness cosignatures: C2SP `tlog-cosignature` v1 with Ed25519
//! (<https://c2sp.org/tlog-cosignature>).
//!
//! A witness that has checked a checkpoint against every earlier one it saw of the same log
//! signs
//!
//! ```text
//! cosignature/v1\ntime {POSIX seconds}\n{the checkpoint's whole body}
//! ```
//!
//! and returns the note signature line `— {witness name} base64(key ID ‖ u64 BE timestamp ‖
//! signature)`, with key ID `SHA-256(name ‖ 0x0A ‖ 0x04 ‖ public key)[:4]`. A cosignature says:
//! as of that time, the largest consistent tree the witness has seen of the log has this root.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::checkpoint::Checkpoint;
use crate::keys::{BadSignature, Signature, SigningKey};
use crate::note::{NoteError, NoteSignature, TYPE_COSIGNATURE_V1, VerifierKey, key_id};
use crate::{Digest, Timestamp};

/// Why a cosignature was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CosignatureError {
    /// The line is not by the witness key it is checked with (name or key ID).
    #[error("the cosignature is not by {0}")]
    NotByWitness(String),
    /// Not 8 + 64 bytes after the key ID.
    #[error("the cosignature by {0} is not a timestamped Ed25519 signature")]
    Malformed(String),
    /// The signature does not verify over the checkpoint at that time.
    #[error("the cosignature by {0} does not verify")]
    BadSignature(String),
    /// A verifier key of another type than a cosigner's.
    #[error(transparent)]
    Note(#[from] NoteError),
}

/// The message a witness signs for `body` at `timestamp`.
pub fn cosigned_message(body: &str, timestamp: u64) -> String {
    format!("cosignature/v1\ntime {timestamp}\n{body}")
}

/// A witness's cosignature of one of the log's checkpoints, as the ledger keeps it: the
/// checkpoint it cosigns (origin, size, root, time: enough to rebuild the body), the witness's
/// verifier key, the time it signed, and the signature.
///
/// JSON: `{"origin": "…", "tree_size": 7, "root": "<64 hex>", "time": "…", "witness":
/// "<vkey>", "timestamp": 1700000000, "signature": "<128 hex>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cosignature {
    /// The log's origin.
    pub origin: String,
    /// The size of the checkpoint cosigned.
    pub tree_size: u64,
    /// Its root.
    pub root: Digest,
    /// Its time.
    pub time: Timestamp,
    /// The witness's verifier key (type `0x04`).
    pub witness: VerifierKey,
    /// When the witness signed, in POSIX seconds.
    pub timestamp: u64,
    /// The Ed25519 signature over [`cosigned_message`].
    pub signature: Signature,
}

impl Cosignature {
    /// The witness's cosignature of `checkpoint` at `timestamp`.
    pub fn sign(
        witness: &SigningKey,
        name: &str,
        checkpoint: &Checkpoint,
        timestamp: u64,
    ) -> Result<Self, CosignatureError> {
        let vkey = VerifierKey::cosigner(name, witness.public_key())?;
        let message = cosigned_message(&checkpoint.body(), timestamp);
        Ok(Self {
            origin: checkpoint.origin.clone(),
            tree_size: checkpoint.tree_size,
            root: checkpoint.root,
            time: checkpoint.time,
            witness: vkey,
            timestamp,
            signature: witness.sign(message.as_bytes()),
        })
    }

    /// The body of the checkpoint cosigned.
    pub fn body(&self) -> String {
        crate::checkpoint::checkpoint_body(&self.origin, self.tree_size, &self.root, &self.time)
    }

    /// Whether it cosigns exactly `checkpoint`'s body.
    pub fn cosigns(&self, checkpoint: &Checkpoint) -> bool {
        self.origin == checkpoint.origin
            && self.tree_size == checkpoint.tree_size
            && self.root == checkpoint.root
            && self.time == checkpoint.time
    }

    /// Checks the signature under the witness key it names.
    pub fn verify(&self) -> Result<(), CosignatureError> {
        let message = cosigned_message(&self.body(), self.timestamp);
        self.witness
            .key()
            .verify(message.as_bytes(), &self.signature)
            .map_err(|BadSignature| CosignatureError::BadSignature(self.witness.name().into()))
    }

    /// The note signature line.
    pub fn line(&self) -> NoteSignature {
        let mut bytes = self.timestamp.to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.signature.0);
        NoteSignature {
            name: self.witness.name().to_owned(),
            id: self.witness.id(),
            bytes,
        }
    }

    /// Reads a cosignature line of `witness` on `checkpoint`, checking it.
    pub fn from_line(
        line: &NoteSignature,
        witness: &VerifierKey,
        checkpoint: &Checkpoint,
    ) -> Result<Self, CosignatureError> {
        if witness.sig_type() != TYPE_COSIGNATURE_V1 {
            return Err(NoteError::WrongType {
                found: witness.sig_type(),
                expected: TYPE_COSIGNATURE_V1,
            }
            .into());
        }
        let expected_id = key_id(
            witness.name(),
            TYPE_COSIGNATURE_V1,
            &witness.key().to_bytes(),
        );
        if line.name != witness.name() || line.id != expected_id {
            return Err(CosignatureError::NotByWitness(witness.name().into()));
        }
        let malformed = || CosignatureError::Malformed(witness.name().into());
        if line.bytes.len() != 72 {
            return Err(malformed());
        }
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&line.bytes[..8]);
        let timestamp = u64::from_be_bytes(ts);
        if timestamp >= 1 << 63 {
            return Err(malformed());
        }
        let signature = Signature(<[u8; 64]>::try_from(&line.bytes[8..]).map_err(|_| malformed())?);
        let cosignature = Self {
            origin: checkpoint.origin.clone(),
            tree_size: checkpoint.tree_size,
            root: checkpoint.root,
            time: checkpoint.time,
            witness: witness.clone(),
            timestamp,
            signature,
        };
        cosignature.verify()?;
        Ok(cosignature)
    }
}
