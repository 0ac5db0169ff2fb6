//! The three hash functions that define a Merkle tree of RFC 6962 / RFC 9162 §2.1 shape.
//!
//! A leaf hash and an interior node hash start with different bytes (0x00 and 0x01), so a leaf
//! can never be passed off as an interior node or the other way round (a second-preimage attack
//! on the tree). The tree algorithms are generic over the hash so that they can be checked
//! against the published SHA-256 test vectors, while the ledger itself uses BLAKE3.

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

/// The ledger's tree hash: BLAKE3 with the RFC 6962 prefixes. A leaf's data is the 32-byte hash
/// of one event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Blake3;

impl MerkleHasher for Blake3 {
    fn empty_root(&self) -> Digest {
        Digest(*blake3::hash(&[]).as_bytes())
    }

    fn leaf(&self, data: &[u8]) -> Digest {
        // A leaf is an event hash: hashed in one call from the stack, which costs less than
        // the incremental hasher's bookkeeping (it is a third of what verification hashes).
        if let Ok(hash) = <&[u8; 32]>::try_from(data) {
            let mut input = [LEAF_PREFIX; 33];
            input[1..].copy_from_slice(hash);
            return Digest(*blake3::hash(&input).as_bytes());
        }
        let mut hasher = blake3::Hasher::new();
        hasher.update(&[LEAF_PREFIX]);
        hasher.update(data);
        Digest(*hasher.finalize().as_bytes())
    }

    fn node(&self, left: &Digest, right: &Digest) -> Digest {
        let mut input = [NODE_PREFIX; 65];
        input[1..33].copy_from_slice(left.as_bytes());
        input[33..].copy_from_slice(right.as_bytes());
        Digest(*blake3::hash(&input).as_bytes())
    }
}
