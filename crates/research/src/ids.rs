//! Identifiers, hashes and citations.
//!
//! Every id the domain hands out is derived from the state (`ev-7`, `sq-2`, `cf-3`, `cl-1`), never
//! random, so replaying the same events always names things the same way. Hashes are 32-byte
//! values shown as lower-case hex to people and kept as raw bytes in the binary encoding.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! sequential_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The prefix every id of this kind starts with.
            pub const PREFIX: &'static str = $prefix;

            /// The id of the `n`th item of this kind in a task (1-based).
            pub fn nth(n: usize) -> Self {
                Self(format!("{}-{}", $prefix, n))
            }

            /// Wraps a caller-supplied id; whether it names anything is checked where it is used.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

sequential_id!(
    /// An evidence item of a task: `ev-1`, `ev-2`, …
    EvidenceId,
    "ev"
);
sequential_id!(
    /// A sub-question of a task, the scope of the evidence that answers it: `sq-1`, …
    SubQuestionId,
    "sq"
);
sequential_id!(
    /// One adjudication of one scope: `cf-1`, … A fresh adjudication of the same scope gets a
    /// new id and supersedes the old one.
    ConflictId,
    "cf"
);
sequential_id!(
    /// A conclusion: `cl-1`, … A later conclusion supersedes an earlier one.
    ConclusionId,
    "cl"
);
sequential_id!(
    /// A recorded search: `se-1`, …
    SearchId,
    "se"
);
sequential_id!(
    /// A decision matrix: `mx-1`, …
    MatrixId,
    "mx"
);
sequential_id!(
    /// A research synthesis: `sy-1`, …
    SynthesisId,
    "sy"
);
sequential_id!(
    /// An explanation: `ex-1`, …
    ExplanationId,
    "ex"
);

/// A 32-byte digest: the content hash of an evidence text, the hash of a ledger event, or the
/// hash of a tool call's arguments or reply. Hex in human-readable encodings, raw bytes otherwise.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hash32(pub [u8; 32]);

impl Hash32 {
    /// Lower-case hex, 64 digits.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// The first `digits` hex digits, for compact display next to the full value elsewhere.
    pub fn short_hex(&self, digits: usize) -> String {
        let mut hex = self.to_hex();
        hex.truncate(digits);
        hex
    }

    /// Parses 64 hex digits (either case).
    pub fn from_hex(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = hex_value(pair[0])?;
            let lo = hex_value(pair[1])?;
            out[i] = (hi << 4) | lo;
        }
        Some(Self(out))
    }
}

impl fmt::Debug for Hash32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash32({})", self.to_hex())
    }
}

impl fmt::Display for Hash32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Serialize for Hash32 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_hex())
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Hash32 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            Hash32::from_hex(&text)
                .ok_or_else(|| serde::de::Error::custom("expected 64 hexadecimal digits"))
        } else {
            <[u8; 32]>::deserialize(deserializer).map(Hash32)
        }
    }
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// What the ledger knows about an event once it is stored; `evolve` receives it with the event
/// so the state can cite what established each fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventMeta {
    /// Global position in the ledger, from 0.
    pub seq: u64,
    /// Position within the task's stream, from 1.
    pub stream_version: u64,
    /// The event's hash in the chain.
    pub hash: [u8; 32],
    /// When the ledger recorded it.
    pub recorded_at: DateTime<Utc>,
    /// Who caused it.
    pub actor: String,
}

/// A reference to the event that established a fact: its ledger position and hash. Explanations
/// print these next to every line so an auditor can find and check the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cite {
    /// Global position in the ledger.
    pub seq: u64,
    /// Position within the task's stream.
    pub version: u64,
    /// The event's hash.
    pub hash: Hash32,
}

impl Cite {
    /// The citation of the event described by `meta`.
    pub fn of(meta: &EventMeta) -> Self {
        Self {
            seq: meta.seq,
            version: meta.stream_version,
            hash: Hash32(meta.hash),
        }
    }

    /// `#seq hash-prefix`, the compact form used in markdown.
    pub fn short(&self) -> String {
        format!("#{} {}", self.seq, self.hash.short_hex(12))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_bad_text() {
        let hash = Hash32([0xab; 32]);
        assert_eq!(Hash32::from_hex(&hash.to_hex()), Some(hash));
        assert_eq!(Hash32::from_hex(&hash.to_hex().to_uppercase()), Some(hash));
        assert_eq!(Hash32::from_hex("ab"), None);
        assert_eq!(Hash32::from_hex(&"zz".repeat(32)), None);
        // A multi-byte character must not split the pairs into something that parses.
        assert_eq!(Hash32::from_hex(&format!("é{}", "a".repeat(62))), None);
    }

    #[test]
    fn ids_are_sequential_and_prefixed() {
        assert_eq!(EvidenceId::nth(7).as_str(), "ev-7");
        assert_eq!(ConflictId::nth(3).to_string(), "cf-3");
        assert_eq!(ConclusionId::nth(1).as_str(), "cl-1");
        assert_eq!(SubQuestionId::nth(2).as_str(), "sq-2");
    }

    #[test]
    fn hash_is_hex_for_people_and_bytes_for_the_binary_codec() {
        let hash = Hash32([1; 32]);
        let json = serde_json::to_string(&hash).unwrap();
        assert_eq!(json, format!("\"{}\"", "01".repeat(32)));
        let back: Hash32 = serde_json::from_str(&json).unwrap();
        assert_eq!(back, hash);
        let bytes = postcard::to_stdvec(&hash).unwrap();
        assert_eq!(bytes, vec![1u8; 32]);
        let back: Hash32 = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, hash);
    }
}
