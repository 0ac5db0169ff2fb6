//! The verifiable math of the ledger, small enough for an auditor to read.
//!
//! - [`hasher`]: the hash functions of an RFC 6962 / RFC 9162 §2.1 Merkle tree, with SHA-256
//!   ([`Sha256`]), exactly RFC 6962's.
//! - [`tree`]: roots and proofs from stored perfect-subtree hashes ([`NodeSource`]).
//! - [`frontier`]: the right edge of a growing tree, for appending without reading back.
//! - [`memory`]: a whole tree in memory.
//! - [`verify`]: checking inclusion and consistency proofs, step by step as RFC 9162 states it.
//! - [`note`]: C2SP signed notes and verifier keys.
//! - [`checkpoint`], [`keys`], [`time`]: C2SP checkpoints signed by the ledger's Ed25519 key,
//!   and the canonical time.
//! - [`rotation`]: key rotation statements and the [`KeyChain`] that says which key signs when.
//! - [`cosignature`]: witness cosignatures (C2SP `tlog-cosignature`).
//! - [`tile`]: C2SP `tlog-tiles` tile paths.
//! - [`witness`]: the C2SP `tlog-witness` request and the checks a witness makes.
//! - [`proof_file`]: proof files and [`verify_proof_file`], the one check an auditor runs.
//! - [`manifest`]: the signed list of what an export bundle holds.
//!
//! This crate does no I/O, reads no clock and draws no randomness: times, keys' random bytes
//! and stored nodes all come from the caller.

// Every public item is part of what an auditor reads; none goes undocumented.

pub mod checkpoint;
pub mod cosignature;
pub mod digest;
pub mod frontier;
pub mod hasher;
mod hex_text;
pub mod keys;
pub mod manifest;
pub mod memory;
pub mod note;
pub mod proof_file;
pub mod recovery;
pub mod rotation;
pub mod tile;
pub mod time;
pub mod tree;
pub mod verify;
pub mod witness;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use cosignature::{Cosignature, CosignatureError};
pub use digest::Digest;
pub use frontier::{Frontier, FrontierError};
pub use hasher::{MerkleHasher, Sha256};
pub use hex_text::HexError;
pub use keys::{BadSignature, Fingerprint, KeyError, PublicKey, Signature, SigningKey};
pub use manifest::{IdempotencyLine, Manifest, ManifestError, SignedManifest};
pub use memory::{MemoryTree, MissingNode};
pub use note::{Note, NoteError, NoteSignature, VerifierKey};
pub use proof_file::{
    ConsistencyProofFile, InclusionProofFile, PROOF_FILE_BYTES_MAX, ProofFile, ProofFileError,
    Verified, verify_proof_file, verify_proof_file_json,
};
pub use recovery::{RecoveryAction, RecoveryError, RecoveryFacts, RecoveryStatement};
pub use rotation::{ChainError, Handover, KeyChain, KeyEpoch, KeyRotation, RotationError};
pub use tile::{Tile, TilePathError};
pub use time::{TimeError, Timestamp};
pub use tree::{NodeSource, PerfectNode, ProveError, consistency_proof, inclusion_proof, root};
pub use verify::{
    ConsistencyError, InclusionError, consistency_path_len, inclusion_path_len,
    root_from_inclusion_proof, verify_consistency, verify_inclusion,
};
