//! C2SP signed notes (<https://c2sp.org/signed-note>): a text, a blank line, and signature lines
//! `— <key name> base64(key ID ‖ signature)`, with verifier keys written
//! `<key name>+<hex key ID>+base64(type ‖ public key)`.
//!
//! Checkpoints, key rotations and witness cosignatures are all notes, so that any tool of the
//! transparency-log ecosystem (Go's `golang.org/x/mod/sumdb/note`, witnesses, monitors) reads
//! them. This module knows the note syntax and the two signature types the ledger uses:
//! Ed25519 (type `0x01`), by which the log signs, and timestamped Ed25519 cosignatures (type
//! `0x04`, <https://c2sp.org/tlog-cosignature>), by which witnesses sign.

use base64::Engine as _;
use sha2::Digest as _;
use thiserror::Error;

use crate::keys::{BadSignature, KeyError, PublicKey, SigningKey};

/// Signature type of an Ed25519 note signature.
pub const TYPE_ED25519: u8 = 0x01;
/// Signature type of a timestamped Ed25519 checkpoint cosignature (c2sp.org/tlog-cosignature).
pub const TYPE_COSIGNATURE_V1: u8 = 0x04;
/// The largest note read, in bytes: a checkpoint with many cosignatures is well under it.
pub const NOTE_BYTES_MAX: usize = 64 * 1024;
/// The most signature lines read from one note; C2SP asks verifiers to accept at least 16.
pub const NOTE_SIGNATURES_MAX: usize = 64;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Why a note, a signature line or a verifier key was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NoteError {
    /// The note is longer than [`NOTE_BYTES_MAX`] or has more than [`NOTE_SIGNATURES_MAX`]
    /// signatures.
    #[error("the note is too large")]
    TooLarge,
    /// Not a note: no blank line before the signatures, a control character, a text that does
    /// not end in a newline, or a signature line that is not `— name base64`.
    #[error("not a signed note: {0}")]
    Malformed(String),
    /// A key name that is empty or holds a space or a `+`.
    #[error("{0:?} is not a key name (non-empty, no spaces, no '+')")]
    BadKeyName(String),
    /// A verifier key that is not `name+hex8+base64`, or whose key ID is not the one its name,
    /// type and key give.
    #[error("not a verifier key: {0}")]
    BadVerifierKey(String),
    /// A verifier key of another signature type than the one expected.
    #[error("verifier key of type {found:#04x}, expected {expected:#04x}")]
    WrongType {
        /// The type found.
        found: u8,
        /// The type expected.
        expected: u8,
    },
    /// The public key inside a verifier key is not an Ed25519 key.
    #[error("verifier key: {0}")]
    Key(#[from] KeyError),
    /// No signature line from the key asked for.
    #[error("the note carries no signature by {0}")]
    NotSigned(String),
    /// A signature line of the key asked for does not verify.
    #[error("the signature by {0} does not verify")]
    BadSignature(String),
}

/// Checks a key name: non-empty, no Unicode space, no `+`.
pub fn check_key_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c == '+' || c.is_control())
    {
        return Err(NoteError::BadKeyName(name.chars().take(64).collect()));
    }
    Ok(())
}

/// `SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4]`: the key ID C2SP gives both signature types.
pub fn key_id(name: &str, sig_type: u8, public_key: &[u8]) -> [u8; 4] {
    let mut hasher = sha2::Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update([b'\n', sig_type]);
    hasher.update(public_key);
    let hash = hasher.finalize();
    [hash[0], hash[1], hash[2], hash[3]]
}

/// A verifier key: a name, a signature type and an Ed25519 public key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VerifierKey {
    name: String,
    sig_type: u8,
    key: PublicKey,
}

impl VerifierKey {
    /// The key that verifies `name`'s Ed25519 note signatures (type `0x01`).
    pub fn ed25519(name: &str, key: PublicKey) -> Result<Self, NoteError> {
        Self::new(name, TYPE_ED25519, key)
    }

    /// The key that verifies `name`'s checkpoint cosignatures (type `0x04`).
    pub fn cosigner(name: &str, key: PublicKey) -> Result<Self, NoteError> {
        Self::new(name, TYPE_COSIGNATURE_V1, key)
    }

    fn new(name: &str, sig_type: u8, key: PublicKey) -> Result<Self, NoteError> {
        check_key_name(name)?;
        Ok(Self {
            name: name.to_owned(),
            sig_type,
            key,
        })
    }

    /// Parses `name+hex8+base64(type ‖ key)`, checking that the key ID is the one the rest gives.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let bad = |why: &str| NoteError::BadVerifierKey(format!("{why}: {:?}", short(text)));
        let mut parts = text.trim().splitn(3, '+');
        let (Some(name), Some(id), Some(material), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not three parts joined by '+'"));
        };
        check_key_name(name)?;
        if id.len() != 8
            || id
                .chars()
                .any(|c| !c.is_ascii_hexdigit() || c.is_ascii_uppercase())
        {
            return Err(bad("the key ID is not 8 lowercase hex digits"));
        }
        let bytes = B64
            .decode(material)
            .map_err(|_| bad("the key is not base64"))?;
        let [sig_type, rest @ ..] = bytes.as_slice() else {
            return Err(bad("no key material"));
        };
        let Ok(raw) = <[u8; 32]>::try_from(rest) else {
            return Err(bad("the key is not 32 bytes"));
        };
        if ![TYPE_ED25519, TYPE_COSIGNATURE_V1].contains(sig_type) {
            return Err(bad("an unknown signature type"));
        }
        let key = PublicKey::from_bytes(&raw)?;
        let vkey = Self::new(name, *sig_type, key)?;
        if hex::encode(vkey.id()) != id {
            return Err(bad("the key ID is not the hash of the name and key"));
        }
        Ok(vkey)
    }

    /// Parses a verifier key and requires its type.
    pub fn parse_typed(text: &str, sig_type: u8) -> Result<Self, NoteError> {
        let vkey = Self::parse(text)?;
        if vkey.sig_type != sig_type {
            return Err(NoteError::WrongType {
                found: vkey.sig_type,
                expected: sig_type,
            });
        }
        Ok(vkey)
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The signature type.
    pub fn sig_type(&self) -> u8 {
        self.sig_type
    }

    /// The Ed25519 public key.
    pub fn key(&self) -> &PublicKey {
        &self.key
    }

    /// The key ID.
    pub fn id(&self) -> [u8; 4] {
        key_id(&self.name, self.sig_type, &self.key.to_bytes())
    }
}

impl std::fmt::Display for VerifierKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut material = vec![self.sig_type];
        material.extend_from_slice(&self.key.to_bytes());
        write!(
            f,
            "{}+{}+{}",
            self.name,
            hex::encode(self.id()),
            B64.encode(material)
        )
    }
}

impl std::str::FromStr for VerifierKey {
    type Err = NoteError;
    fn from_str(text: &str) -> Result<Self, NoteError> {
        Self::parse(text)
    }
}

impl serde::Serialize for VerifierKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for VerifierKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One signature line: the key name, the key ID and the signature bytes after the ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    /// The signer's key name.
    pub name: String,
    /// The key ID.
    pub id: [u8; 4],
    /// What follows the key ID: 64 bytes for Ed25519, 8 + 64 for a cosignature.
    pub bytes: Vec<u8>,
}

impl NoteSignature {
    /// `— <name> base64(id ‖ bytes)\n`.
    pub fn line(&self) -> String {
        format!("\u{2014} {} {}\n", self.name, self.base64())
    }

    /// `base64(id ‖ bytes)`, the second field of the line.
    pub fn base64(&self) -> String {
        let mut raw = self.id.to_vec();
        raw.extend_from_slice(&self.bytes);
        B64.encode(raw)
    }

    /// Parses one signature line, without its newline.
    pub fn parse_line(line: &str) -> Result<Self, NoteError> {
        let bad = || NoteError::Malformed(format!("signature line {:?}", short(line)));
        let rest = line.strip_prefix("\u{2014} ").ok_or_else(bad)?;
        let (name, signature) = rest.split_once(' ').ok_or_else(bad)?;
        check_key_name(name).map_err(|_| bad())?;
        let raw = B64.decode(signature).map_err(|_| bad())?;
        if raw.len() < 5 {
            return Err(bad());
        }
        Ok(Self {
            name: name.to_owned(),
            id: [raw[0], raw[1], raw[2], raw[3]],
            bytes: raw[4..].to_vec(),
        })
    }

    /// Whether this line claims to be by `vkey` (same name and key ID).
    pub fn is_by(&self, vkey: &VerifierKey) -> bool {
        self.name == vkey.name && self.id == vkey.id()
    }
}

/// A parsed note: its text (ending in a newline) and its signature lines, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The signed text, final newline included, separating blank line excluded.
    pub text: String,
    /// The signature lines.
    pub signatures: Vec<NoteSignature>,
}

impl Note {
    /// Parses a note as C2SP defines it: UTF-8 with no control character but newline, the text
    /// separated from one or more signature lines by the last blank line.
    pub fn parse(note: &str) -> Result<Self, NoteError> {
        if note.len() > NOTE_BYTES_MAX {
            return Err(NoteError::TooLarge);
        }
        if note.chars().any(|c| c != '\n' && c.is_control()) {
            return Err(NoteError::Malformed("a control character".into()));
        }
        if !note.ends_with('\n') {
            return Err(NoteError::Malformed("it does not end in a newline".into()));
        }
        let split = note
            .rfind("\n\n")
            .ok_or_else(|| NoteError::Malformed("no blank line before the signatures".into()))?;
        let text = &note[..split + 1];
        let lines = &note[split + 2..];
        let signatures = lines
            .lines()
            .map(NoteSignature::parse_line)
            .collect::<Result<Vec<_>, _>>()?;
        if signatures.is_empty() {
            return Err(NoteError::Malformed("no signature lines".into()));
        }
        if signatures.len() > NOTE_SIGNATURES_MAX {
            return Err(NoteError::TooLarge);
        }
        Ok(Self {
            text: text.to_owned(),
            signatures,
        })
    }

    /// The note as text: the text, a blank line, the signature lines.
    pub fn render(&self) -> String {
        let mut out = self.text.clone();
        out.push('\n');
        for signature in &self.signatures {
            out.push_str(&signature.line());
        }
        out
    }

    /// Checks the Ed25519 signature of `vkey` on the text: C2SP's rule, lines by other keys
    /// ignored, one line by the key that fails refused.
    pub fn verify_ed25519(&self, vkey: &VerifierKey) -> Result<(), NoteError> {
        if vkey.sig_type != TYPE_ED25519 {
            return Err(NoteError::WrongType {
                found: vkey.sig_type,
                expected: TYPE_ED25519,
            });
        }
        let mut found = false;
        for signature in self.signatures.iter().filter(|s| s.is_by(vkey)) {
            verify_ed25519(&self.text, signature, vkey)?;
            found = true;
        }
        if found {
            Ok(())
        } else {
            Err(NoteError::NotSigned(vkey.name.clone()))
        }
    }
}

/// The Ed25519 note signature of `text` by `key` under `name`.
pub fn sign_ed25519(text: &str, name: &str, key: &SigningKey) -> Result<NoteSignature, NoteError> {
    check_key_name(name)?;
    Ok(NoteSignature {
        name: name.to_owned(),
        id: key_id(name, TYPE_ED25519, &key.public_key().to_bytes()),
        bytes: key.sign(text.as_bytes()).0.to_vec(),
    })
}

/// Checks one Ed25519 signature line over `text` under `vkey`.
pub fn verify_ed25519(
    text: &str,
    signature: &NoteSignature,
    vkey: &VerifierKey,
) -> Result<(), NoteError> {
    let bad = || NoteError::BadSignature(vkey.name.clone());
    if !signature.is_by(vkey) {
        return Err(bad());
    }
    let raw = <[u8; 64]>::try_from(signature.bytes.as_slice()).map_err(|_| bad())?;
    vkey.key
        .verify(text.as_bytes(), &crate::keys::Signature(raw))
        .map_err(|BadSignature| bad())
}

fn short(text: &str) -> String {
    text.chars().take(80).collect()
}
