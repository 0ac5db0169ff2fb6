//! Ed25519 keys, signatures and key fingerprints as the ledger writes them.
//!
//! The types wrap `ed25519-dalek` so that callers depend on this crate's formats only: a public
//! key is 64 lowercase hex digits, a signature 128, and a key's fingerprint is the first 16 hex
//! digits of the BLAKE3 hash of the 32-byte public key. A signing key is made from 32 bytes the
//! caller draws from a secure random source; this crate draws no randomness of its own.

use ed25519_dalek::Signer as _;
use thiserror::Error;

use crate::hex_text::{HexError, hex_newtype};

/// An Ed25519 signing key. Its `Debug` output shows only the fingerprint, never the secret.
pub struct SigningKey(ed25519_dalek::SigningKey);

/// An Ed25519 public key, written as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

/// The first 8 bytes (16 hex digits) of BLAKE3 of a public key: a short name for a key.
///
/// A name, not a proof: signatures are always checked with the full key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 8]);

/// An Ed25519 signature, written as 128 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature(pub [u8; 64]);

hex_newtype!(Fingerprint, 8);
hex_newtype!(Signature, 64);

/// Why a public key was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is not 64 lowercase hex digits.
    #[error("public key: {0}")]
    Hex(#[from] HexError),
    /// The 32 bytes are not the encoding of a point on the Ed25519 curve: not a public key.
    #[error("not an Ed25519 public key")]
    NotAKey,
    /// The key is a point of small order, for which signatures prove nothing (many messages
    /// verify under it). No honest key generation produces one.
    #[error("a weak Ed25519 public key (small order), under which signatures prove nothing")]
    WeakKey,
}

/// A signature that does not verify under the key it was checked with: the signed text was
/// altered, or another key signed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the signature does not verify")]
pub struct BadSignature;

impl SigningKey {
    /// The signing key whose secret is `secret`: 32 bytes from a secure random source, or read
    /// back from where the key is kept.
    pub fn from_secret_bytes(secret: &[u8; 32]) -> Self {
        Self(ed25519_dalek::SigningKey::from_bytes(secret))
    }

    /// The 32 secret bytes, for keeping the key. Whoever holds them can sign checkpoints.
    pub fn to_secret_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The fingerprint of the matching public key.
    pub fn fingerprint(&self) -> Fingerprint {
        self.public_key().fingerprint()
    }

    /// Signs `message` (Ed25519 is deterministic: the same key and text give the same bytes).
    pub(crate) fn sign(&self, message: &[u8]) -> Signature {
        Signature(self.0.sign(message).to_bytes())
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl PublicKey {
    /// Parses 32 bytes, refusing anything that is not a usable Ed25519 public key.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<Self, KeyError> {
        let key = ed25519_dalek::VerifyingKey::from_bytes(bytes).map_err(|_| KeyError::NotAKey)?;
        if key.is_weak() {
            return Err(KeyError::WeakKey);
        }
        Ok(Self(key))
    }

    /// The 32 bytes of the key.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The key's fingerprint: the first 16 hex digits of BLAKE3 of its 32 bytes.
    pub fn fingerprint(&self) -> Fingerprint {
        let hash = blake3::hash(self.0.as_bytes());
        let mut short = [0u8; 8];
        short.copy_from_slice(&hash.as_bytes()[..8]);
        Fingerprint(short)
    }

    /// Checks `signature` over `message` under this key.
    ///
    /// Uses Ed25519's strict verification, which also refuses malleated signatures, so that a
    /// signed text has exactly one valid signature per key.
    pub fn verify(&self, message: &[u8], signature: &Signature) -> Result<(), BadSignature> {
        let signature = ed25519_dalek::Signature::from_bytes(&signature.0);
        self.0
            .verify_strict(message, &signature)
            .map_err(|_| BadSignature)
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0.as_bytes()))
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl std::str::FromStr for PublicKey {
    type Err = KeyError;

    fn from_str(text: &str) -> Result<Self, KeyError> {
        Self::from_bytes(&crate::hex_text::decode::<32>(text)?)
    }
}

impl serde::Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
