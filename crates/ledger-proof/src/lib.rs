//! The verifiable math of the ledger, small enough for an auditor to read.
//!
//! - [`hasher`]: the hash functions of an RFC 6962 / RFC 9162 §2.1 Merkle tree, with BLAKE3
//!   ([`Blake3`]) for the ledger.
//! - [`tree`]: roots and proofs from stored perfect-subtree hashes ([`NodeSource`]).
//! - [`frontier`]: the right edge of a growing tree, for appending without reading back.
//! - [`memory`]: a whole tree in memory.
//! - [`verify`]: checking inclusion and consistency proofs, step by step as RFC 9162 states it.
//! - [`checkpoint`], [`keys`], [`time`]: signed checkpoints, Ed25519 keys and the canonical time.
//! - [`rotation`]: key rotation statements and the [`KeyChain`] that says which key signs when.
//! - [`proof_file`]: proof files and [`verify_proof_file`], the one check an auditor runs.
//! - [`manifest`]: the signed list of what an export bundle holds.
//!
//! This crate does no I/O, reads no clock and draws no randomness: times, keys' random bytes
//! and stored nodes all come from the caller.

// Every public item is part of what an auditor reads; none goes undocumented.

pub mod checkpoint;
pub mod digest;
pub mod frontier;
pub mod hasher;
mod hex_text;
pub mod keys;
pub mod manifest;
pub mod memory;
pub mod proof_file;
pub mod recovery;
pub mod rotation;
pub mod time;
pub mod tree;
pub mod verify;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use digest::Digest;
pub use frontier::{Frontier, FrontierError};
pub use hasher::{Blake3, MerkleHasher};
pub use hex_text::HexError;
pub use keys::{BadSignature, Fingerprint, KeyError, PublicKey, Signature, SigningKey};
pub use manifest::{Manifest, ManifestError, SignedManifest};
pub use memory::{MemoryTree, MissingNode};
pub use proof_file::{
    ConsistencyProofFile, InclusionProofFile, PROOF_FILE_BYTES_MAX, ProofFile, ProofFileError,
    Verified, verify_proof_file, verify_proof_file_json,
};
pub use recovery::{RecoveryAction, RecoveryError, RecoveryFacts, RecoveryStatement};
pub use rotation::{ChainError, Handover, KeyChain, KeyEpoch, KeyRotation, RotationError};
pub use time::{TimeError, Timestamp};
pub use tree::{NodeSource, PerfectNode, ProveError, consistency_proof, inclusion_proof, root};
pub use verify::{
    ConsistencyError, InclusionError, consistency_path_len, inclusion_path_len,
    root_from_inclusion_proof, verify_consistency, verify_inclusion,
};
