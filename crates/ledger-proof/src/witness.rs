//! The C2SP `tlog-witness` protocol (<https://c2sp.org/tlog-witness>), both sides: the
//! `add-checkpoint` request a log sends, and the checks a witness makes before it cosigns.
//!
//! The request body is `old {size}\n`, up to 63 consistency-proof lines (base64 hashes), a
//! blank line, then the checkpoint note. A witness keeps, per log origin, the latest checkpoint
//! it cosigned, and cosigns a new one only when the log's signature verifies under a key it
//! trusts for the origin, the old size is the size it holds, and the proof shows the new tree
//! extends the one it holds. Each refusal has the HTTP status the protocol gives it.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Digest;
use crate::cosignature::cosigned_message;
use crate::hasher::{MerkleHasher, Sha256};
use crate::keys::SigningKey;
use crate::note::{Note, NoteError, NoteSignature, TYPE_COSIGNATURE_V1, VerifierKey, key_id};
use crate::verify::verify_consistency;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Most consistency-proof lines a request may carry.
pub const PROOF_LINES_MAX: usize = 63;

/// Why a witness refuses a checkpoint, with the status the protocol gives each case.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WitnessError {
    /// The request is not an add-checkpoint body, or its old size is above the checkpoint's
    /// (a log asking to go back). 400.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// No trusted key for the checkpoint's origin. 404.
    #[error("unknown log origin {0:?}")]
    UnknownOrigin(String),
    /// No valid signature of a trusted key for the origin. 403.
    #[error("the checkpoint is not signed by a key trusted for its origin: {0}")]
    Forbidden(String),
    /// The old size is not the size of the latest checkpoint cosigned for the origin. 409, with
    /// that size.
    #[error("the old size {old} is not {cosigned}, the size last cosigned for this log")]
    Conflict {
        /// The old size the log sent.
        old: u64,
        /// The size the witness last cosigned.
        cosigned: u64,
    },
    /// The proof does not show the new tree extends the one cosigned (a fork, or a rewritten
    /// log), or the same size comes with another root. 422.
    #[error("unprocessable: {0}")]
    Unprocessable(String),
}

impl WitnessError {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        match self {
            WitnessError::BadRequest(_) => 400,
            WitnessError::UnknownOrigin(_) => 404,
            WitnessError::Forbidden(_) => 403,
            WitnessError::Conflict { .. } => 409,
            WitnessError::Unprocessable(_) => 422,
        }
    }
}

/// An add-checkpoint request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The size of the checkpoint the log believes the witness holds.
    pub old_size: u64,
    /// The consistency proof from `old_size` to the checkpoint's size.
    pub proof: Vec<Digest>,
    /// The checkpoint, as a signed note.
    pub note: Note,
}

/// What a witness holds of one log: the latest checkpoint it cosigned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogState {
    /// Its tree size.
    pub size: u64,
    /// Its root.
    pub root: Digest,
    /// The note as cosigned: the log's signature and the witness's.
    pub note: String,
}

impl AddCheckpoint {
    /// The request body.
    pub fn render(old_size: u64, proof: &[Digest], note: &str) -> String {
        let mut body = format!("old {old_size}\n");
        for hash in proof {
            body.push_str(&B64.encode(hash.as_bytes()));
            body.push('\n');
        }
        body.push('\n');
        body.push_str(note);
        body
    }

    /// Parses a request body.
    pub fn parse(body: &str) -> Result<Self, WitnessError> {
        let bad = |why: &str| WitnessError::BadRequest(why.into());
        let (head, note) = body
            .split_once("\n\n")
            .ok_or_else(|| bad("no blank line before the checkpoint"))?;
        let mut lines = head.split('\n');
        let old_size = lines
            .next()
            .and_then(|l| l.strip_prefix("old "))
            .and_then(decimal)
            .ok_or_else(|| bad("the first line is not `old SIZE`"))?;
        let proof = lines
            .map(|line| {
                let raw = B64
                    .decode(line)
                    .map_err(|_| bad("a proof line is not base64"))?;
                <[u8; 32]>::try_from(raw.as_slice())
                    .map(Digest)
                    .map_err(|_| bad("a proof line is not a 32-byte hash"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if proof.len() > PROOF_LINES_MAX {
            return Err(bad("more than 63 proof lines"));
        }
        let note = Note::parse(note).map_err(|e| bad(&e.to_string()))?;
        Ok(Self {
            old_size,
            proof,
            note,
        })
    }
}

/// The first three lines of a checkpoint body: origin, size, root.
pub fn checkpoint_head(text: &str) -> Result<(String, u64, Digest), WitnessError> {
    let bad = |why: &str| WitnessError::BadRequest(format!("not a checkpoint: {why}"));
    let mut lines = text.split('\n');
    let origin = lines
        .next()
        .filter(|o| !o.is_empty())
        .ok_or_else(|| bad("no origin"))?;
    let size = lines
        .next()
        .and_then(decimal)
        .ok_or_else(|| bad("the size is not a decimal number"))?;
    let root = lines
        .next()
        .and_then(|r| B64.decode(r).ok())
        .and_then(|r| <[u8; 32]>::try_from(r.as_slice()).ok())
        .map(Digest)
        .ok_or_else(|| bad("the root is not a base64 hash"))?;
    Ok((origin.to_owned(), size, root))
}

/// Checks an add-checkpoint request against the keys trusted for its origin and the state held
/// for it; returns the origin, size and root to record once cosigned.
pub fn check_add(
    request: &AddCheckpoint,
    trusted: &[VerifierKey],
    held: Option<&LogState>,
) -> Result<(String, u64, Digest), WitnessError> {
    let (origin, size, root) = checkpoint_head(&request.note.text)?;
    let keys: Vec<&VerifierKey> = trusted.iter().filter(|k| k.name() == origin).collect();
    if keys.is_empty() {
        return Err(WitnessError::UnknownOrigin(origin));
    }
    let mut signed = false;
    for key in &keys {
        match request.note.verify_ed25519(key) {
            Ok(()) => signed = true,
            Err(NoteError::NotSigned(_)) => {}
            Err(e) => return Err(WitnessError::Forbidden(e.to_string())),
        }
    }
    if !signed {
        return Err(WitnessError::Forbidden(
            "no signature by a trusted key".into(),
        ));
    }
    if request.old_size > size {
        return Err(WitnessError::BadRequest(format!(
            "the old size {} is above the checkpoint's {size}: a log does not shrink",
            request.old_size
        )));
    }
    let cosigned = held.map_or(0, |h| h.size);
    if request.old_size != cosigned {
        return Err(WitnessError::Conflict {
            old: request.old_size,
            cosigned,
        });
    }
    if size == 0 && root != Sha256.empty_root() {
        return Err(WitnessError::Unprocessable(
            "an empty tree with another root than the hash of nothing".into(),
        ));
    }
    match held {
        _ if cosigned == 0 && !request.proof.is_empty() => Err(WitnessError::Unprocessable(
            "a proof from the empty tree, which needs none".into(),
        )),
        Some(h) if h.size == size && h.root != root => Err(WitnessError::Unprocessable(format!(
            "a second root for tree size {size}: the log forked"
        ))),
        Some(h) if h.size > 0 && h.size < size => {
            verify_consistency(&Sha256, h.size, size, &h.root, &root, &request.proof).map_err(|e| {
                WitnessError::Unprocessable(format!(
                    "the tree of {size} does not extend the tree of {} cosigned before ({e}): the log forked or was rewritten",
                    h.size
                ))
            })?;
            Ok((origin, size, root))
        }
        _ => Ok((origin, size, root)),
    }
}

/// The witness's cosignature line (c2sp.org/tlog-cosignature v1) on a checkpoint `body`.
pub fn cosign(
    key: &SigningKey,
    name: &str,
    body: &str,
    timestamp: u64,
) -> Result<NoteSignature, NoteError> {
    crate::note::check_key_name(name)?;
    let signature = key.sign(cosigned_message(body, timestamp).as_bytes());
    let mut bytes = timestamp.to_be_bytes().to_vec();
    bytes.extend_from_slice(&signature.0);
    Ok(NoteSignature {
        name: name.to_owned(),
        id: key_id(name, TYPE_COSIGNATURE_V1, &key.public_key().to_bytes()),
        bytes,
    })
}

fn decimal(text: &str) -> Option<u64> {
    if text.is_empty()
        || !text.bytes().all(|b| b.is_ascii_digit())
        || (text.len() > 1 && text.starts_with('0'))
    {
        return None;
    }
    text.parse().ok()
}
