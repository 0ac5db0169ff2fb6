//! What the ledger benchmark writes.
//!
//! Payloads are pseudo-random rather than repeated bytes so that nothing on the way to the disk
//! (a compressing file system, a deduplicating device) makes them cheaper than real events.

use ledger::{AppendRequest, ExpectedVersion, NewEvent};

/// Size of every benchmark event's payload.
pub(super) const PAYLOAD_BYTES: usize = 300;

/// The kind every benchmark event carries.
const KIND: &str = "bench_appended";

/// The actor every benchmark append names.
const ACTOR: &str = "bench";

/// A small deterministic generator (xorshift64*): the same run writes the same bytes.
#[derive(Debug, Clone)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        // Zero is the one state xorshift never leaves.
        Rng((seed ^ 0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `len` pseudo-random bytes.
    pub(super) fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// A number in `0..bound` (`bound > 0`); the slight bias of a modulo does not matter for
    /// picking which events to prove.
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

/// One append of one benchmark event to `stream`, whatever the stream's version.
pub(super) fn append_request(stream: &str, rng: &mut Rng) -> AppendRequest {
    AppendRequest {
        stream: stream.to_owned(),
        expected: ExpectedVersion::Any,
        actor: ACTOR.to_owned(),
        events: vec![NewEvent {
            kind: KIND.to_owned(),
            payload: rng.bytes(PAYLOAD_BYTES),
            causation: Vec::new(),
        }],
        idempotency: None,
        content: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_have_the_stated_size_and_differ() {
        let mut rng = Rng::new(7);
        let a = rng.bytes(PAYLOAD_BYTES);
        let b = rng.bytes(PAYLOAD_BYTES);
        assert_eq!(a.len(), PAYLOAD_BYTES);
        assert_eq!(b.len(), PAYLOAD_BYTES);
        assert_ne!(a, b);
    }
}
