//! Signed checkpoints: C2SP `tlog-checkpoint` bodies (<https://c2sp.org/tlog-checkpoint>)
//! signed as C2SP signed notes with the ledger's Ed25519 key.
//!
//! The body, which the signature covers byte for byte, is
//!
//! ```text
//! {origin}\n{tree_size}\n{base64 root}\ntime {YYYY-MM-DDTHH:MM:SSZ}\n
//! ```
//!
//! the origin (which also names the signing key), the size in decimal, the RFC 6962 SHA-256
//! root in standard base64, and one extension line with the time in the canonical form of
//! [`Timestamp`]. The note is that body, a blank line, and the signature line
//! `— {origin} base64(key ID ‖ signature)`. The JSON form the ledger keeps holds the same
//! facts; the key fingerprint in it is not signed: it only says which key to check with.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::keys::{BadSignature, Fingerprint, PublicKey, Signature, SigningKey};
use crate::note::{self, Note, NoteError, NoteSignature, VerifierKey};
use crate::{Digest, Timestamp};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A signed statement that the log `origin` had `tree_size` leaves and root `root` at `time`.
///
/// JSON: `{"origin": "…", "tree_size": 7, "root": "<64 hex>", "time": "2025-03-01T09:30:00Z",
/// "key_fingerprint": "<16 hex>", "signature": "<128 hex>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// The log's origin line, also the name of its key.
    pub origin: String,
    /// Number of leaves (events) in the tree.
    pub tree_size: u64,
    /// The tree's root.
    pub root: Digest,
    /// When the checkpoint was made.
    pub time: Timestamp,
    /// Fingerprint of the key that signed it.
    pub key_fingerprint: Fingerprint,
    /// Ed25519 signature over [`Checkpoint::body`].
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
    /// The signature does not cover this origin, size, root and time under that key: the
    /// checkpoint was altered after signing, or forged.
    #[error("the signature of the checkpoint at tree size {tree_size} does not verify")]
    BadSignature {
        /// The tree size the checkpoint states.
        tree_size: u64,
    },
    /// The origin cannot be a key name (empty, a space or a `+`).
    #[error("the origin {0:?} cannot name a key")]
    BadOrigin(String),
    /// A note that is not a checkpoint of this form.
    #[error("not a checkpoint note: {0}")]
    NotACheckpoint(String),
    /// The note's signature lines.
    #[error(transparent)]
    Note(#[from] NoteError),
}

/// The body of a checkpoint, as a note's text.
pub fn checkpoint_body(origin: &str, tree_size: u64, root: &Digest, time: &Timestamp) -> String {
    format!(
        "{origin}\n{tree_size}\n{}\ntime {time}\n",
        B64.encode(root.as_bytes())
    )
}

impl Checkpoint {
    /// The exact text a checkpoint's signature covers: the note body.
    pub fn body(&self) -> String {
        checkpoint_body(&self.origin, self.tree_size, &self.root, &self.time)
    }

    /// Signs a checkpoint of the log `origin` for the tree of `tree_size` leaves with root
    /// `root`.
    pub fn sign(
        key: &SigningKey,
        origin: &str,
        tree_size: u64,
        root: Digest,
        time: Timestamp,
    ) -> Result<Self, CheckpointError> {
        note::check_key_name(origin).map_err(|_| CheckpointError::BadOrigin(origin.into()))?;
        let body = checkpoint_body(origin, tree_size, &root, &time);
        let signature = key.sign(body.as_bytes());
        Ok(Self {
            origin: origin.to_owned(),
            tree_size,
            root,
            time,
            key_fingerprint: key.fingerprint(),
            signature,
        })
    }

    /// Checks that `key` signed this checkpoint as it stands.
    pub fn verify(&self, key: &PublicKey) -> Result<(), CheckpointError> {
        if self.key_fingerprint != key.fingerprint() {
            return Err(CheckpointError::WrongKey {
                named: self.key_fingerprint,
                key: key.fingerprint(),
            });
        }
        key.verify(self.body().as_bytes(), &self.signature)
            .map_err(|BadSignature| CheckpointError::BadSignature {
                tree_size: self.tree_size,
            })
    }

    /// The verifier key of the signature, given the public key that made it.
    pub fn verifier_key(&self, key: PublicKey) -> Result<VerifierKey, CheckpointError> {
        Ok(VerifierKey::ed25519(&self.origin, key)?)
    }

    /// The log's signature line.
    pub fn signature_line(&self, key: PublicKey) -> Result<NoteSignature, CheckpointError> {
        let vkey = self.verifier_key(key)?;
        Ok(NoteSignature {
            name: self.origin.clone(),
            id: vkey.id(),
            bytes: self.signature.0.to_vec(),
        })
    }

    /// The signed note: the body, a blank line, the log's signature line.
    pub fn note(&self, key: PublicKey) -> Result<Note, CheckpointError> {
        Ok(Note {
            text: self.body(),
            signatures: vec![self.signature_line(key)?],
        })
    }

    /// Reads a checkpoint back from a note signed by `vkey` (other signature lines, such as
    /// cosignatures, are left to the caller): the body must be exactly this format, and the
    /// signature must verify.
    pub fn from_note(note: &Note, vkey: &VerifierKey) -> Result<Self, CheckpointError> {
        let (origin, tree_size, root, time) = parse_body(&note.text)?;
        if vkey.name() != origin {
            return Err(CheckpointError::NotACheckpoint(format!(
                "the origin {origin:?} is not the key's name {:?}",
                vkey.name()
            )));
        }
        note.verify_ed25519(vkey)?;
        let line = note
            .signatures
            .iter()
            .find(|s| s.is_by(vkey))
            .ok_or_else(|| NoteError::NotSigned(origin.clone()))?;
        let raw = <[u8; 64]>::try_from(line.bytes.as_slice())
            .map_err(|_| NoteError::BadSignature(origin.clone()))?;
        Ok(Self {
            origin,
            tree_size,
            root,
            time,
            key_fingerprint: vkey.key().fingerprint(),
            signature: Signature(raw),
        })
    }
}

/// Parses a checkpoint body: origin, decimal size, base64 root, `time` line, nothing else.
pub fn parse_body(text: &str) -> Result<(String, u64, Digest, Timestamp), CheckpointError> {
    let bad = |why: &str| CheckpointError::NotACheckpoint(why.into());
    let lines: Vec<&str> = text
        .strip_suffix('\n')
        .ok_or_else(|| bad("no final newline"))?
        .split('\n')
        .collect();
    let [origin, size, root, time] = lines.as_slice() else {
        return Err(bad("not four lines (origin, size, root, time)"));
    };
    note::check_key_name(origin).map_err(|_| CheckpointError::BadOrigin((*origin).into()))?;
    let canonical = !size.is_empty()
        && size.bytes().all(|b| b.is_ascii_digit())
        && (size.len() == 1 || !size.starts_with('0'));
    let tree_size: u64 = match size.parse() {
        Ok(n) if canonical => n,
        _ => {
            return Err(bad(
                "the size is not a decimal number without leading zeros",
            ));
        }
    };
    let raw = B64
        .decode(root)
        .map_err(|_| bad("the root is not base64"))?;
    let root =
        Digest(<[u8; 32]>::try_from(raw.as_slice()).map_err(|_| bad("the root is not 32 bytes"))?);
    let time = time
        .strip_prefix("time ")
        .and_then(|t| Timestamp::parse(t).ok())
        .ok_or_else(|| bad("the fourth line is not `time YYYY-MM-DDTHH:MM:SSZ`"))?;
    Ok(((*origin).to_owned(), tree_size, root, time))
}
