//! The three hash functions that define a Merkle tree of RFC 6962 / RFC 9162 §2.1 shape.
//!
//! A leaf hash and an interior node hash start with different bytes (0x00 and 0x01), so a leaf
//! can never be passed off as an interior node or the other way round (a second-preimage attack
//! on the tree). The tree algorithms are generic over the hash; the ledger's tree is RFC 6962's
//! own, with SHA-256 ([`Sha256`]), so that every tool of the transparency-log ecosystem (Go's
//! `tlog`, C2SP tiles and witnesses) computes the same roots and proofs.

use sha2::Digest as _;

use crate::Digest;

/// The hash functions of a Merkle tree: `leaf(d) = H(0x00 ‖ d)`, `node(l, r) = H(0x01 ‖ l ‖ r)`
/// and the root of the empty tree `H()`.
pub trait MerkleHasher {
    /// The root of the tree with no leaves: the hash of the empty string.
    fn empty_root(&self) -> Digest;
    /// The leaf hash of one entry: `H(0x00 ‖ data)`.
    fn leaf(&self, data: &[u8]) -> Digest;
    /// The hash of an interior node from its two children: `H(0x01 ‖ left ‖ right)`.
    fn node(&self, left: &Digest, right: &Digest) -> Digest;
}

impl<H: MerkleHasher + ?Sized> MerkleHasher for &H {
    fn empty_root(&self) -> Digest {
        (**self).empty_root()
    }

    fn leaf(&self, data: &[u8]) -> Digest {
        (**self).leaf(data)
    }

    fn node(&self, left: &Digest, right: &Digest) -> Digest {
        (**self).node(left, right)
    }
}

/// Prefix of a leaf hash input (RFC 6962 §2.1).
pub const LEAF_PREFIX: u8 = 0x00;
/// Prefix of an interior node hash input (RFC 6962 §2.1).
pub const NODE_PREFIX: u8 = 0x01;

/// The ledger's tree hash: SHA-256 with the RFC 6962 prefixes, exactly RFC 6962 §2.1. A leaf's
/// data is the 32-byte hash of one event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sha256;

impl MerkleHasher for Sha256 {
    fn empty_root(&self) -> Digest {
        Digest(sha2::Sha256::digest([]).into())
    }

    fn leaf(&self, data: &[u8]) -> Digest {
        // A leaf is an event hash: one 33-byte message from the stack, one call.
        if let Ok(hash) = <&[u8; 32]>::try_from(data) {
            let mut input = [LEAF_PREFIX; 33];
            input[1..].copy_from_slice(hash);
            return Digest(sha2::Sha256::digest(input).into());
        }
        let mut hasher = sha2::Sha256::new();
        hasher.update([LEAF_PREFIX]);
        hasher.update(data);
        Digest(hasher.finalize().into())
    }

    fn node(&self, left: &Digest, right: &Digest) -> Digest {
        let mut input = [NODE_PREFIX; 65];
        input[1..33].copy_from_slice(left.as_bytes());
        input[33..].copy_from_slice(right.as_bytes());
        Digest(sha2::Sha256::digest(input).into())
    }
}
