//! The 32-byte hash value that every leaf hash, interior node and tree root is.

use crate::hex_text::hex_newtype;

/// A 32-byte hash: a Merkle leaf hash, an interior node hash or a tree root.
///
/// Written as 64 lowercase hex digits in text and JSON.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Number of bytes in a digest.
    pub const LEN: usize = 32;

    /// The all-zero digest, which the ledger uses as the `prev_hash` of its first event.
    pub const ZERO: Digest = Digest([0; 32]);

    /// The 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl From<[u8; 32]> for Digest {
    fn from(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

hex_newtype!(Digest, 32);
