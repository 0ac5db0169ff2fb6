//! The event envelope: the fields every event carries, their exact bytes, and the hash that
//! chains each event to the one before it.
//!
//! The stored form of an event is `body ‖ hash`, where `body` is the postcard encoding of the
//! envelope without its hash and `hash = blake3("research-ledger/event/v1" ‖ prev_hash ‖ body)`.
//! Verification hashes the stored bytes as they are; nothing is ever re-encoded to be checked, so
//! a future change of encoder can never make an old ledger fail to verify.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The domain-separation prefix of the event hash. Changing it would start a new ledger format.
pub const EVENT_HASH_DOMAIN: &[u8] = b"research-ledger/event/v1";

/// Length of a hash in bytes.
pub const HASH_LEN: usize = 32;

pub use ledger_proof::Digest;

/// The chain hash of an event: `blake3(EVENT_HASH_DOMAIN ‖ prev_hash ‖ body)`.
pub fn chain_hash(prev_hash: &Digest, body: &[u8]) -> Digest {
    thread_local! {
        /// The hash input, laid out in one buffer that each thread reuses.
        static INPUT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    // Hashed in one call from a contiguous copy, an event skips the incremental hasher's
    // state (about two kilobytes set up and moved per hash), a sixth of what verifying an
    // event of a few hundred bytes costs. Same bytes, same hash.
    INPUT.with(|input| match input.try_borrow_mut() {
        Ok(mut input) => {
            input.clear();
            input.extend_from_slice(EVENT_HASH_DOMAIN);
            input.extend_from_slice(&prev_hash.0);
            input.extend_from_slice(body);
            Digest(*blake3::hash(&input).as_bytes())
        }
        Err(_) => {
            let mut hasher = blake3::Hasher::new();
            hasher.update(EVENT_HASH_DOMAIN);
            hasher.update(&prev_hash.0);
            hasher.update(body);
            Digest(*hasher.finalize().as_bytes())
        }
    })
}

/// The wire form of the envelope without its hash. Field order is the encoding order and is
/// part of the ledger format: never reorder, never insert.
#[derive(Serialize, Deserialize)]
struct WireEnvelope<'a> {
    seq: u64,
    #[serde(borrow)]
    stream: &'a str,
    stream_version: u64,
    event_id: [u8; 16],
    #[serde(borrow)]
    kind: &'a str,
    /// Microseconds since the Unix epoch, UTC.
    recorded_at_us: i64,
    #[serde(borrow)]
    actor: &'a str,
    causation: Vec<[u8; HASH_LEN]>,
    #[serde(borrow)]
    payload: &'a [u8],
    prev_hash: [u8; HASH_LEN],
}

/// The wire form read without copying, for checks that need no field owned: the same fields
/// in the same order as [`WireEnvelope`], with the causation links counted rather than
/// collected. The fields verification does not use are still read, so that they are checked.
#[derive(Deserialize)]
#[expect(
    dead_code,
    reason = "kind, actor, causation and payload are decoded to be checked"
)]
struct WireEnvelopeRef<'a> {
    seq: u64,
    #[serde(borrow)]
    stream: &'a str,
    stream_version: u64,
    event_id: [u8; 16],
    #[serde(borrow)]
    kind: &'a str,
    recorded_at_us: i64,
    #[serde(borrow)]
    actor: &'a str,
    causation: CausationCount,
    #[serde(borrow)]
    payload: &'a [u8],
    prev_hash: [u8; HASH_LEN],
}

/// A list of causation hashes read and counted, not kept: decoding it checks exactly what
/// decoding a `Vec<[u8; HASH_LEN]>` checks, without allocating.
struct CausationCount;

impl<'de> Deserialize<'de> for CausationCount {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Count;
        impl<'de> serde::de::Visitor<'de> for Count {
            type Value = CausationCount;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence of hashes")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<CausationCount, A::Error> {
                while seq.next_element::<[u8; HASH_LEN]>()?.is_some() {}
                Ok(CausationCount)
            }
        }
        deserializer.deserialize_seq(Count)
    }
}

/// What verification needs of a stored event, borrowed from its stored bytes: decoding it
/// allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventRef<'a> {
    /// Position in the global log.
    pub(crate) seq: u64,
    /// The stream.
    pub(crate) stream: &'a str,
    /// Position within the stream.
    pub(crate) stream_version: u64,
    /// The event id.
    pub(crate) event_id: Uuid,
    /// Hash of the event before it.
    pub(crate) prev_hash: Digest,
    /// The chain hash, checked against the stored body.
    pub(crate) hash: Digest,
}

/// Everything an event's envelope says, before it is hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Position in the global log, from 0.
    pub seq: u64,
    /// The stream (for research, the task id) the event belongs to.
    pub stream: String,
    /// Position within the stream, from 1.
    pub stream_version: u64,
    /// UUIDv7, or UUIDv8 derived from an idempotency key.
    pub event_id: Uuid,
    /// What kind of event this is; meaningful to the layer that wrote it.
    pub kind: String,
    /// When the ledger recorded it (UTC, microsecond precision).
    pub recorded_at: DateTime<Utc>,
    /// Who caused it.
    pub actor: String,
    /// Hashes of the events this one was derived from.
    pub causation: Vec<Digest>,
    /// The typed event, encoded by the layer that wrote it.
    pub payload: Vec<u8>,
    /// Hash of the event at `seq - 1`, or zero for the first event.
    pub prev_hash: Digest,
}

/// An event exactly as the ledger holds it: its envelope, its hash and its stored bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    /// The decoded envelope.
    pub envelope: Envelope,
    /// The chain hash.
    pub hash: Digest,
}

impl std::ops::Deref for RecordedEvent {
    type Target = Envelope;
    fn deref(&self) -> &Envelope {
        &self.envelope
    }
}

/// Stored event bytes that do not decode. Carries no seq: the caller knows where it read them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than a hash.
    #[error("stored event is {0} bytes, shorter than its hash")]
    TooShort(usize),
    /// The body is not a postcard envelope.
    #[error("envelope does not decode: {0}")]
    Envelope(String),
    /// The body decoded but bytes were left over.
    #[error("{0} trailing bytes after the envelope")]
    TrailingBytes(usize),
    /// The recorded time is outside what the ledger can represent.
    #[error("recorded_at {0} µs is out of range")]
    Time(i64),
    /// The stored hash is not the hash of the stored body.
    #[error("stored hash {stored} is not the hash of the stored bytes ({computed})")]
    HashMismatch {
        /// The hash found in the stored bytes.
        stored: Digest,
        /// The hash the stored body actually has.
        computed: Digest,
    },
}

impl Envelope {
    /// Encodes the envelope without its hash: the `body` that is hashed and stored.
    pub fn encode_body(&self) -> Vec<u8> {
        let causation: Vec<[u8; HASH_LEN]> = self.causation.iter().map(|d| d.0).collect();
        let wire = WireEnvelope {
            seq: self.seq,
            stream: &self.stream,
            stream_version: self.stream_version,
            event_id: *self.event_id.as_bytes(),
            kind: &self.kind,
            recorded_at_us: self.recorded_at.timestamp_micros(),
            actor: &self.actor,
            causation,
            payload: &self.payload,
            prev_hash: self.prev_hash.0,
        };
        // Serialising plain integers, strings and byte slices into a Vec cannot fail.
        postcard::to_stdvec(&wire).unwrap_or_default()
    }

    /// Encodes and hashes the envelope, giving the stored bytes (`body ‖ hash`) and the hash.
    pub fn seal(&self) -> (Vec<u8>, Digest) {
        let mut bytes = self.encode_body();
        let hash = chain_hash(&self.prev_hash, &bytes);
        bytes.extend_from_slice(&hash.0);
        (bytes, hash)
    }
}

/// Splits stored bytes into `(body, stored hash)`.
pub fn split_stored(stored: &[u8]) -> Result<(&[u8], Digest), DecodeError> {
    if stored.len() < HASH_LEN {
        return Err(DecodeError::TooShort(stored.len()));
    }
    let (body, tail) = stored.split_at(stored.len() - HASH_LEN);
    let mut hash = [0u8; HASH_LEN];
    hash.copy_from_slice(tail);
    Ok((body, Digest(hash)))
}

/// Checks stored event bytes as [`decode_stored`] does — the envelope decodes to its end, its
/// time is in range, the stored hash is the hash of the stored body — and gives the fields the
/// chain is checked with, borrowed.
pub(crate) fn decode_stored_ref(stored: &[u8]) -> Result<EventRef<'_>, DecodeError> {
    let (body, stored_hash) = split_stored(stored)?;
    let (wire, rest) = postcard::take_from_bytes::<WireEnvelopeRef<'_>>(body)
        .map_err(|e| DecodeError::Envelope(e.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes(rest.len()));
    }
    let prev_hash = Digest(wire.prev_hash);
    let computed = chain_hash(&prev_hash, body);
    if computed != stored_hash {
        return Err(DecodeError::HashMismatch {
            stored: stored_hash,
            computed,
        });
    }
    if DateTime::<Utc>::from_timestamp_micros(wire.recorded_at_us).is_none() {
        return Err(DecodeError::Time(wire.recorded_at_us));
    }
    Ok(EventRef {
        seq: wire.seq,
        stream: wire.stream,
        stream_version: wire.stream_version,
        event_id: Uuid::from_bytes(wire.event_id),
        prev_hash,
        hash: stored_hash,
    })
}

/// Decodes stored event bytes and checks that the stored hash is the hash of the stored body.
///
/// This checks the event against itself only; whether its `prev_hash` is the previous event's
/// hash is for the caller, who knows the previous event, to check.
pub fn decode_stored(stored: &[u8]) -> Result<RecordedEvent, DecodeError> {
    let (body, stored_hash) = split_stored(stored)?;
    let (wire, rest) = postcard::take_from_bytes::<WireEnvelope<'_>>(body)
        .map_err(|e| DecodeError::Envelope(e.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes(rest.len()));
    }
    let prev_hash = Digest(wire.prev_hash);
    let computed = chain_hash(&prev_hash, body);
    if computed != stored_hash {
        return Err(DecodeError::HashMismatch {
            stored: stored_hash,
            computed,
        });
    }
    let recorded_at = DateTime::<Utc>::from_timestamp_micros(wire.recorded_at_us)
        .ok_or(DecodeError::Time(wire.recorded_at_us))?;
    Ok(RecordedEvent {
        envelope: Envelope {
            seq: wire.seq,
            stream: wire.stream.to_owned(),
            stream_version: wire.stream_version,
            event_id: Uuid::from_bytes(wire.event_id),
            kind: wire.kind.to_owned(),
            recorded_at,
            actor: wire.actor.to_owned(),
            causation: wire.causation.into_iter().map(Digest).collect(),
            payload: wire.payload.to_vec(),
            prev_hash,
        },
        hash: stored_hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Envelope {
        Envelope {
            seq: 7,
            stream: "task-1".into(),
            stream_version: 3,
            event_id: Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001),
            kind: "evidence_added".into(),
            recorded_at: DateTime::<Utc>::from_timestamp_micros(1_750_000_000_123_456)
                .expect("valid time"),
            actor: "alice".into(),
            causation: vec![Digest([9; 32])],
            payload: vec![1, 2, 3],
            prev_hash: Digest([5; 32]),
        }
    }

    #[test]
    fn seal_then_decode_round_trips() {
        let env = sample();
        let (stored, hash) = env.seal();
        let decoded = decode_stored(&stored).expect("decodes");
        assert_eq!(decoded.envelope, env);
        assert_eq!(decoded.hash, hash);
        let borrowed = decode_stored_ref(&stored).expect("decodes borrowed");
        assert_eq!(
            borrowed,
            EventRef {
                seq: env.seq,
                stream: &env.stream,
                stream_version: env.stream_version,
                event_id: env.event_id,
                prev_hash: env.prev_hash,
                hash,
            }
        );
        assert_eq!(hash, chain_hash(&env.prev_hash, &env.encode_body()));
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let (stored, _) = sample().seal();
        for byte in 0..stored.len() {
            for bit in 0..8 {
                let mut doctored = stored.clone();
                doctored[byte] ^= 1 << bit;
                assert!(
                    decode_stored(&doctored).is_err(),
                    "flip of bit {bit} in byte {byte} went unnoticed"
                );
                assert!(
                    decode_stored_ref(&doctored).is_err(),
                    "flip of bit {bit} in byte {byte} went unnoticed by the borrowed decode"
                );
            }
        }
    }

    #[test]
    fn trailing_and_short_input_is_refused() {
        assert!(matches!(
            decode_stored(&[0; 5]),
            Err(DecodeError::TooShort(5))
        ));
        let env = sample();
        let mut body = env.encode_body();
        body.push(0);
        let hash = chain_hash(&env.prev_hash, &body);
        body.extend_from_slice(&hash.0);
        assert!(matches!(
            decode_stored(&body),
            Err(DecodeError::TrailingBytes(1))
        ));
        assert!(matches!(
            decode_stored_ref(&body),
            Err(DecodeError::TrailingBytes(1))
        ));
        assert!(matches!(
            decode_stored_ref(&[0; 5]),
            Err(DecodeError::TooShort(5))
        ));
    }

    #[test]
    fn the_chain_hash_is_the_same_however_it_is_computed() {
        let prev = Digest([0xA5; 32]);
        for len in [0usize, 1, 63, 64, 500, 967, 968, 969, 1024, 1500, 70_000] {
            let body: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut hasher = blake3::Hasher::new();
            hasher.update(EVENT_HASH_DOMAIN);
            hasher.update(&prev.0);
            hasher.update(&body);
            assert_eq!(
                chain_hash(&prev, &body),
                Digest(*hasher.finalize().as_bytes()),
                "body of {len} bytes"
            );
        }
    }

    /// Hashes `body` as stored, taking its last 32 bytes as the previous hash (where a
    /// well-formed body has it), so that a decoder gets past the hash to everything else.
    fn stored_as_is(body: &[u8]) -> Vec<u8> {
        let prev = body.len().checked_sub(HASH_LEN).map_or(Digest::ZERO, |at| {
            let mut h = [0u8; HASH_LEN];
            h.copy_from_slice(&body[at..]);
            Digest(h)
        });
        let mut stored = body.to_vec();
        stored.extend_from_slice(&chain_hash(&prev, body).0);
        stored
    }

    fn assert_decoders_agree(stored: &[u8]) {
        let owned = decode_stored(stored);
        let borrowed = decode_stored_ref(stored);
        assert_eq!(owned.as_ref().err(), borrowed.as_ref().err(), "{stored:?}");
        if let (Ok(owned), Ok(borrowed)) = (owned, borrowed) {
            assert_eq!(
                borrowed,
                EventRef {
                    seq: owned.seq,
                    stream: &owned.stream,
                    stream_version: owned.stream_version,
                    event_id: owned.event_id,
                    prev_hash: owned.prev_hash,
                    hash: owned.hash,
                }
            );
        }
    }

    proptest::proptest! {
        /// Bodies edited at random (bytes replaced, inserted, removed), hashed as stored: the
        /// borrowed decoder takes exactly what postcard takes, with the same fields, and
        /// refuses the rest with the same error.
        #[test]
        fn both_decoders_agree_on_edited_bodies(
            edits in proptest::collection::vec(
                (proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>(), 0u8..3),
                1..6,
            ),
            causes in 0usize..3,
        ) {
            let mut env = sample();
            env.causation = vec![Digest([9; 32]); causes];
            let mut body = env.encode_body();
            for (at, byte, op) in edits {
                match op {
                    0 if !body.is_empty() => {
                        let i = at % body.len();
                        body[i] = byte;
                    }
                    1 => body.insert(at % (body.len() + 1), byte),
                    _ if !body.is_empty() => {
                        body.remove(at % body.len());
                    }
                    _ => {}
                }
            }
            assert_decoders_agree(&stored_as_is(&body));
        }
    }

    /// Bodies the encoder never writes, hashed as stored: both decoders take or refuse each
    /// alike.
    #[test]
    fn both_decoders_agree_on_what_they_accept() {
        let env = sample();
        let body = env.encode_body();
        let mut cases: Vec<Vec<u8>> = vec![body.clone()];
        // Cut short anywhere.
        for end in 0..body.len() {
            cases.push(body[..end].to_vec());
        }
        // A time out of range: recorded_at follows seq, stream, version, id and kind.
        let mut wire = postcard::to_stdvec(&WireEnvelope {
            seq: 1,
            stream: "s",
            stream_version: 1,
            event_id: [0; 16],
            kind: "k",
            recorded_at_us: i64::MAX,
            actor: "a",
            causation: vec![[3; HASH_LEN]; 2],
            payload: b"p",
            prev_hash: [0; HASH_LEN],
        })
        .expect("encodes");
        cases.push(wire.clone());
        // A causation count larger than what follows.
        if let Some(at) = wire.windows(2).position(|w| w == [1, b'a']) {
            wire[at + 2] = 200;
            cases.push(wire);
        }
        // Varints of ten bytes: the largest seq, then one whose last byte overflows.
        let mut long = vec![0xFF; 9];
        long.push(0x01);
        long.extend_from_slice(&body[1..]);
        cases.push(long.clone());
        long[9] = 0x02;
        cases.push(long);
        // A string that is not UTF-8.
        let mut bad = body.clone();
        bad[2] = 0xFF;
        cases.push(bad);
        for body in &cases {
            assert_decoders_agree(&stored_as_is(body));
        }
    }
}
